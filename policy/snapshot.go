package policy

// From a GPU sample to what the rules test, shared by vram reclaim and the
// node daemon.

import (
	"time"

	"github.com/vramhq/vram/gpu"
)

// FromGPU converts one sampled process into what the rules test. Memory the
// driver cannot report counts as 0 bytes; Container is the container ID, or
// the pod UID when only that is known. IdleFor is left 0: how long a
// process has been idle depends on how long the caller has watched it.
func FromGPU(p gpu.Process) Process {
	bytes := p.Memory
	if !p.MemoryKnown {
		bytes = 0
	}
	out := Process{
		PID: int(p.PID), Device: p.Device, StartTime: p.StartTime, User: p.User, Cgroup: p.Cgroup,
		Container: p.Container.ID, Command: p.Command(), Bytes: bytes,
		Zombie: p.Flags&gpu.FlagZombie != 0, NoSuchProcess: p.Flags&gpu.FlagNoSuchProcess != 0,
		Orphaned: p.Flags&gpu.FlagOrphaned != 0, Jupyter: p.Flags&gpu.FlagJupyter != 0,
	}
	if out.Container == "" {
		out.Container = p.Container.PodUID
	}
	return out
}

// FromSnapshot converts a snapshot into a Sample with one Process per PID:
// a process that holds memory on several GPUs counts the sum, under the
// device where it was listed first (the snapshot lists the largest first).
// idleFor, when not nil, says how long each process flagged idle has been
// idle; it is asked once per PID, for the first listing.
func FromSnapshot(snap *gpu.Snapshot, idleFor func(gpu.Process) time.Duration) Sample {
	s := Sample{Time: snap.Time, Processes: make([]Process, 0, len(snap.Processes))}
	at := make(map[uint32]int, len(snap.Processes))
	for _, p := range snap.Processes {
		if i, ok := at[p.PID]; ok {
			if p.MemoryKnown {
				s.Processes[i].Bytes += p.Memory
			}
			continue
		}
		pp := FromGPU(p)
		if idleFor != nil && p.Flags&gpu.FlagIdle != 0 {
			pp.IdleFor = idleFor(p)
		}
		at[p.PID] = len(s.Processes)
		s.Processes = append(s.Processes, pp)
	}
	return s
}
