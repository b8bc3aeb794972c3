package serve

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
)

// The State is built once per sample, when first asked for, and a sample
// while a reader holds it leaves it as it was; each sample publishes one
// state event, which carries no State.
func TestStateBuiltOncePerSample(t *testing.T) {
	e := newEnv(t, 1, DefaultConfig())
	events, cancel := e.d.Subscribe()
	defer cancel()
	e.step(time.Second)
	if ev := <-events; ev.Kind != "state" || ev.State != nil {
		t.Fatalf("event %+v, want a state event without its State", ev)
	}
	a, _ := e.d.State()
	b, _ := e.d.State()
	if len(a.Processes) == 0 || &a.Processes[0] != &b.Processes[0] {
		t.Fatal("two reads of one sample built two States")
	}
	held := append([]api.Process(nil), a.Processes...)
	e.step(time.Second)
	c, _ := e.d.State()
	if !c.Time.After(a.Time) || &c.Processes[0] == &a.Processes[0] {
		t.Fatalf("the State after a sample is the old one (time %v, was %v)", c.Time, a.Time)
	}
	for i := range held {
		if a.Processes[i].UsedBytes != held[i].UsedBytes || len(a.Processes[i].Recent) != len(held[i].Recent) {
			t.Fatalf("process %d of the held State changed with the next sample", i)
		}
	}
}

func TestState(t *testing.T) {
	e := newEnv(t, 2, DefaultConfig())
	if _, ok := e.d.State(); ok {
		t.Fatal("a state before the first sample")
	}
	for range 5 {
		e.step(time.Second)
	}
	s, ok := e.d.State()
	if !ok {
		t.Fatal("no state after 5 samples")
	}
	if s.Schema != api.Schema || !s.Simulated || s.Hostname != "node-1" || s.Mutations || !s.Time.Equal(e.clk.Now()) {
		t.Errorf("state header = %+v", s)
	}
	if len(s.Devices) != 2 {
		t.Fatalf("%d devices, want 2", len(s.Devices))
	}
	for _, d := range s.Devices {
		if !d.Healthy || d.Error != "" || d.TotalBytes == 0 || d.UsedBytes == 0 || len(d.Recent) != 5 || d.RecentStep != 1 || d.UtilPercent < 0 {
			t.Errorf("device = %+v", d)
		}
		if d.Recent[4] != d.UsedBytes {
			t.Errorf("device %d: newest recent value %d, used %d", d.Index, d.Recent[4], d.UsedBytes)
		}
	}
	if len(s.Processes) < 7 {
		t.Fatalf("%d processes, want GPU 0's seven and more", len(s.Processes))
	}
	for i, p := range s.Processes {
		if i > 0 && p.UsedBytes > s.Processes[i-1].UsedBytes {
			t.Errorf("processes not largest first at %d", i)
		}
		if p.GPU == "" || p.PID == 0 || p.Flags == nil || len(p.Recent) != 5 || strings.ContainsAny(p.Command, "\n\x1b") {
			t.Errorf("process = %+v", p)
		}
		if p.Leak == nil || p.Leak.Verdict != detect.VerdictInsufficient {
			t.Errorf("process %d after 5 s: leak = %+v, want an unknown verdict", p.PID, p.Leak)
		}
	}
	if len(s.Alerts) != 0 {
		t.Errorf("alerts without rules: %+v", s.Alerts)
	}
}

func TestRecentRing(t *testing.T) {
	r := newRing(3)
	if v := r.values(); len(v) != 0 {
		t.Errorf("empty ring = %v", v)
	}
	for i := uint64(1); i <= 5; i++ {
		r.push(i)
	}
	if v := r.values(); len(v) != 3 || v[0] != 3 || v[2] != 5 {
		t.Errorf("ring = %v, want [3 4 5]", v)
	}
	// A slice handed out keeps its values however many pushes follow,
	// across the log's renewals, while the ring moves on.
	held := r.values()
	for i := uint64(6); i <= 20; i++ {
		r.push(i)
		if v := r.values(); len(v) != 3 || v[0] != i-2 || v[2] != i {
			t.Fatalf("after pushing %d: ring = %v", i, v)
		}
	}
	if held[0] != 3 || held[1] != 4 || held[2] != 5 || cap(held) != 3 {
		t.Errorf("a slice handed out changed: %v (cap %d)", held, cap(held))
	}
}

func TestHistoryFoldsPeaks(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	start := t0.Add(-time.Hour)
	snap := func(at time.Duration, used, free uint64, util uint32, procs ...gpu.Process) *gpu.Snapshot {
		return &gpu.Snapshot{Time: t0.Add(at), Devices: []gpu.DeviceState{
			{Identity: gpu.Identity{UUID: "GPU-a", Name: "H"}, Memory: gpu.Memory{Total: 100, Used: used, Free: free, Reserved: 10}, Utilization: gpu.Utilization{GPU: util, Known: true}},
			{Identity: gpu.Identity{UUID: "GPU-b"}, Err: errors.New("lost")},
		}, Processes: procs}
	}
	p := func(pid uint32, mem uint64, f gpu.Flags) gpu.Process {
		return gpu.Process{PID: pid, DeviceUUID: "GPU-a", Memory: mem, MemoryKnown: true, StartTime: start, Flags: f, Cmdline: []string{"x"}}
	}
	var h histAcc
	tracks := map[uint32]*procTrack{}
	add := func(s *gpu.Snapshot) { // as the daemon does: the processes and their tracks
		var ts []*procTrack
		for _, p := range s.Processes {
			if tracks[p.PID] == nil {
				tracks[p.PID] = &procTrack{}
			}
			ts = append(ts, tracks[p.PID])
		}
		h.add(s.Time, s.Devices, s.Processes, ts, func(r *sample.Process, i int) { *r = sample.FromGPU(s.Processes[i]) })
	}
	if _, ok := h.take(); ok {
		t.Fatal("an empty interval gave a tick")
	}
	add(snap(0, 50, 40, 10, p(1, 30, 0), p(2, 5, gpu.FlagIdle)))
	add(snap(time.Second, 70, 20, 5, p(1, 60, gpu.FlagOrphaned)))
	add(snap(2*time.Second, 40, 50, 0, p(1, 20, 0), p(3, 7, 0)))
	tick, ok := h.take()
	if !ok {
		t.Fatal("no tick")
	}
	if !tick.Time.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("tick time %v, want the newest sample's", tick.Time)
	}
	want := store.DeviceSample{UUID: "GPU-a", Model: "H", Used: 70, Free: 20, Reserved: 10, Total: 100, Util: 10}
	if len(tick.Devices) != 1 || tick.Devices[0] != want {
		t.Errorf("devices = %+v, want only GPU-a with its peak %+v", tick.Devices, want)
	}
	got := map[uint32]sample.Process{}
	for _, ps := range tick.Processes {
		got[ps.PID] = ps
	}
	if len(got) != 3 || got[1].Bytes != 60 || got[1].Flags != gpu.FlagOrphaned || got[2].Bytes != 5 || got[2].Flags != gpu.FlagIdle || got[3].Bytes != 7 {
		t.Errorf("processes = %+v", tick.Processes)
	}
	if _, ok := h.take(); ok {
		t.Error("take did not start a new interval")
	}
	// The next interval starts over: each lifetime gets a row of its own.
	add(snap(3*time.Second, 40, 50, 0, p(1, 10, 0)))
	add(snap(4*time.Second, 40, 50, 0, p(3, 9, 0), p(1, 15, 0)))
	tick, _ = h.take()
	if len(tick.Processes) != 2 || tick.Processes[0].PID != 1 || tick.Processes[0].Bytes != 15 || tick.Processes[1].PID != 3 || tick.Processes[1].Bytes != 9 {
		t.Errorf("next interval's processes = %+v", tick.Processes)
	}
}

func TestHistoryWritten(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HistoryInterval = 5 * time.Second
	e := newEnv(t, 2, cfg)
	t0 := e.clk.Now()
	for range 21 {
		e.step(time.Second)
	}
	e.flush(t)
	uuid := e.d.Devices()[0].UUID
	pts, err := e.d.DeviceHistory(context.Background(), uuid, api.HistoryQuery{From: t0, To: e.clk.Now().Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// Samples at 1..21 s: written at 1 s (the first), then at 6, 11, 16, 21.
	if len(pts) != 5 {
		t.Fatalf("%d history points, want 5: %+v", len(pts), pts)
	}
	for i, p := range pts {
		if want := t0.Add(time.Duration(1+5*i) * time.Second); !p.Time.Equal(want) {
			t.Errorf("point %d at %v, want %v", i, p.Time, want)
		}
		if p.Used.Max == 0 || p.Total == 0 || p.Util == nil {
			t.Errorf("point %d = %+v", i, p)
		}
	}
	if _, err := e.d.DeviceHistory(context.Background(), "GPU-nope", api.HistoryQuery{From: t0, To: e.clk.Now()}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown GPU: %v", err)
	}
	if _, err := e.d.DeviceHistory(context.Background(), uuid, api.HistoryQuery{From: t0, To: t0}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("empty range: %v", err)
	}
	s, _ := e.d.State()
	p := s.Processes[0]
	pp, err := e.d.ProcessHistory(context.Background(), p.GPU, p.PID, api.HistoryQuery{From: t0, To: e.clk.Now().Add(time.Second), Step: 10 * time.Second})
	if err != nil || len(pp) == 0 {
		t.Fatalf("process history: %d points, %v", len(pp), err)
	}
	for _, x := range pp {
		if x.PID != p.PID || !x.StartTime.Equal(p.StartTime) || x.Bytes.Max == 0 || x.Flags == nil {
			t.Errorf("process point = %+v", x)
		}
	}
}

func TestFailingDevice(t *testing.T) {
	e := newEnv(t, 3, DefaultConfig())
	e.step(time.Second)
	s, _ := e.d.State()
	on1 := 0
	for _, p := range s.Processes {
		if p.GPUIndex == 1 {
			on1++
		}
	}
	if on1 == 0 {
		t.Fatal("no process on GPU 1 to watch")
	}
	tracked := len(e.d.procs)
	if err := e.sim.FailDevice(1, nil); err != nil {
		t.Fatal(err)
	}
	e.step(time.Second)
	s, _ = e.d.State()
	d1 := s.Devices[1]
	if d1.Healthy || !strings.Contains(d1.Error, "ERROR_GPU_IS_LOST") || d1.UsedBytes != 0 {
		t.Errorf("failed GPU = %+v, want unhealthy with NVML's error", d1)
	}
	if !s.Devices[0].Healthy || !s.Devices[2].Healthy {
		t.Error("the other GPUs were marked unhealthy")
	}
	for _, p := range s.Processes {
		if p.GPUIndex == 1 {
			t.Errorf("a process of the failed GPU is listed: %+v", p)
		}
	}
	if len(e.d.procs) != tracked {
		t.Errorf("tracks %d, want %d: the failed GPU's processes keep their detectors", len(e.d.procs), tracked)
	}
	if len(s.Warnings) == 0 || !strings.Contains(e.log.String(), "GPU unhealthy") {
		t.Errorf("no warning (%q) or log line for the failed GPU", s.Warnings)
	}

	// Every GPU fails: the sample fails, the loop goes on.
	for i := range 3 {
		e.sim.FailDevice(i, errors.New("driver gone"))
	}
	e.step(time.Second)
	s, ok := e.d.State()
	if !ok || len(s.Processes) != 0 || len(s.Devices) != 3 {
		t.Fatalf("state after a failed sample: %+v", s)
	}
	for _, d := range s.Devices {
		if d.Healthy || !strings.Contains(d.Error, "driver gone") {
			t.Errorf("device %d = %+v", d.Index, d)
		}
	}
	if got := metricSum(t, e.d, "vram_daemon_sample_failures_total", nil); got != 1 {
		t.Errorf("sample failures = %v, want 1", got)
	}
	for i := range 3 {
		e.sim.RestoreDevice(i)
	}
	e.step(time.Second)
	s, _ = e.d.State()
	for _, d := range s.Devices {
		if !d.Healthy || d.Error != "" {
			t.Errorf("device %d not healthy again: %+v", d.Index, d)
		}
	}
	if !strings.Contains(e.log.String(), "GPU healthy again") {
		t.Error("no log line for the recovery")
	}
}

func TestXidMarksUnhealthy(t *testing.T) {
	e := newEnv(t, 2, DefaultConfig())
	e.step(time.Second)
	uuid := e.d.Devices()[1].UUID
	e.d.xidCh <- gpu.XidEvent{Time: e.clk.Now(), Index: 1, UUID: uuid, Xid: 79}
	e.step(time.Second)
	s, _ := e.d.State()
	if d := s.Devices[1]; d.Healthy || !strings.HasPrefix(d.Error, "Xid 79 (GPU has fallen off the bus) at ") || d.UsedBytes == 0 {
		t.Errorf("device after an Xid = %+v, want unhealthy with the Xid, still sampled", d)
	}
	if !s.Devices[0].Healthy {
		t.Error("the other GPU was marked unhealthy")
	}
	e.step(DefaultXidHold - 2*time.Second)
	if s, _ := e.d.State(); s.Devices[1].Healthy {
		t.Error("healthy before the hold ended")
	}
	e.step(2 * time.Second)
	if s, _ := e.d.State(); !s.Devices[1].Healthy {
		t.Errorf("still unhealthy after the hold: %+v", s.Devices[1])
	}
}

// fakeXid hands out queued events, then times out.
type fakeXid struct {
	ch     chan gpu.XidEvent
	closed chan struct{}
}

func (f *fakeXid) Wait(timeout time.Duration) (gpu.XidEvent, bool, error) {
	select {
	case ev := <-f.ch:
		return ev, true, nil
	case <-time.After(min(timeout, 50*time.Millisecond)):
		return gpu.XidEvent{}, false, nil
	}
}

func (f *fakeXid) Close() error { close(f.closed); return nil }

func TestXidSourceThroughRun(t *testing.T) {
	src := &fakeXid{ch: make(chan gpu.XidEvent, 1), closed: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Interval = 10 * time.Millisecond
	cfg.HistoryInterval = 10 * time.Millisecond
	e := newEnv(t, 2, cfg, func(o *Options) { o.Xid, o.NoXid, o.Now = src, false, nil })
	e.d.sampler = mustSampler(t, e.host, e.sim, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.d.Run(ctx) }()
	src.ch <- gpu.XidEvent{Time: time.Now(), Index: 0, UUID: e.d.Devices()[0].UUID, Xid: 48}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s, ok := e.d.State(); ok && !s.Devices[0].Healthy && strings.HasPrefix(s.Devices[0].Error, "Xid 48") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Xid never reached the state")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := e.d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.closed:
	default:
		t.Error("Close did not close the Xid source")
	}
}

func mustSampler(t *testing.T, h gpu.Host, sim *gpu.Sim, now func() time.Time) *gpu.Sampler {
	t.Helper()
	s, err := gpu.NewSampler(h, gpu.SamplerOptions{Procs: sim, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDetectorsFollowLifetimes(t *testing.T) {
	e := newEnv(t, 1, DefaultConfig())
	e.step(time.Second)
	snap, err := e.d.sampler.Sample()
	if err != nil {
		t.Fatal(err)
	}
	leak := byShape(t, snap, "leak")
	k := keyOf(&leak)
	if e.d.trackOf(k) == nil {
		t.Fatalf("no track for %+v", k)
	}
	e.host.setHidden(leak.PID, true)
	e.step(time.Second)
	if e.d.trackOf(k) != nil {
		t.Error("the track of an exited process was kept")
	}
	e.host.setHidden(leak.PID, false)
	e.step(time.Second)
	if tr := e.d.trackOf(k); tr == nil || tr.recent.values()[0] == 0 || len(tr.recent.values()) != 1 {
		t.Errorf("a process that reappears starts a new track: %+v", tr)
	}
}

func TestLeakConfirmed(t *testing.T) {
	e := newEnv(t, 1, DefaultConfig())
	var leakPID uint32
	for i := range 150 {
		e.step(time.Second)
		if i == 0 {
			snap, _ := e.d.sampler.Sample()
			leakPID = byShape(t, snap, "leak").PID
		}
	}
	s, _ := e.d.State()
	for _, p := range s.Processes {
		switch {
		case p.PID == leakPID:
			if p.Leak == nil || p.Leak.Verdict != detect.VerdictLeak || p.Leak.Slope <= 0 {
				t.Errorf("the leaking process after 150 s: %+v", p.Leak)
			}
		case p.Leak != nil && p.Leak.Verdict == detect.VerdictLeak:
			t.Errorf("process %d (%s) called leaking: %+v", p.PID, p.Command, p.Leak)
		}
	}
	if n := len(metricSeries(t, e.d, "vram_process_leak_slope_bytes_per_second", nil)); n != 1 {
		t.Errorf("%d slope series, want the confirmed leak's only", n)
	}
}

// TestHistoryFailureWarns: when history writes start failing (here the file
// is closed under the writer; on a host, a full disk or a damaged page), the
// State's warnings say so, until a tick is written again.
func TestHistoryFailureWarns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HistoryInterval = time.Second
	e := newEnv(t, 1, cfg)
	e.step(time.Second)
	e.flush(t)
	if s, _ := e.d.State(); hasHistoryWarning(s.Warnings) {
		t.Fatalf("warning before any failure: %q", s.Warnings)
	}
	if err := e.d.st.Close(); err != nil {
		t.Fatal(err)
	}
	e.step(time.Second)
	e.flush(t)
	e.step(time.Second) // the State built after the failure carries it
	s, _ := e.d.State()
	if !hasHistoryWarning(s.Warnings) {
		t.Fatalf("no history warning after a failed write: %q", s.Warnings)
	}
	e.d.w.failing.Store(nil) // what the next tick written does
	if w := e.d.w.warning(); w != "" {
		t.Errorf("warning kept after the failure cleared: %q", w)
	}
}

func hasHistoryWarning(ws []string) bool {
	for _, w := range ws {
		if strings.HasPrefix(w, "history: writes to ") && strings.Contains(w, "failing since") {
			return true
		}
	}
	return false
}

// TestLeakAnnouncedOnce: a leak whose verdict comes and goes (a sawtooth on
// a rising floor) is announced at info level once per process lifetime;
// its later confirmations and the times it stops being confirmed are
// logged at debug level only.
func TestLeakAnnouncedOnce(t *testing.T) {
	clk := newClock()
	sim, err := gpu.NewSimProcs(2, 100, 1, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvSim(t, sim, DefaultConfig(), clk)
	for range 900 {
		e.step(time.Second)
	}
	infos := map[string]int{}
	var again, cleared int
	for _, line := range strings.Split(e.log.String(), "\n") {
		switch {
		case strings.Contains(line, "level=INFO") && strings.Contains(line, `msg="leak confirmed"`):
			infos[fieldOf(line, "gpu")+"/"+fieldOf(line, "pid")]++
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, `msg="leak confirmed again"`):
			again++
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, `msg="leak no longer confirmed"`):
			cleared++
		}
	}
	if len(infos) == 0 {
		t.Fatal("no leak announced in 15 minutes")
	}
	for p, n := range infos {
		if n != 1 {
			t.Errorf("process %s: leak announced %d times at info level, want once", p, n)
		}
	}
	t.Logf("%d leaks announced, %d confirmed again, %d stopped being confirmed", len(infos), again, cleared)
}

// fieldOf returns the value of key=value in a text-handler log line.
func fieldOf(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestObserveFindsEachLifetimesTrack feeds observe samples whose lists
// change order, reuse a PID with a new start time, list a process twice
// and drop processes, and checks after each that every process got the
// track of its own lifetime (the map's, with its start time) and that a
// lifetime keeps its track while it is listed, wherever it is listed.
func TestObserveFindsEachLifetimesTrack(t *testing.T) {
	e := newEnv(t, 2, DefaultConfig())
	e.step(time.Second)
	uuid := func(dev int) string { return e.d.devs[dev].id.UUID }
	proc := func(dev int, pid uint32, start int64) gpu.Process {
		return gpu.Process{PID: pid, Device: dev, DeviceUUID: uuid(dev), Memory: 1 << 30, MemoryKnown: true, StartTime: time.Unix(start, 0)}
	}
	a, b, c := proc(0, 10, 100), proc(0, 11, 100), proc(1, 10, 100)
	a2 := proc(0, 10, 200) // PID 10 reused on GPU 0
	samples := [][]gpu.Process{
		{a, b, c},
		{c, a, b},    // another order
		{b, a2, c},   // PID 10 on GPU 0 is another lifetime, at another place
		{a2, a2, b},  // listed twice; c is gone
		{c, b, a2},   // c again: a new lifetime of it
		{b, c},       // a2 gone
		{a2, b, c},   // a2 again
		{},           // none
		{a, b, c, c}, // all new
	}
	now := time.Unix(1000, 0)
	had := map[procKey]*procTrack{}
	for n, procs := range samples {
		now = now.Add(100 * time.Millisecond)
		e.d.tickNo++
		e.d.prevTracks, e.d.tracks = e.d.tracks, e.d.prevTracks[:0]
		e.d.observe(&gpu.Snapshot{Time: now, Devices: []gpu.DeviceState{e.d.devs[0].last, e.d.devs[1].last}, Processes: procs})
		if len(e.d.tracks) != len(procs) {
			t.Fatalf("sample %d: %d tracks for %d processes", n, len(e.d.tracks), len(procs))
		}
		listed := map[procKey]*procTrack{}
		for i := range procs {
			k, tr := keyOf(&procs[i]), e.d.tracks[i]
			if tr == nil || tr != e.d.procs[k.slot()] || tr.start != k.start || tr.pid != k.pid || tr.device != int(k.dev) || tr.gone {
				t.Fatalf("sample %d, process %d (%+v): track %+v is not its lifetime's", n, i, k, tr)
			}
			if old, ok := listed[k]; ok && old != tr {
				t.Fatalf("sample %d: one lifetime listed twice got two tracks", n)
			}
			if old, ok := had[k]; ok && old != tr {
				t.Fatalf("sample %d, process %d (%+v): a lifetime listed in the sample before got a new track", n, i, k)
			}
			listed[k] = tr
		}
		if len(e.d.procs) != len(listed) {
			t.Fatalf("sample %d: %d tracks kept for %d lifetimes listed", n, len(e.d.procs), len(listed))
		}
		had = listed
	}
}
