package gpu

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSimProcs(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	sim, err := NewSimProcs(8, 200, 3, clock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	var snap *Snapshot
	for _, d := range []time.Duration{time.Minute, time.Minute + 31*time.Second} {
		now = t0.Add(d)
		if snap, err = s.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	perGPU := map[string]int{}
	pids := map[uint32]bool{}
	var all Flags
	for _, p := range snap.Processes {
		perGPU[p.DeviceUUID]++
		if pids[p.PID] {
			t.Errorf("PID %d twice", p.PID)
		}
		pids[p.PID] = true
		all |= p.Flags
		if p.PID >= 4<<20 {
			t.Errorf("PID %d above Linux's largest pid_max", p.PID)
		}
	}
	if len(snap.Devices) != 8 || len(perGPU) != 8 {
		t.Fatalf("%d devices, processes on %d", len(snap.Devices), len(perGPU))
	}
	for g, n := range perGPU {
		if n != 200 {
			t.Errorf("GPU %s: %d processes, want 200", g, n)
		}
	}
	for _, f := range []Flags{FlagNoSuchProcess, FlagZombie, FlagOrphaned, FlagJupyter, FlagIdle} {
		if all&f == 0 {
			t.Errorf("no simulated process is %v", f)
		}
	}
	for _, d := range snap.Devices {
		m := d.Memory
		if m.Used >= m.Total-m.Reserved || m.Used < 10<<30 {
			t.Errorf("GPU %d: %d GiB used of %d: the scaling should keep a GPU partly full", d.Index, m.Used>>30, m.Total>>30)
		}
	}
}

func TestSimProcsZeroIsNewSim(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, err := NewSim(5, 9, clock)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSimProcs(5, 0, 9, clock)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.procs, b.procs) || len(a.procs) < 5 {
		t.Error("NewSimProcs(n, 0, ...) has other processes than NewSim")
	}
	for i := range a.devs {
		if a.devs[i].(*simDevice).uuid != b.devs[i].(*simDevice).uuid {
			t.Errorf("GPU %d: other UUIDs", i)
		}
	}
}

func TestSimProcsOpen(t *testing.T) {
	tests := []struct {
		name string
		o    OpenOptions
		env  string
		want int // processes on GPU 0; 0: the error
		err  string
	}{
		{name: "default", o: OpenOptions{Simulate: 2}, want: 7},
		{name: "variable", o: OpenOptions{Simulate: 2}, env: "50", want: 50},
		{name: "field wins", o: OpenOptions{Simulate: 2, SimProcs: 12}, env: "50", want: 12},
		{name: "not a number", o: OpenOptions{Simulate: 2}, env: "lots", err: `VRAM_SIMULATE_PROCS="lots": want a number`},
		{name: "too many", o: OpenOptions{Simulate: 2}, env: "1001", err: "1 to 1000"},
		{name: "zero", o: OpenOptions{Simulate: 2}, env: "0", err: "1 to 1000"},
		{name: "field out of range", o: OpenOptions{Simulate: 2, SimProcs: -1}, err: "processes per GPU: -1 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Getenv = func(k string) (string, bool) {
				if k == SimProcsEnv && tt.env != "" {
					return tt.env, true
				}
				return "", false
			}
			op, err := Open(tt.o)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer op.Host.Close()
			devs, _ := op.Host.Devices()
			ps, err := devs[0].Processes()
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != tt.want {
				t.Errorf("%d processes on GPU 0, want %d", len(ps), tt.want)
			}
		})
	}
}
