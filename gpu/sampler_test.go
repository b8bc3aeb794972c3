package gpu

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// fixtureBoot is btime in testdata/proc/stat.
var fixtureBoot = time.Unix(1780000000, 0)

var fixtureUsers = map[uint32]string{0: "root", 1000: "alice", 1001: "bob", 1002: "svc-infer"}

func fixtureProcs(t testing.TB) *ProcFS {
	t.Helper()
	p, err := NewProcFS("testdata/proc", func(uid uint32) (string, error) {
		if n, ok := fixtureUsers[uid]; ok {
			return n, nil
		}
		return "", fmt.Errorf("unknown uid %d", uid)
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

func mockSampler(t testing.TB) *Sampler {
	t.Helper()
	h, err := NewNVML(mockServer(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(h, SamplerOptions{Procs: fixtureProcs(t), Now: fixedClock(fixtureBoot.Add(24 * time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSampleClassification(t *testing.T) {
	s := mockSampler(t)
	first, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range first.Processes {
		if p.Flags&FlagIdle != 0 {
			t.Errorf("pid %d idle on the first sample (nothing watched yet)", p.PID)
		}
	}
	now := fixtureBoot.Add(24*time.Hour + 31*time.Second)
	s.opts.Now = fixedClock(now)
	// pid 1000 keeps working: the driver reports a busy sample just now.
	s.devs[0].(*nvmlDevice).dev.(*dgxa100.Device).GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		return []nvml.ProcessUtilizationSample{{Pid: 1000, TimeStamp: uint64(now.UnixMicro()), SmUtil: 80, MemUtil: 30}}, nvml.SUCCESS
	}
	snap, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[uint32]Process{}
	for _, p := range snap.Processes {
		if p.Device == 0 {
			byPID[p.PID] = p
		}
	}
	tests := []struct {
		pid       uint32
		flags     string
		user      string
		container Container
		ppid      int
	}{
		{1000, "", "alice", Container{}, 999},
		{2000, "zombie,idle", "alice", Container{}, 999},
		{3000, "orphaned,idle", "bob", Container{}, 1},
		{4000, "jupyter,idle", "alice", Container{}, 3999},
		{5000, "idle", "svc-infer", Container{Runtime: "containerd", ID: "4b825dc642cb6eb9a060e54bf8d69288fbee4904e1f8b2c3d4e5f60718293a4b", PodUID: "2d3f6a1e-5b7c-4c1d-9e8f-0a1b2c3d4e5f"}, 4999},
		{7000, "no-such-process,idle", "", Container{}, 0},
	}
	for _, tt := range tests {
		p, ok := byPID[tt.pid]
		if !ok {
			t.Errorf("pid %d missing", tt.pid)
			continue
		}
		if got := p.Flags.String(); got != tt.flags {
			t.Errorf("pid %d flags = %q, want %q", tt.pid, got, tt.flags)
		}
		if p.User != tt.user || p.Container != tt.container || p.PPID != tt.ppid {
			t.Errorf("pid %d: user %q container %+v ppid %d, want %q %+v %d", tt.pid, p.User, p.Container, p.PPID, tt.user, tt.container, tt.ppid)
		}
	}
	p := byPID[1000]
	if n := len(s.cache.m); n > 12 {
		t.Errorf("cache holds %d entries", n)
	}
	if want := fixtureBoot.Add(600 * time.Second); !p.StartTime.Equal(want) {
		t.Errorf("start time = %v, want %v", p.StartTime, want)
	}
	if p.Command() != "python train.py --batch-size 64" || p.SM != 80 || !p.UtilKnown {
		t.Errorf("pid 1000 = %+v", p)
	}
	d0 := snap.Devices[0]
	wantProc := uint64(12*gib + 1*gib + 4*gib + 6*gib + 5*gib + 512<<20)
	if d0.ProcessMemory != wantProc || d0.Unattributed != 30*gib-wantProc || d0.IdleMethod != IdleByUtilization {
		t.Errorf("device 0 = %+v", d0)
	}
	if snap.Processes[0].PID != 1000 {
		t.Errorf("processes not sorted by memory: first is %d", snap.Processes[0].PID)
	}
}

func TestParseContainer(t *testing.T) {
	id := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	tests := []struct {
		path string
		want Container
	}{
		{"/user.slice/user-1000.slice/session-2.scope", Container{}},
		{"/docker/" + id, Container{Runtime: "docker", ID: id}},
		{"/system.slice/docker-" + id + ".scope", Container{Runtime: "docker", ID: id}},
		{"/system.slice/crio-" + id + ".scope", Container{Runtime: "cri-o", ID: id}},
		{"/machine.slice/libpod-" + id + ".scope/container", Container{Runtime: "podman", ID: id}},
		{"/kubepods/burstable/pod2d3f6a1e-5b7c-4c1d-9e8f-0a1b2c3d4e5f/" + id, Container{Runtime: "cri", ID: id, PodUID: "2d3f6a1e-5b7c-4c1d-9e8f-0a1b2c3d4e5f"}},
		{"/kubepods.slice/kubepods-pod2d3f6a1e_5b7c_4c1d_9e8f_0a1b2c3d4e5f.slice/crio-" + id + ".scope", Container{Runtime: "cri-o", ID: id, PodUID: "2d3f6a1e-5b7c-4c1d-9e8f-0a1b2c3d4e5f"}},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod2d3f6a1e_5b7c_4c1d_9e8f_0a1b2c3d4e5f.slice", Container{Runtime: "cri", PodUID: "2d3f6a1e-5b7c-4c1d-9e8f-0a1b2c3d4e5f"}},
		{"/system.slice/crio-conmon-" + id + ".scope", Container{}},
		{"/some/" + id, Container{}},
		{"", Container{}},
	}
	for _, tt := range tests {
		if got := ParseContainer(tt.path); got != tt.want {
			t.Errorf("ParseContainer(%q) = %+v, want %+v", tt.path, got, tt.want)
		}
	}
}

func TestProcFSv1Cgroup(t *testing.T) {
	d, err := fixtureProcs(t).Details(6000)
	if err != nil {
		t.Fatal(err)
	}
	if d.Container.Runtime != "docker" || d.User != "root" || !strings.HasPrefix(d.Cgroup, "/docker/") {
		t.Errorf("details = %+v", d)
	}
	if _, err := fixtureProcs(t).Stat(424242); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("missing pid error = %v", err)
	}
}

// fakeProcs is a ProcSource whose processes tests change, counting reads.
type fakeProcs struct {
	stats        map[int]ProcStat
	statReads    map[int]int
	detailsReads map[int]int
}

func newFakeProcs() *fakeProcs {
	return &fakeProcs{stats: map[int]ProcStat{
		1:   {PID: 1, Session: 1, Comm: "systemd", State: "S"},
		100: {PID: 100, PPID: 1, Session: 100, Comm: "bash", State: "S"},
		200: {PID: 200, PPID: 100, Session: 100, Comm: "python", State: "S", StartTicks: 7},
	}, statReads: map[int]int{}, detailsReads: map[int]int{}}
}

func (f *fakeProcs) Stat(pid int) (ProcStat, error) {
	f.statReads[pid]++
	s, ok := f.stats[pid]
	if !ok {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return s, nil
}

func (f *fakeProcs) Details(pid int) (ProcDetails, error) {
	f.detailsReads[pid]++
	return ProcDetails{User: "u", Cmdline: []string{"python", fmt.Sprint(f.stats[pid].StartTicks)}}, nil
}

func TestProcCache(t *testing.T) {
	f := newFakeProcs()
	c := newProcCache(f, time.Second)
	now := time.Unix(0, 0)
	var s Sampler
	s.cache = c
	p := Process{PID: 200}
	h := s.enrich(&p, now, nil)                        // the entry, passed back as the next hint
	h = s.enrich(&p, now.Add(500*time.Millisecond), h) // within refresh: no read
	if f.statReads[200] != 1 || f.detailsReads[200] != 1 {
		t.Fatalf("reads after two lookups in one refresh: stat %d details %d", f.statReads[200], f.detailsReads[200])
	}
	h = s.enrich(&p, now.Add(2*time.Second), h) // refresh: stat again, details cached
	if f.statReads[200] != 2 || f.detailsReads[200] != 1 {
		t.Fatalf("after refresh: stat %d details %d, want 2 1", f.statReads[200], f.detailsReads[200])
	}
	// PID reuse: a new start time means a new process, read afresh.
	f.stats[200] = ProcStat{PID: 200, PPID: 100, Session: 100, Comm: "python", State: "S", StartTicks: 99}
	p = Process{PID: 200}
	h = s.enrich(&p, now.Add(4*time.Second), h)
	if f.detailsReads[200] != 2 || p.Cmdline[1] != "99" {
		t.Errorf("PID reuse not detected: details reads %d, cmdline %v", f.detailsReads[200], p.Cmdline)
	}
	if c.m[200] != h || h.dropped {
		t.Errorf("the hint returned is not the cache's entry")
	}
	c.prune(now.Add(time.Hour), map[int]bool{200: true})
	if _, ok := c.m[200]; !ok || len(c.m) != 1 {
		t.Errorf("prune kept %d entries, want only the live pid", len(c.m))
	}
	// A hint the cache replaced is not used: the PID's new process is read.
	f.stats[200] = ProcStat{PID: 200, PPID: 100, Session: 100, Comm: "python", State: "S", StartTicks: 123}
	old := h
	p = Process{PID: 200}
	h = s.enrich(&p, now.Add(2*time.Hour), old) // refresh: new start time, entry replaced
	if !old.dropped || h == old || p.Cmdline[1] != "123" {
		t.Fatalf("replaced entry: old dropped %v, same entry %v, cmdline %v", old.dropped, h == old, p.Cmdline)
	}
	old.checked = now.Add(2 * time.Hour) // fresh by its time: only dropped tells
	p = Process{PID: 200}
	if s.enrich(&p, now.Add(2*time.Hour), old); p.Cmdline[1] != "123" {
		t.Errorf("a dropped hint was used: cmdline %v", p.Cmdline)
	}
	// A PID that keeps failing keeps its negative entry; one that comes
	// back gets a new entry.
	p = Process{PID: 555}
	neg := s.enrich(&p, now, nil)
	if neg.err == nil || p.Flags&FlagNoSuchProcess == 0 {
		t.Fatalf("missing PID: entry error %v, flags %v", neg.err, p.Flags)
	}
	p = Process{PID: 555}
	if again := s.enrich(&p, now.Add(2*time.Second), neg); again != neg || neg.dropped || f.statReads[555] != 2 || p.Flags&FlagNoSuchProcess == 0 {
		t.Errorf("the same failure again: new entry %v, dropped %v, stat reads %d, flags %v", again != neg, neg.dropped, f.statReads[555], p.Flags)
	}
	f.stats[555] = ProcStat{PID: 555, PPID: 100, Session: 100, Comm: "python", State: "S", StartTicks: 5}
	p = Process{PID: 555}
	if back := s.enrich(&p, now.Add(4*time.Second), neg); back == neg || !neg.dropped || back.err != nil || p.Flags&FlagNoSuchProcess != 0 {
		t.Errorf("the PID came back: same entry %v, old dropped %v, error %v, flags %v", back == neg, neg.dropped, back.err, p.Flags)
	}
}

func TestOrphanRule(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *fakeProcs)
		want   bool
	}{
		{"parent alive", func(f *fakeProcs) {}, false},
		{"reparented to init, shell gone", func(f *fakeProcs) {
			delete(f.stats, 100)
			f.stats[200] = ProcStat{PID: 200, PPID: 1, Session: 100, Comm: "python", State: "S", StartTicks: 7}
		}, true},
		{"reparented to a subreaper", func(f *fakeProcs) {
			f.stats[300] = ProcStat{PID: 300, PPID: 1, Session: 300, Comm: "systemd"}
			f.stats[200] = ProcStat{PID: 200, PPID: 300, Session: 100, Comm: "python", State: "S", StartTicks: 7}
		}, true},
		{"parent gone (not yet reparented)", func(f *fakeProcs) { delete(f.stats, 100) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProcs()
			s := Sampler{cache: newProcCache(f, time.Second)}
			p := Process{PID: 200}
			s.enrich(&p, time.Unix(0, 0), nil)
			if p.Flags&FlagOrphaned != 0 {
				t.Fatalf("orphaned before the change")
			}
			tt.change(f)
			p = Process{PID: 200}
			s.enrich(&p, time.Unix(10, 0), nil)
			if got := p.Flags&FlagOrphaned != 0; got != tt.want {
				t.Errorf("orphaned = %v, want %v", got, tt.want)
			}
		})
	}
	// A service's child started by init as a session leader is not orphaned.
	f := newFakeProcs()
	f.stats[200] = ProcStat{PID: 200, PPID: 1, Session: 200, Comm: "python", State: "S", StartTicks: 7}
	s := Sampler{cache: newProcCache(f, time.Second)}
	p := Process{PID: 200}
	s.enrich(&p, time.Unix(0, 0), nil)
	if p.Flags&FlagOrphaned != 0 {
		t.Error("session leader under init flagged orphaned")
	}
}

// fakeDevice is a Device with scripted memory and no per-process
// utilization support.
type fakeDevice struct {
	mem   uint64
	util  uint32
	procs []DriverProcess
}

func (d *fakeDevice) Identity() (Identity, error) {
	return Identity{Index: 0, UUID: "GPU-fake", Name: "Fake"}, nil
}
func (d *fakeDevice) Memory() (Memory, error) {
	return Memory{Total: 100, Used: d.mem, Free: 100 - d.mem}, nil
}
func (d *fakeDevice) Utilization() (Utilization, error) {
	return Utilization{GPU: d.util, Known: true}, nil
}
func (d *fakeDevice) Processes() ([]DriverProcess, error) { return d.procs, nil }
func (d *fakeDevice) ProcessUtilization(time.Time) ([]ProcessUtilization, error) {
	return nil, fmt.Errorf("nvmlDeviceGetProcessUtilization: %w", ErrNotSupported)
}
func (d *fakeDevice) AccountingEnabled() (bool, error) { return false, nil }
func (d *fakeDevice) Accounting() ([]AccountingRecord, error) {
	return nil, fmt.Errorf("accounting off")
}

type fakeHost struct{ devs []Device }

func (h fakeHost) Info() HostInfo             { return HostInfo{Backend: "fake"} }
func (h fakeHost) Devices() ([]Device, error) { return h.devs, nil }
func (h fakeHost) Close() error               { return nil }

func TestIdleByMemory(t *testing.T) {
	d := &fakeDevice{mem: 50, procs: []DriverProcess{{PID: 1, Memory: 10, MemoryKnown: true}, {PID: 2, Memory: 20, MemoryKnown: true}}}
	now := time.Unix(1000, 0)
	s, err := NewSampler(fakeHost{[]Device{d}}, SamplerOptions{IdleWindow: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	idle := func() map[uint32]bool {
		snap, err := s.Sample()
		if err != nil {
			t.Fatal(err)
		}
		if snap.Devices[0].IdleMethod != IdleByMemory {
			t.Fatalf("method = %v", snap.Devices[0].IdleMethod)
		}
		out := map[uint32]bool{}
		for _, p := range snap.Processes {
			out[p.PID] = p.Flags&FlagIdle != 0
		}
		return out
	}
	if got := idle(); got[1] || got[2] {
		t.Fatalf("idle on the first sample: %v", got)
	}
	for i := 0; i < 11; i++ {
		now = now.Add(time.Second)
		if i == 5 {
			d.procs[1].Memory = 25 // process 2 moves
		}
		idle()
	}
	if got := idle(); !got[1] || got[2] {
		t.Errorf("after 11 s: idle = %v, want 1 idle, 2 not (its memory moved 6 s ago)", got)
	}
	d.util = 5 // device busy: nobody is idle by this method
	now = now.Add(time.Second)
	if got := idle(); got[1] {
		t.Errorf("idle while the device is busy: %v", got)
	}
}

func TestAccounting(t *testing.T) {
	acc := mockSampler(t).Accounting()
	if len(acc) != 8 || !acc[0].Enabled || acc[1].Enabled || acc[0].Err != nil {
		t.Fatalf("accounting = %+v", acc[:2])
	}
	if r := acc[0].Records; len(r) != 2 || r[0].PID != 900 || r[0].MaxMemory != 70*gib || r[1].PID != 1000 || !r[1].Running {
		t.Errorf("records = %+v, want pid 900 (exited, 70 GiB) first", r)
	}
}

func TestSamplerDeviceSelection(t *testing.T) {
	h, _ := NewNVML(mockServer(t))
	s, err := NewSampler(h, SamplerOptions{Devices: []int{3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, id := range s.Devices() {
		got = append(got, id.Index)
	}
	if !reflect.DeepEqual(got, []int{1, 3}) || len(s.AllDevices()) != 8 {
		t.Errorf("devices = %v", got)
	}
	if _, err := NewSampler(h, SamplerOptions{Devices: []int{8}}); err == nil || err.Error() != "no GPU 8: this host has 8 (0-7)" {
		t.Errorf("err = %v", err)
	}
	mem, err := s.SampleMemory(nil)
	if err != nil || len(mem) != 2 || mem[1].Device != 3 {
		t.Errorf("memory = %+v, %v", mem, err)
	}
}

func TestWatchKeepsPeaks(t *testing.T) {
	d := &fakeDevice{mem: 10, procs: []DriverProcess{{PID: 1, Memory: 10, MemoryKnown: true}}}
	s, err := NewSampler(fakeHost{[]Device{d}}, SamplerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Interval
	n := 0
	// A spike between process samples: memory jumps for one fast sample.
	spiky := &spikeDevice{fakeDevice: d, spikeAt: 3, spike: 90}
	s.devs[0] = spiky
	err = s.Watch(context.Background(), WatchOptions{Interval: 20 * time.Millisecond, SampleInterval: 2 * time.Millisecond, ProcessInterval: 20 * time.Millisecond, Count: 2}, func(iv *Interval) error {
		got = append(got, iv.Clone()) // iv is reused after emit returns
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("intervals = %d", len(got))
	}
	st := got[0].Devices[0].Used
	if st.Max != 90 || st.Min != 10 || st.N != 10 || got[0].MemorySamples != 10 || got[0].ProcessSamples != 1 {
		t.Errorf("first interval used = %+v (samples %d/%d), want max 90 min 10 over 10 samples, 1 process sample", st, got[0].MemorySamples, got[0].ProcessSamples)
	}
	if p := got[0].Processes; len(p) != 1 || p[0].Memory.Max != 10 {
		t.Errorf("processes = %+v", p)
	}
	if got[1].Devices[0].Used.Max != 10 {
		t.Errorf("second interval max = %d, want 10 (the spike is in the first)", got[1].Devices[0].Used.Max)
	}
}

// spikeDevice reports spike bytes on its spikeAt-th Memory call.
type spikeDevice struct {
	*fakeDevice
	calls, spikeAt int
	spike          uint64
}

func (d *spikeDevice) Memory() (Memory, error) {
	d.calls++
	m, _ := d.fakeDevice.Memory()
	if d.calls == d.spikeAt {
		m.Used = d.spike
	}
	return m, nil
}

func TestWatchOptions(t *testing.T) {
	tests := []struct {
		opts WatchOptions
		want string
	}{
		{WatchOptions{Interval: 5 * time.Millisecond}, "interval 5ms out of range: must be between 10ms and 1h0m0s"},
		{WatchOptions{Interval: 2 * time.Hour}, "interval 2h0m0s out of range: must be between 10ms and 1h0m0s"},
		{WatchOptions{Interval: time.Second, SampleInterval: 2 * time.Second}, "sample interval 2s out of range: must be between 1ms and the interval (1s)"},
		{WatchOptions{Interval: time.Second, Count: -1}, "count -1: must be 0 (forever) or more"},
		{WatchOptions{Interval: time.Second, Clock: 7}, "clock Clock(7): must be ClockTimer or ClockSleep"},
		{WatchOptions{Interval: time.Second, Clock: ClockSleep}, ""},
		{WatchOptions{Interval: time.Second}, ""},
	}
	for _, tt := range tests {
		err := tt.opts.normalize()
		if got := fmt.Sprint(err); (err == nil && tt.want != "") || (err != nil && got != tt.want) {
			t.Errorf("%+v: err = %v, want %q", tt.opts, err, tt.want)
		}
	}
	o := WatchOptions{Interval: time.Second}
	_ = o.normalize()
	if o.SampleInterval != 5*time.Millisecond || o.ProcessInterval != 100*time.Millisecond {
		t.Errorf("defaults = %+v", o)
	}
}

func TestStat(t *testing.T) {
	var s Stat
	if s.Mean() != 0 {
		t.Error("mean of nothing")
	}
	for _, v := range []uint64{5, 1, 9, 3} {
		s.Add(v)
	}
	if s.Min != 1 || s.Max != 9 || s.Last != 3 || s.Mean() != 4 || s.N != 4 {
		t.Errorf("stat = %+v mean %d", s, s.Mean())
	}
}

// TestRecycle: a sample that fills a handed-back process list is the sample
// a sampler that allocates a fresh one takes, while processes come, go and
// change on the simulated host; and the list is reused, not reallocated.
func TestRecycle(t *testing.T) {
	// Device 1 falls off the bus for a while, and its processes leave the
	// sample: the list shrinks into a spare one, then outgrows it.
	var sims []*Sim
	sampler := func() (*Sampler, func(time.Duration)) {
		now := fixtureBoot.Add(24 * time.Hour)
		clock := func() time.Time { return now }
		sim, err := NewSimProcs(2, 30, 7, clock)
		if err != nil {
			t.Fatal(err)
		}
		sims = append(sims, sim)
		s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return s, func(d time.Duration) { now = now.Add(d) }
	}
	recycled, advR := sampler()
	fresh, advF := sampler()
	var prev *Snapshot
	reused := 0
	for i := range 200 {
		advR(7 * time.Second)
		advF(7 * time.Second)
		for _, sim := range sims {
			switch i {
			case 50:
				sim.FailDevice(1, nil)
			case 100:
				sim.RestoreDevice(1)
			}
		}
		if prev != nil {
			recycled.Recycle(prev)
			if prev.Processes != nil {
				t.Fatal("Recycle left the snapshot its process list")
			}
		}
		spare := recycled.spare
		got, err := recycled.Sample()
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Sample()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("sample %d: recycled list gives\n%+v\nwant\n%+v", i, got.Processes, want.Processes)
		}
		if len(got.Processes) > 0 && cap(spare) >= len(got.Processes) {
			if &got.Processes[0] != &spare[:1][0] {
				t.Fatalf("sample %d: a spare list of %d places was not reused for %d processes", i, cap(spare), len(got.Processes))
			}
			reused++
		}
		prev = got
	}
	if reused == 0 {
		t.Error("no sample reused a handed-back list")
	}
	recycled.Recycle(nil) // no-op
}
