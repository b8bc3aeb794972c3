package gpu

import (
	"reflect"
	"testing"
	"time"
)

func simSnapshot(t *testing.T, seed int64, at ...time.Duration) *Snapshot {
	t.Helper()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	sim, err := NewSim(2, seed, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var snap *Snapshot
	for _, d := range at {
		now = t0.Add(d)
		if snap, err = s.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func TestSimDeterministic(t *testing.T) {
	a, b := simSnapshot(t, 7, 90*time.Second), simSnapshot(t, 7, 90*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed and clock gave different snapshots")
	}
	c := simSnapshot(t, 7, 95*time.Second)
	if reflect.DeepEqual(a.Devices, c.Devices) {
		t.Error("memory did not move over 5 s")
	}
	if d := simSnapshot(t, 8, 90*time.Second); reflect.DeepEqual(a.Devices[0].UUID, d.Devices[0].UUID) {
		t.Error("different seeds gave the same device")
	}
	if !a.Host.Simulated {
		t.Error("simulated host not labelled")
	}
}

func TestSimShowsEveryFlag(t *testing.T) {
	snap := simSnapshot(t, 1, time.Minute, time.Minute+31*time.Second)
	var all Flags
	for _, p := range snap.Processes {
		all |= p.Flags
	}
	for _, f := range []Flags{FlagNoSuchProcess, FlagZombie, FlagOrphaned, FlagJupyter, FlagIdle} {
		if all&f == 0 {
			t.Errorf("no simulated process is %v", f)
		}
	}
	for _, d := range snap.Devices {
		if d.Memory.Total != d.Memory.Used+d.Memory.Free+d.Memory.Reserved || d.Unattributed == 0 {
			t.Errorf("device %d memory inconsistent: %+v unattributed %d", d.Index, d.Memory, d.Unattributed)
		}
	}
	if _, err := NewSim(0, 1, nil); err == nil {
		t.Error("0 GPUs accepted")
	}
}
