package replay

import (
	"fmt"

	"github.com/vramhq/vram/internal/units"
)

// MeasureOptions say how Measure runs.
type MeasureOptions struct {
	// Device returns the device of each pass (required).
	Device DeviceFunc
	// MinCapacity runs the bisection after the first pass.
	MinCapacity bool
	// Time adds a second pass without a cap that measures host time per
	// operation (Report.Latency) and the pass's wall time
	// (Result.WallSeconds); the other figures come from the first.
	Time bool
	// Verify checks the contents of every allocation (Options.Verify) in
	// the timed pass when there is one, like PyTorch's replay harness
	// (bench/torchreplay), whose verification runs inside its clock;
	// otherwise in the first pass. The bisection does not verify.
	Verify bool
	// Stream replays a file in the timed pass by streaming it from disk,
	// as the first pass does, so that memory stays constant whatever the
	// trace's length; the pass's wall time then includes reading,
	// decompressing and parsing the log. Off, the timed pass replays the
	// trace's Compact copy (24 bytes per record), loaded before its clock
	// starts.
	Stream bool
	// Progress, if set, receives one line per step of long work.
	Progress func(msg string)
	// ProcessMemory is Options.ProcessMemory for every pass.
	ProcessMemory func() (uint64, error)
}

// Report is what Measure found for one trace under one policy.
type Report struct {
	Trace  string
	Policy string
	*Result
	// MinCapacity is nil when it was not measured: not asked for, the
	// trace did not fit the device, or it allocates nothing.
	MinCapacity *MinCapacityResult
}

// MinCapacityOverLive is the smallest capacity over the live peak (0 when
// not measured or not found).
func (r *Report) MinCapacityOverLive() float64 {
	if r.MinCapacity == nil || !r.MinCapacity.Found || r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.MinCapacity.Bytes) / float64(r.PeakLiveBytes)
}

// Measure replays t under policy p: one pass without a cap, a second one
// timed if asked (so that the timed pass runs warm: the first pass of a
// process pays for page faults and heap growth), then, if asked and the
// trace fits, the bisection for the smallest capacity.
//
// A file is streamed in the first pass, which also keeps a Compact copy of
// it when a later pass needs one: the timed pass (unless opt.Stream) and the
// bisection replay that copy, so their clocks and their ~12 passes do not
// pay for reading and parsing the file again; later calls of Measure on t
// reuse it. If the first pass stopped short (out of memory), the file is
// read into the copy before the timed pass, outside its clock. The copy
// costs 24 bytes per record (240 MB for ten million records); with
// opt.Stream and without the bisection each pass streams the file again and
// memory stays constant.
func Measure(t *Trace, p Policy, opt MeasureOptions) (*Report, error) {
	cfg, err := p.Config()
	if err != nil {
		return nil, err
	}
	say := func(format string, args ...any) {
		if opt.Progress != nil {
			opt.Progress(fmt.Sprintf("%s %s: ", t.Name, p.Name) + fmt.Sprintf(format, args...))
		}
	}
	pass := func(keep, timed, verify bool) (*Result, *Compact, error) {
		src, closeSrc, comp, err := t.source(keep)
		if err != nil {
			return nil, nil, err
		}
		defer closeSrc()
		dev, err := opt.Device()
		if err != nil {
			return nil, nil, err
		}
		ropt := Options{Time: timed, Verify: verify, ProcessMemory: opt.ProcessMemory}
		if opt.Progress != nil {
			ropt.Progress = func(n int64) { say("%d records", n) }
		}
		res, err := Replay(src, dev, cfg, ropt)
		return res, comp, err
	}
	inMemory := opt.Time && !opt.Stream
	say("replaying")
	res, comp, err := pass(opt.MinCapacity || inMemory, false, opt.Verify && !opt.Time)
	if err != nil {
		return nil, err
	}
	if res.OOM == nil && comp != nil {
		t.compact = comp
	}
	if opt.Time {
		if inMemory {
			if err := t.load(); err != nil {
				return nil, fmt.Errorf("%s: %w", t.Name, err)
			}
		}
		say("replaying again, timed")
		timed, _, err := pass(false, true, opt.Verify)
		if err != nil {
			return nil, err
		}
		res.Latency, res.WallSeconds = timed.Latency, timed.WallSeconds
		if opt.Verify {
			res.Verified = true
			res.VerifiedAllocations, res.VerifyMismatches = timed.VerifiedAllocations, timed.VerifyMismatches
		}
		if res.DeviceLeakedBytes == 0 {
			res.DeviceLeakedBytes, res.DeviceDeltaBytes = timed.DeviceLeakedBytes, timed.DeviceDeltaBytes
		}
	}
	rep := &Report{Trace: t.Name, Policy: p.Name, Result: res}
	if !opt.MinCapacity || res.OOM != nil || res.PeakLiveBytes == 0 {
		return rep, nil
	}
	open := func() (Source, func(), error) {
		s, done, _, err := t.source(false)
		return s, done, err
	}
	say("bisecting the smallest capacity between %s and %s", units.FormatBytes(res.PeakLiveBytes), units.FormatBytes(res.PeakReservedBytes))
	mc, err := MinCapacity(open, opt.Device, cfg, res.PeakLiveBytes, res.PeakReservedBytes, func(s Step) {
		verdict := "out of memory"
		if s.Complete {
			verdict = "completes"
		}
		say("bisection pass %d: cap %s %s", s.Pass, units.FormatBytes(s.Cap), verdict)
	})
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.Name, p.Name, err)
	}
	rep.MinCapacity = &mc
	return rep, nil
}
