package serve

// What the sampling goroutine remembers between samples: each device's
// health and recent memory, each process lifetime's detector and recent
// memory; and the immutable State built from them for the latest sample.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/metrics"
	"github.com/vramhq/vram/serve/sample"
)

// devTrack is one sampled device.
type devTrack struct {
	id      gpu.Identity
	recent  *ring
	healthy bool
	err     string // why not healthy
	// The newest Xid and until when it keeps the device unhealthy.
	xid      uint64
	xidAt    time.Time
	xidUntil time.Time
	last     gpu.DeviceState // the newest successful sample
	sampled  bool            // last holds a sample
}

// procKey identifies a process lifetime on one GPU: a reused PID has a new
// start time and therefore a new key (start is Unix nanoseconds, 0 when
// unknown). The GPU is its NVML index, which names one GPU (one UUID) for
// the sampler's life.
type procKey struct {
	dev   int32
	pid   uint32
	start int64
}

func keyOf(p *gpu.Process) procKey {
	k := procKey{dev: int32(p.Device), pid: p.PID}
	if !p.StartTime.IsZero() {
		k.start = p.StartTime.UnixNano()
	}
	return k
}

// slot is where the track of a lifetime is kept (Daemon.procs): its GPU
// and PID, one number, which a map looks up much faster than the whole
// key, and every process is looked up at every sample. A PID's lifetimes
// on one GPU follow one another, so one slot holds the current one: a
// new start time replaces the track of the lifetime before, which has
// ended, as the end of a sample drops the track of a lifetime no longer
// listed.
func (k procKey) slot() uint64 { return uint64(uint32(k.dev))<<32 | uint64(k.pid) }

// procTrack is one process lifetime on one GPU.
//
// The fields every sample reads or writes come first, the detector's and
// the ring's included (they are values, not pointers, and the detector's
// own hot fields lead it): at 1,600 processes and 10 samples a second,
// what a sample costs is mostly the memory of the tracks it touches, so
// each track's hot fields fit in four cache lines. The times a sample
// compares are kept as offsets on the daemon's clock (Daemon.offsets), a
// quarter the size of a time.Time.
type procTrack struct {
	start     int64  // procKey.start
	seen      uint64 // the tick that last listed it
	queued    uint64 // the tick that last queued it for a verdict
	device    int    // NVML index
	pid       uint32 // procKey.pid
	judged    bool   // verdict holds a verdict
	confirmed bool   // the leak is confirmed (Confirm)
	announced bool   // "leak confirmed" was logged at info level for this lifetime
	gone      bool   // no longer in Daemon.procs
	// Offsets (Daemon.offsets): since when the process is idle and when its
	// verdict was last computed (never: not idle, not yet judged), and
	// when recentOut was taken from recent (never: recentOut is nil).
	idleSince, lastVerdict, recentAt int64
	// Where the lifetime is in the history interval in progress: histAt
	// is its index when histGen is the interval's (histAcc.gen) plus one;
	// histBytes and histFlags are its peak and flags in that interval,
	// which the interval's record gets when it is taken.
	histGen   uint64
	histAt    int
	histBytes uint64
	histFlags gpu.Flags
	recent    ring
	det       detect.Detector

	// recentOut is the Recent the States show (refreshRecent): at sample
	// intervals under a second it moves on once a second, which is all a
	// sparkline needs.
	recentOut []uint64
	confirm   detect.Confirm
	verdict   detect.Verdict
	// The command line as /proc has it and as shown (gpu.Printable), read
	// once per lifetime.
	command, display string
	// leak is the api form of the verdict, made when it is computed; nil
	// before the first.
	leak *api.Leak
}

// never is an offset of a time that has not come (procTrack's times).
const never = math.MinInt64

// trackClock turns a sample's time into an offset from the first sample's time,
// in nanoseconds: the differences of two offsets are those of the two
// times (time.Time.Sub: monotonic when both times have a monotonic
// reading, as the samples' times do).
type trackClock struct {
	epoch time.Time
	set   bool
}

func (c *trackClock) at(t time.Time) int64 {
	if !c.set {
		c.epoch, c.set = t, true
	}
	return int64(t.Sub(c.epoch))
}

// refreshRecent brings recentOut up to date for the sample at offset now.
// It is called at every sample (observe), whether a State is built or
// not, so that which values a State shows does not depend on when it is
// read.
func (t *procTrack) refreshRecent(now int64) {
	if t.recentAt == never || now-t.recentAt >= int64(time.Second) || now < t.recentAt {
		t.recentOut, t.recentAt = t.recent.values(), now
		if t.recentOut == nil {
			t.recentAt = never
		}
	}
}

// health updates each device's health from the sample (a failed query
// marks it unhealthy, a good one healthy again) and from the Xid events
// received since the last sample.
func (d *Daemon) health(now time.Time, snap *gpu.Snapshot, sampleErr error) {
drain:
	for {
		select {
		case ev := <-d.xidCh:
			d.onXid(ev)
		default:
			break drain
		}
	}
	for i, t := range d.devs {
		wasHealthy, wasErr := t.healthy, t.err
		var qerr error
		switch {
		case sampleErr != nil:
			qerr = sampleErr
		case i < len(snap.Devices) && snap.Devices[i].Err != nil:
			qerr = snap.Devices[i].Err
		case i < len(snap.Devices):
			t.last, t.sampled = snap.Devices[i], true
		}
		switch {
		case qerr != nil:
			t.healthy, t.err = false, qerr.Error()
		case now.Before(t.xidUntil):
			t.healthy, t.err = false, xidText(t.xid, t.xidAt)
		default:
			t.healthy, t.err = true, ""
		}
		switch {
		case wasHealthy && !t.healthy:
			d.log.Warn("GPU unhealthy", "gpu", t.id.Index, "uuid", t.id.UUID, "reason", t.err)
		case !wasHealthy && t.healthy:
			d.log.Info("GPU healthy again", "gpu", t.id.Index, "uuid", t.id.UUID, "was", wasErr)
		case !t.healthy && t.err != wasErr:
			d.log.Warn("GPU still unhealthy", "gpu", t.id.Index, "uuid", t.id.UUID, "reason", t.err)
		}
	}
}

func (d *Daemon) onXid(ev gpu.XidEvent) {
	for _, t := range d.devs {
		if t.id.Index == ev.Index || (ev.UUID != "" && t.id.UUID == ev.UUID) {
			t.xid, t.xidAt, t.xidUntil = ev.Xid, ev.Time, ev.Time.Add(d.opts.XidHold)
			d.log.Warn("Xid error", "gpu", t.id.Index, "uuid", t.id.UUID, "xid", ev.Xid, "meaning", gpu.XidMeaning(ev.Xid))
			return
		}
	}
	d.log.Warn("Xid error on a GPU this daemon does not sample", "gpu", ev.Index, "uuid", ev.UUID, "xid", ev.Xid)
}

func xidText(xid uint64, at time.Time) string {
	s := fmt.Sprintf("Xid %d", xid)
	if m := gpu.XidMeaning(xid); m != "" {
		s += " (" + m + ")"
	}
	return s + " at " + at.UTC().Format(time.RFC3339)
}

// observe feeds the sample to the ring buffers and the detectors, creates
// the tracks of new process lifetimes and drops those of processes that
// are gone; d.tracks[i] is then the track of snap.Processes[i]. It also
// queues the lifetimes whose verdict is due (d.due, for judge), since it
// touches each track anyway. A process on a device whose queries failed
// is kept: its absence says nothing about it.
func (d *Daemon) observe(snap *gpu.Snapshot) {
	failed := false
	for i, ds := range snap.Devices {
		if ds.Err != nil {
			failed = true
			continue
		}
		if i < len(d.devs) {
			d.devs[i].recent.push(ds.Memory.Used)
		}
	}
	now := snap.Time
	at := d.offsets.at(now)
	prev := d.prevTracks
	d.tracks, d.due = d.tracks[:0], d.due[:0]
	seen := 0 // distinct tracks listed
	for i := range snap.Processes {
		p := &snap.Processes[i]
		k := keyOf(p)
		// The lists of two samples are mostly the same processes in the
		// same order: the track at the same place in the sample before
		// is tried first, and the map only when it is another lifetime
		// (gone: it left the map, so the map has another one or none).
		var t *procTrack
		if i < len(prev) {
			t = prev[i]
		}
		if t == nil || t.gone || t.start != k.start || t.pid != k.pid || t.device != p.Device {
			t = d.procs[k.slot()]
		}
		if t == nil || t.start != k.start {
			if t != nil { // the PID's lifetime before on this GPU
				d.dropSlope(t, k.pid)
				t.gone = true
			}
			cfg := d.opts.Detector
			for _, dt := range d.devs {
				if dt.id.UUID == p.DeviceUUID {
					cfg.Capacity = dt.last.Memory.Total
				}
			}
			det, err := detect.Make(cfg)
			if err != nil { // checked in New; a capacity cannot make it fail
				d.log.Error("leak detector", "err", err)
				d.tracks = append(d.tracks, nil)
				continue
			}
			t = &procTrack{det: det, recent: makeRing(d.opts.Recent), device: p.Device, pid: k.pid, start: k.start, command: p.Command(), display: p.DisplayCommand(),
				idleSince: never, lastVerdict: never, recentAt: never}
			d.procs[k.slot()] = t
		}
		d.tracks = append(d.tracks, t)
		if t.seen != d.tickNo {
			t.seen = d.tickNo
			seen++
		}
		if p.MemoryKnown { // unknown memory is no observation
			t.det.Add(now, p.Memory)
			t.recent.push(p.Memory)
		}
		switch {
		case p.Flags&gpu.FlagIdle == 0:
			t.idleSince = never
		case t.idleSince == never:
			t.idleSince = at
		}
		t.refreshRecent(at)
		if t.queued != d.tickNo && (!t.judged || at-t.lastVerdict >= int64(d.opts.VerdictEvery)) {
			t.queued = d.tickNo
			d.due = append(d.due, dueVerdict{p.DeviceUUID, k, t})
		}
	}
	if seen == len(d.procs) {
		return // every track was listed: none is gone
	}
	failedGPU := map[int32]bool{}
	if failed {
		for _, ds := range snap.Devices {
			if ds.Err != nil {
				failedGPU[int32(ds.Index)] = true
			}
		}
	}
	for slot, t := range d.procs {
		if t.seen != d.tickNo && !failedGPU[int32(t.device)] {
			d.dropSlope(t, uint32(slot))
			t.gone = true
			delete(d.procs, slot)
		}
	}
}

// dueVerdict is a lifetime whose verdict is due (observe queues them,
// judge computes them).
type dueVerdict struct {
	gpu string // the UUID: due processes are judged in order of it after time
	k   procKey
	t   *procTrack
}

// judge recomputes the leak verdicts that are due (d.due), oldest first,
// at most MaxVerdicts per sample, and hands the confirmed leaks' slopes to
// the metrics as they change.
func (d *Daemon) judge(now time.Time) {
	slices.SortFunc(d.due, func(a, b dueVerdict) int {
		return cmp.Or(cmp.Compare(a.t.lastVerdict, b.t.lastVerdict), cmp.Compare(a.gpu, b.gpu), cmp.Compare(a.k.pid, b.k.pid), cmp.Compare(a.k.start, b.k.start))
	})
	at := d.offsets.at(now)
	for _, x := range d.due[:min(len(d.due), d.opts.MaxVerdicts)] {
		v := x.t.det.Verdict()
		was, slope := x.t.confirmed, x.t.verdict.Slope
		x.t.verdict, x.t.judged, x.t.lastVerdict = v, true, at
		x.t.confirmed = x.t.confirm.Update(now, v)
		x.t.leak = leakOf(x.t)
		switch key := (metrics.ProcessKey{GPU: x.t.device, PID: x.k.pid}); {
		case x.t.confirmed && (!was || v.Slope != slope):
			d.coll.SetLeakSlope(key, v.Slope)
		case was && !x.t.confirmed:
			d.coll.DropLeakSlope(key)
		}
		// A leak is announced once per lifetime; a verdict that comes and
		// goes (a sawtooth on a rising floor) is followed at debug level.
		switch {
		case x.t.confirmed && !was && !x.t.announced:
			x.t.announced = true
			d.log.Info("leak confirmed", "gpu", x.t.device, "pid", x.k.pid, "slope_bytes_per_second", v.Slope, "reason", v.Reason)
		case x.t.confirmed && !was:
			d.log.Debug("leak confirmed again", "gpu", x.t.device, "pid", x.k.pid, "slope_bytes_per_second", v.Slope, "reason", v.Reason)
		case was && !x.t.confirmed:
			d.log.Debug("leak no longer confirmed", "gpu", x.t.device, "pid", x.k.pid, "reason", v.Reason)
		}
	}
	clear(d.due) // the tracks may be dropped before the next sample
}

// dropSlope forgets the leak slope of a lifetime whose track goes.
func (d *Daemon) dropSlope(t *procTrack, pid uint32) {
	if t.confirmed {
		d.coll.DropLeakSlope(metrics.ProcessKey{GPU: t.device, PID: pid})
	}
}

// sampleRecords returns the latest sample's records, one per process
// (d.tracks[i] is records[i]'s track): what the alerts, the policies and
// the State read. They are made when first asked for in a sample, since
// without process alert rules, a policy or a workload lookup only the
// State reads them, about once a second at 10 samples a second; each is
// what the sample and its track said at that sample (the tracks do not
// change until the next one). Nil when the sample failed as a whole.
func (d *Daemon) sampleRecords() []sample.Process {
	if d.recordsAt == d.tickNo {
		return d.records
	}
	d.recordsAt = d.tickNo
	snap, now := d.latest.snap, d.latest.now
	if snap == nil {
		d.records = d.records[:0]
		return d.records
	}
	// The records are written in place: a record is a large struct, and
	// there are as many as processes.
	d.records = slices.Grow(d.records[:0], len(snap.Processes))[:len(snap.Processes)]
	for i := range snap.Processes {
		d.makeRecord(&d.records[i], &snap.Processes[i], d.tracks[i], now)
	}
	return d.records
}

// makeRecord makes the record of p, sampled at now, whose track is t (nil
// when it has none).
func (d *Daemon) makeRecord(r *sample.Process, p *gpu.Process, t *procTrack, now time.Time) {
	if t == nil {
		*r = sample.FromGPU(*p)
		return
	}
	*r = sample.New(p, t.command, t.display)
	if t.idleSince != never {
		r.IdleFor = time.Duration(d.offsets.at(now)-t.idleSince) + d.opts.IdleWindow
	}
	if t.confirmed {
		r.Leak, r.Slope = true, t.verdict.Slope
	}
	if d.opts.Workload != nil {
		r.Workload = d.opts.Workload(*p)
	}
}

// leakOf is the api form of a process's verdict; nil before the first one.
func leakOf(t *procTrack) *api.Leak {
	if t == nil || !t.judged {
		return nil
	}
	v := t.verdict
	l := &api.Leak{Slope: v.Slope, Confidence: v.Confidence, Reason: v.Reason}
	switch {
	case t.confirmed:
		l.Verdict = detect.VerdictLeak
	case v.Kind == detect.NoLeak:
		l.Verdict = detect.VerdictNoLeak
	case v.Kind == detect.Leak:
		l.Verdict = detect.VerdictInsufficient
		l.Reason = fmt.Sprintf("leak called, not yet confirmed (a call must hold %v): %s", detect.DefaultHold, v.Reason)
	default:
		l.Verdict = detect.VerdictInsufficient
	}
	return l
}

// buildState makes the State every reader sees until the next sample, from
// the sample at now (snap, nil when it failed as a whole), the alerts then
// firing and the history writer's warning then. It is never modified once
// published. It runs under stateMu.
func (d *Daemon) buildState(now time.Time, snap *gpu.Snapshot, firing []api.Alert, warning string) *api.State {
	step := d.cfg.Interval.Seconds()
	s := &api.State{
		Schema: api.Schema, Time: now, Hostname: d.hostname, Simulated: d.info.Simulated,
		Mutations: d.cfg.MutationsEnabled(), Devices: make([]api.Device, 0, len(d.devs)),
		Processes: []api.Process{}, Alerts: firing,
	}
	if s.Alerts == nil {
		s.Alerts = []api.Alert{}
	}
	for i, t := range d.devs {
		dev := api.Device{Index: t.id.Index, UUID: t.id.UUID, Name: t.id.Name, Healthy: t.healthy, Error: t.err, UtilPercent: -1, Recent: t.recent.values(), RecentStep: step}
		if snap != nil && i < len(snap.Devices) && snap.Devices[i].Err == nil {
			ds := snap.Devices[i]
			dev.TotalBytes, dev.UsedBytes, dev.FreeBytes = ds.Memory.Total, ds.Memory.Used, ds.Memory.Free
			dev.ReservedBytes, dev.ReservedKnown = ds.Memory.Reserved, ds.Memory.ReservedKnown
			dev.UnattributedBytes = ds.Unattributed
			if ds.Utilization.Known {
				dev.UtilPercent = int(ds.Utilization.GPU)
			}
		}
		s.Devices = append(s.Devices, dev)
	}
	if snap == nil {
		return s
	}
	s.Warnings = snap.Warnings
	if warning != "" {
		s.Warnings = append(slices.Clip(s.Warnings), warning)
	}
	records := d.sampleRecords()
	s.Processes = make([]api.Process, len(records))
	for i := range records {
		// Filled in place: a Process is a large struct.
		r, t, ap := &records[i], d.tracks[i], &s.Processes[i]
		ap.GPU, ap.GPUIndex, ap.PID, ap.StartTime, ap.User, ap.Command = r.GPU, r.GPUIndex, r.PID, r.StartTime, r.User, r.Display
		ap.UsedBytes, ap.MemoryKnown, ap.Flags, ap.Container = r.Bytes, r.MemoryKnown, d.flagNames(r.Flags), r.ContainerID
		ap.Pod, ap.Namespace, ap.ContainerName = r.Workload.Pod, r.Workload.Namespace, r.Workload.Container
		ap.RecentStep, ap.Recent = step, []uint64{}
		if t != nil {
			ap.Leak, ap.Recent = t.leak, t.recentOut
		}
		if r.Alloc != nil {
			ap.SetAllocator(allocatorOf(r.Alloc))
		}
	}
	return s
}

// flagNames is f.Names(), made once per combination of flags and shared by
// the States, which never modify it.
func (d *Daemon) flagNames(f gpu.Flags) []string {
	n, ok := d.names[f]
	if !ok {
		n = f.Names()
		d.names[f] = n
	}
	return n
}
