package replay

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
	"github.com/vramhq/vram/trace/rmm"
	"github.com/vramhq/vram/trace/synth"
)

const mib = 1 << 20

func allocRec(ptr, size uint64) rmm.Record {
	return rmm.Record{Action: rmm.Allocate, Pointer: ptr, Size: size}
}
func freeRec(ptr, size uint64) rmm.Record {
	return rmm.Record{Action: rmm.Free, Pointer: ptr, Size: size}
}
func onStream(r rmm.Record, s uint64) rmm.Record {
	r.Stream = s
	return r
}

func newSim(t testing.TB, capacity uint64) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReplayKnownAnswers(t *testing.T) {
	failure := rmm.Record{Action: rmm.AllocateFailure, Size: 1 << 40}
	tests := []struct {
		name string
		recs []rmm.Record
		want Result // the fields compared below
		// reserved peak, when the allocator's policy makes it known
		reserved uint64
	}{
		{
			name:     "alloc and free everything",
			recs:     []rmm.Record{allocRec(1, 100), allocRec(2, 200), freeRec(1, 100), allocRec(3, 50), freeRec(2, 200), freeRec(3, 50)},
			want:     Result{Records: 6, Ops: 6, Allocs: 3, Frees: 3, PeakLiveBytes: 300},
			reserved: 2 * mib, // one small segment
		},
		{
			name:     "leak at the end",
			recs:     []rmm.Record{allocRec(1, mib), allocRec(2, 2*mib), freeRec(1, mib)},
			want:     Result{Records: 3, Ops: 3, Allocs: 2, Frees: 1, PeakLiveBytes: 3 * mib, LeakedBytes: 2 * mib, LeakedAllocs: 1},
			reserved: 2*mib + 20*mib, // small segment + a 20 MiB large one
		},
		{
			name: "unknown frees are skipped",
			recs: []rmm.Record{freeRec(9, 512), allocRec(1, 512), freeRec(1, 512), freeRec(1, 512)},
			want: Result{Records: 4, Ops: 2, Allocs: 1, Frees: 1, PeakLiveBytes: 512, UnknownFrees: 2},
		},
		{
			name: "allocate failures are skipped",
			recs: []rmm.Record{allocRec(1, 4096), failure, freeRec(1, 4096)},
			want: Result{Records: 3, Ops: 2, Allocs: 1, Frees: 1, PeakLiveBytes: 4096, SkippedFailures: 1},
		},
		{
			name: "a reused live pointer leaks the earlier allocation",
			recs: []rmm.Record{allocRec(1, mib), allocRec(1, 2*mib), freeRec(1, 2*mib)},
			want: Result{Records: 3, Ops: 3, Allocs: 2, Frees: 1, PeakLiveBytes: 3 * mib, ReusedPointers: 1, LeakedBytes: mib, LeakedAllocs: 1},
		},
		{
			name: "zero-size allocations",
			recs: []rmm.Record{allocRec(1, 0), freeRec(1, 0)},
			want: Result{Records: 2, Ops: 2, Allocs: 1, Frees: 1},
		},
		{
			name:     "large requests get their own segment",
			recs:     []rmm.Record{allocRec(1, 30*mib), freeRec(1, 30*mib), allocRec(2, 30*mib), freeRec(2, 30*mib)},
			want:     Result{Records: 4, Ops: 4, Allocs: 2, Frees: 2, PeakLiveBytes: 30 * mib},
			reserved: 30 * mib, // the second allocation reuses the cached segment
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Replay(Records(tt.recs), newSim(t, 1<<30), alloc.Config{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got.OOM != nil {
				t.Fatalf("unexpected OOM: %v", got.OOM)
			}
			check := func(name string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			check("Records", got.Records, tt.want.Records)
			check("Ops", got.Ops, tt.want.Ops)
			check("Allocs", got.Allocs, tt.want.Allocs)
			check("Frees", got.Frees, tt.want.Frees)
			check("PeakLiveBytes", got.PeakLiveBytes, tt.want.PeakLiveBytes)
			check("LeakedBytes", got.LeakedBytes, tt.want.LeakedBytes)
			check("LeakedAllocs", got.LeakedAllocs, tt.want.LeakedAllocs)
			check("UnknownFrees", got.UnknownFrees, tt.want.UnknownFrees)
			check("SkippedFailures", got.SkippedFailures, tt.want.SkippedFailures)
			check("ReusedPointers", got.ReusedPointers, tt.want.ReusedPointers)
			if tt.reserved != 0 {
				check("PeakReservedBytes", got.PeakReservedBytes, tt.reserved)
			}
			if got.PeakReservedBytes < got.PeakLiveBytes {
				t.Errorf("reserved peak %d below live peak %d", got.PeakReservedBytes, got.PeakLiveBytes)
			}
			if got.Latency != nil {
				t.Error("Latency set without Options.Time")
			}
		})
	}
}

func TestReplayFileFixture(t *testing.T) {
	for _, name := range []string{"testdata/small.csv", "testdata/small.csv.gz"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			dev := newSim(t, 1<<30)
			got, err := Replay(rmm.NewReader(f), dev, alloc.Config{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// 1 MiB and 2 MiB allocated, a failure skipped, 1 MiB freed, an
			// unknown free, 4 MiB allocated and freed: peak 2+4 MiB, 2 MiB
			// leaked; a 2 MiB small segment and a 20 MiB large one that also
			// serves the 4 MiB request.
			want := Result{Records: 7, Ops: 5, Allocs: 3, Frees: 2, SkippedFailures: 1, UnknownFrees: 1,
				PeakLiveBytes: 6 * mib, PeakReservedBytes: 22 * mib, LeakedBytes: 2 * mib, LeakedAllocs: 1,
				DeviceCalls: DeviceCalls{Malloc: 2, FromDevice: true, ByKind: CallKinds{Malloc: 2}}, DeviceCheck: "device"}
			got.Stats, got.WallSeconds = alloc.Stats{}, 0
			if *got != want {
				t.Errorf("got  %+v\nwant %+v", *got, want)
			}
			// The pass gave everything back.
			if st := dev.Stats(); st.InUse != 0 {
				t.Errorf("device still has %d bytes in use after the pass", st.InUse)
			}
		})
	}
}

func TestReplayStreamsAreSeparatePools(t *testing.T) {
	same := []rmm.Record{allocRec(1, mib), freeRec(1, mib), allocRec(2, mib), freeRec(2, mib)}
	split := []rmm.Record{allocRec(1, mib), freeRec(1, mib), onStream(allocRec(2, mib), 0xdead), onStream(freeRec(2, mib), 0xdead)}
	r1, err := Replay(Records(same), newSim(t, 1<<30), alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Replay(Records(split), newSim(t, 1<<30), alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r1.PeakReservedBytes != 2*mib || r2.PeakReservedBytes != 4*mib {
		t.Errorf("reserved: one stream %d, two streams %d; want 2 MiB and 4 MiB (blocks are not shared between streams)",
			r1.PeakReservedBytes, r2.PeakReservedBytes)
	}
}

func TestReplayOOMStopsThePass(t *testing.T) {
	recs := []rmm.Record{allocRec(1, 40*mib), allocRec(2, 40*mib), freeRec(1, 40*mib)}
	got, err := Replay(Records(recs), newSim(t, 64*mib), alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got.OOM == nil {
		t.Fatal("no OOM on a 64 MiB device for 80 MiB live")
	}
	if got.OOM.Record != 2 || got.OOM.Size != 40*mib || !errors.Is(got.OOM.Err, alloc.ErrOutOfMemory) {
		t.Errorf("OOM = %+v, want record 2 of 40 MiB wrapping ErrOutOfMemory", got.OOM)
	}
	if got.Records != 2 {
		t.Errorf("Records = %d, want 2 (the pass stops at the failure)", got.Records)
	}
}

func TestReplayMalformedTraceNamesTheLine(t *testing.T) {
	f, err := os.Open("testdata/bad.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Replay(rmm.NewReader(f), newSim(t, 1<<30), alloc.Config{}, Options{})
	var pe *rmm.ParseError
	if !errors.As(err, &pe) || pe.Line != 3 {
		t.Fatalf("err = %v, want a parse error on line 3", err)
	}
}

// statsOnly hides the simulated device's call counts, as any backend other
// than alloc/sim would.
type statsOnly struct{ alloc.Device }

func TestReplayDeviceCallsFromStats(t *testing.T) {
	recs, err := synth.BatchWalk(synth.BatchWalkConfig{Seed: 3, EndBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Replay(Records(recs), newSim(t, 80<<30), alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Replay(Records(recs), statsOnly{newSim(t, 80<<30)}, alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.DeviceCalls.FromDevice || b.DeviceCalls.FromDevice {
		t.Errorf("FromDevice: sim %v, other %v; want true, false", a.DeviceCalls.FromDevice, b.DeviceCalls.FromDevice)
	}
	if a.DeviceCalls.Total() == 0 || a.DeviceCalls.Total() != b.DeviceCalls.Total() {
		t.Errorf("device calls: from the device %+v, from the stats %+v; want equal and non-zero", a.DeviceCalls, b.DeviceCalls)
	}
}

func TestReplayGenerators(t *testing.T) {
	gens := map[string]func() ([]rmm.Record, error){
		"random":    func() ([]rmm.Record, error) { return synth.Random(synth.RandomConfig{Seed: 1, Allocations: 2000}) },
		"batchwalk": func() ([]rmm.Record, error) { return synth.BatchWalk(synth.BatchWalkConfig{Seed: 1}) },
		"kvcache":   func() ([]rmm.Record, error) { return synth.KVCache(synth.KVCacheConfig{Seed: 1}) },
	}
	for name, gen := range gens {
		t.Run(name, func(t *testing.T) {
			recs, err := gen()
			if err != nil {
				t.Fatal(err)
			}
			sum, err := synth.Validate(recs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Replay(Records(recs), newSim(t, 141<<30), alloc.Config{}, Options{Time: true})
			if err != nil {
				t.Fatal(err)
			}
			if got.OOM != nil {
				t.Fatal(got.OOM)
			}
			if got.PeakLiveBytes != sum.PeakLiveBytes {
				t.Errorf("peak live %d, synth.Validate says %d", got.PeakLiveBytes, sum.PeakLiveBytes)
			}
			if got.LeakedBytes != sum.EndLiveBytes || got.UnknownFrees != 0 {
				t.Errorf("leaked %d, unknown frees %d; want %d and 0", got.LeakedBytes, got.UnknownFrees, sum.EndLiveBytes)
			}
			if got.Ops != int64(sum.Allocations+sum.Frees) {
				t.Errorf("ops %d, want %d", got.Ops, sum.Allocations+sum.Frees)
			}
			if got.PeakReservedBytes < got.PeakLiveBytes {
				t.Errorf("reserved %d below live %d", got.PeakReservedBytes, got.PeakLiveBytes)
			}
			// The allocator's own count of requested bytes agrees with ours.
			if p := uint64(got.Stats.RequestedBytes.All.Peak); p != got.PeakLiveBytes {
				t.Errorf("allocator's requested_bytes peak %d, replay's live peak %d", p, got.PeakLiveBytes)
			}
			l := got.Latency
			if l == nil || l.Samples != got.Ops || l.P50 > l.P99 || l.P99 > l.Max {
				t.Errorf("latency %+v for %d ops", l, got.Ops)
			}
		})
	}
}

func TestReplayIsDeterministic(t *testing.T) {
	recs, err := synth.Random(synth.RandomConfig{Seed: 7, Allocations: 3000})
	if err != nil {
		t.Fatal(err)
	}
	var c Compact
	a, err := Replay(Tee(Records(recs), &c), newSim(t, 141<<30), alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Replay(c.Source(), newSim(t, 141<<30), alloc.Config{}, Options{Time: true})
	if err != nil {
		t.Fatal(err)
	}
	b.Latency = nil
	a.WallSeconds, b.WallSeconds = 0, 0
	a.Stats.DeviceCallNanos, b.Stats.DeviceCallNanos = 0, 0 // a clock, not the replay's outcome
	if *a != *b {
		t.Errorf("the compact copy replays differently:\n%+v\n%+v", *a, *b)
	}
}

func TestCompactRoundTrip(t *testing.T) {
	recs := []rmm.Record{
		{Thread: 3, Action: rmm.Allocate, Pointer: 0x10, Size: 7, Stream: 0},
		{Thread: 3, Action: rmm.Allocate, Pointer: 0x20, Size: 1 << 40, Stream: 0xfeed},
		{Action: rmm.AllocateFailure, Size: 9, Stream: 0xfeed},
		{Action: rmm.Free, Pointer: 0x10, Size: 7, Stream: 0},
	}
	var c Compact
	for _, r := range recs {
		c.Add(r)
	}
	if c.Len() != len(recs) {
		t.Fatalf("Len = %d", c.Len())
	}
	for pass := 0; pass < 2; pass++ {
		src := c.Source()
		for i, want := range recs {
			want.Thread, want.Time = 0, 0
			got, err := src.Next()
			if err != nil || got != want {
				t.Fatalf("pass %d record %d: %+v, %v; want %+v", pass, i, got, err, want)
			}
		}
		if _, err := src.Next(); err == nil || !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("after the last record: %v, want io.EOF", err)
		}
	}
}

// cudaLike offers what alloc/cudadev's Device offers, over the simulated
// device, and hides the simulated device's own call counts, so that the
// engine counts the calls itself.
type cudaLike struct{ fullDevice }

type simFull struct{ *sim.Device }

func (simFull) SynchronizeStream(alloc.Stream) error { return nil }

func (d simFull) EventSynchronize(alloc.Event) error {
	d.CompleteEvents()
	return nil
}

func TestReplayCountsCallsOfOtherDevices(t *testing.T) {
	recs, err := synth.BatchWalk(synth.BatchWalkConfig{Seed: 3, EndBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, conf := range []string{"", "page_mapped:true"} {
		cfg, err := alloc.ParseConfig(conf)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Replay(Records(recs), newSim(t, 80<<30), cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Replay(Records(recs), cudaLike{simFull{newSim(t, 80<<30)}}, cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !b.DeviceCalls.FromDevice || a.DeviceCalls != b.DeviceCalls {
			t.Errorf("%q: calls counted by the simulated device %+v, by the engine %+v; want equal", conf, a.DeviceCalls, b.DeviceCalls)
		}
		if conf != "" && b.DeviceCalls.VMM == 0 {
			t.Errorf("%q: no virtual-memory calls counted", conf)
		}
		// The kinds add up to the totals, and only page-mapped mode maps.
		k := b.DeviceCalls.ByKind
		if k.Total() != b.DeviceCalls.Total() || k.Malloc != b.DeviceCalls.Malloc || k.Free != b.DeviceCalls.Free || k.VMM() != b.DeviceCalls.VMM {
			t.Errorf("%q: by kind %+v does not add up to %+v", conf, k, b.DeviceCalls)
		}
		if mapped := k.MemCreate > 0 && k.MemMap > 0 && k.MemSetAccess > 0; mapped != (conf != "") {
			t.Errorf("%q: by kind %+v; want creates, maps and set-access calls exactly in page-mapped mode", conf, k)
		}
	}
}

// corruptReads flips the first byte of every read from the device, as
// memory that another allocation overwrote would read.
type corruptReads struct{ *sim.Device }

func (d corruptReads) CopyDtoH(dst []byte, src uint64) error {
	if err := d.Device.CopyDtoH(dst, src); err != nil {
		return err
	}
	if len(dst) > 0 {
		dst[0] ^= 0xFF
	}
	return nil
}

// leakyFree forgets to give segments back.
type leakyFree struct{ *sim.Device }

func (leakyFree) Free(uint64) error { return nil }

func TestReplayVerifyAndDeviceLeak(t *testing.T) {
	recs, err := synth.Random(synth.RandomConfig{Seed: 5, Allocations: 2000, MaxSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, conf := range []string{"", "page_mapped:true"} {
		cfg, _ := alloc.ParseConfig(conf)
		res, err := Replay(Records(recs), newSim(t, 80<<30), cfg, Options{Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Verified || res.VerifiedAllocations != res.Frees || res.VerifyMismatches != 0 || res.DeviceLeakedBytes != 0 {
			t.Errorf("%q: verified %v, %d of %d frees checked, %d mismatches, %d bytes leaked on the device; want all checked, none lost or leaked",
				conf, res.Verified, res.VerifiedAllocations, res.Frees, res.VerifyMismatches, res.DeviceLeakedBytes)
		}
	}
	res, err := Replay(Records(recs), corruptReads{newSim(t, 80<<30)}, alloc.Config{}, Options{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifyMismatches == 0 || res.VerifyMismatches != res.VerifiedAllocations {
		t.Errorf("corrupted reads: %d mismatches in %d checks, want all", res.VerifyMismatches, res.VerifiedAllocations)
	}
	res, err = Replay(Records(recs), leakyFree{newSim(t, 80<<30)}, alloc.Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeviceLeakedBytes <= 0 || uint64(res.DeviceLeakedBytes) != res.PeakReservedBytes {
		t.Errorf("segments never freed: %d bytes leaked on the device, want the reserved peak %d", res.DeviceLeakedBytes, res.PeakReservedBytes)
	}
}

// Allocations smaller than two probes are checked whole.
func TestReplayVerifyTinyAllocations(t *testing.T) {
	var recs []rmm.Record
	for i := range 40 {
		recs = append(recs, rmm.Record{Action: rmm.Allocate, Pointer: uint64(0x1000 + i), Size: uint64(1 + i)})
	}
	for i := range 40 {
		recs = append(recs, rmm.Record{Action: rmm.Free, Pointer: uint64(0x1000 + i), Size: uint64(1 + i)})
	}
	res, err := Replay(Records(recs), newSim(t, 1<<30), alloc.Config{}, Options{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifiedAllocations != 40 || res.VerifyMismatches != 0 {
		t.Errorf("%d checked, %d mismatches; want 40 and 0", res.VerifiedAllocations, res.VerifyMismatches)
	}
}

// The device check: this process's own figure when Options.ProcessMemory
// gives it, the device's free memory otherwise; memory that came back
// beyond what the pass took is never a leak.
func TestReplayDeviceCheck(t *testing.T) {
	recs := []rmm.Record{
		{Action: rmm.Allocate, Pointer: 0x10, Size: 4 << 20},
		{Action: rmm.Free, Pointer: 0x10, Size: 4 << 20},
	}
	for _, tc := range []struct {
		name       string
		before     uint64
		after      uint64
		useProc    bool
		wantCheck  string
		wantDelta  int64
		wantLeaked int64
	}{
		{"device, all back", 0, 0, false, "device", 0, 0},
		{"process, all back", 600 << 20, 600 << 20, true, "process", 0, 0},
		{"process, 2 MiB kept", 600 << 20, 602 << 20, true, "process", 2 << 20, 2 << 20},
		{"process, less after", 600 << 20, 598 << 20, true, "process", -(2 << 20), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev, err := SimDevice(1 << 30)()
			if err != nil {
				t.Fatal(err)
			}
			var opt Options
			if tc.useProc {
				calls := 0
				opt.ProcessMemory = func() (uint64, error) {
					calls++
					if calls == 1 {
						return tc.before, nil
					}
					return tc.after, nil
				}
			}
			r, err := Replay(Records(recs), dev, alloc.Config{}, opt)
			if err != nil {
				t.Fatal(err)
			}
			if r.DeviceCheck != tc.wantCheck || r.DeviceDeltaBytes != tc.wantDelta || r.DeviceLeakedBytes != tc.wantLeaked {
				t.Errorf("check %q delta %d leaked %d; want %q, %d, %d", r.DeviceCheck, r.DeviceDeltaBytes, r.DeviceLeakedBytes,
					tc.wantCheck, tc.wantDelta, tc.wantLeaked)
			}
		})
	}
}
