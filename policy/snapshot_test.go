package policy

import (
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/sample"
)

func TestFromSnapshot(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	snap := &gpu.Snapshot{Time: start.Add(time.Hour), Processes: []gpu.Process{
		{PID: 10, Device: 1, Memory: 8 << 30, MemoryKnown: true, User: "ann", Cmdline: []string{"python", "a.py"}, StartTime: start,
			Container: gpu.Container{PodUID: "pod-1"}, Flags: gpu.FlagIdle | gpu.FlagJupyter},
		{PID: 20, Device: 0, Memory: 4 << 30, MemoryKnown: true, Comm: "x", Container: gpu.Container{ID: "abc", PodUID: "pod-2"}, Flags: gpu.FlagOrphaned},
		{PID: 10, Device: 0, Memory: 2 << 30, MemoryKnown: true, Flags: gpu.FlagIdle},
		{PID: 30, Device: 0, Memory: ^uint64(0), MemoryKnown: false, Flags: gpu.FlagZombie | gpu.FlagNoSuchProcess},
		{PID: 10, Device: 2, Memory: 1 << 30, MemoryKnown: false},
	}}
	asked := 0
	s := FromSnapshot(snap, func(p gpu.Process) time.Duration { asked++; return 5 * time.Minute })
	want := []Process{
		{PID: 10, Device: 1, StartTime: start, User: "ann", Container: "pod-1", Command: "python a.py", Bytes: 10 << 30, Jupyter: true, IdleFor: 5 * time.Minute},
		{PID: 20, Device: 0, Container: "abc", Command: "[x]", Bytes: 4 << 30, Orphaned: true},
		{PID: 30, Device: 0, Bytes: 0, Zombie: true, NoSuchProcess: true},
	}
	if !s.Time.Equal(snap.Time) || len(s.Processes) != len(want) {
		t.Fatalf("sample = %+v", s)
	}
	for i := range want {
		if s.Processes[i] != want[i] {
			t.Errorf("process %d = %+v\nwant %+v", i, s.Processes[i], want[i])
		}
	}
	if asked != 1 {
		t.Errorf("idleFor asked %d times, want once (PID 10's first listing)", asked)
	}
	if s := FromSnapshot(snap, nil); s.Processes[0].IdleFor != 0 {
		t.Errorf("without idleFor, IdleFor = %v", s.Processes[0].IdleFor)
	}
}

func TestFromProcesses(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	rs := []sample.Process{
		{GPU: "GPU-1", GPUIndex: 1, PID: 10, Command: "python a.py", Bytes: 8 << 30, IdleFor: time.Minute, PodUID: "pod-1", Flags: gpu.FlagIdle},
		{GPU: "GPU-0", GPUIndex: 0, PID: 20, Bytes: 4 << 30, ContainerID: "abc", PodUID: "pod-2", Flags: gpu.FlagZombie | gpu.FlagOrphaned},
		{GPU: "GPU-0", GPUIndex: 0, PID: 10, Bytes: 2 << 30, IdleFor: time.Hour},
		{GPU: "GPU-2", GPUIndex: 2, PID: 10}, // memory unknown: the record holds 0 bytes
	}
	s := FromProcesses(at, rs)
	want := []Process{
		{PID: 10, Device: 1, Container: "pod-1", Command: "python a.py", Bytes: 10 << 30, IdleFor: time.Minute},
		{PID: 20, Device: 0, Container: "abc", Bytes: 4 << 30, Zombie: true, Orphaned: true},
	}
	if !s.Time.Equal(at) || len(s.Processes) != len(want) {
		t.Fatalf("sample = %+v", s)
	}
	for i := range want {
		if s.Processes[i] != want[i] {
			t.Errorf("process %d = %+v\nwant %+v", i, s.Processes[i], want[i])
		}
	}
}
