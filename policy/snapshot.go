package policy

// From the sampled processes to what the rules test, shared by vram
// reclaim and the node daemon.

import (
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/sample"
)

// FromProcesses merges the records of one sample into a Sample with one
// Process per PID: a process that holds memory on several GPUs counts the
// sum, under the GPU where it was listed first (a snapshot lists the
// largest first), and its IdleFor is that listing's. Container is the
// container ID, or the pod UID when only that is known.
func FromProcesses(t time.Time, ps []sample.Process) Sample {
	s := Sample{Time: t, Processes: make([]Process, 0, len(ps))}
	at := make(map[uint32]int, len(ps))
	for i := range ps {
		r := &ps[i]
		if j, ok := at[r.PID]; ok {
			s.Processes[j].Bytes += r.Bytes
			continue
		}
		at[r.PID] = len(s.Processes)
		s.Processes = append(s.Processes, fromRecord(r))
	}
	return s
}

func fromRecord(r *sample.Process) Process {
	p := Process{
		PID: int(r.PID), Device: r.GPUIndex, StartTime: r.StartTime, User: r.User, Cgroup: r.Cgroup,
		Container: r.ContainerID, Command: r.Command, Bytes: r.Bytes, IdleFor: r.IdleFor,
		Zombie: r.Flags&gpu.FlagZombie != 0, NoSuchProcess: r.Flags&gpu.FlagNoSuchProcess != 0,
		Orphaned: r.Flags&gpu.FlagOrphaned != 0, Jupyter: r.Flags&gpu.FlagJupyter != 0,
	}
	if p.Container == "" {
		p.Container = r.PodUID
	}
	return p
}

// FromSnapshot is FromProcesses over a snapshot's records (sample.FromGPU).
// idleFor, when not nil, says how long each process flagged idle has been
// idle; it is asked once per PID, for the first listing. Without it
// IdleFor is 0: how long a process has been idle depends on how long the
// caller has watched it.
func FromSnapshot(snap *gpu.Snapshot, idleFor func(gpu.Process) time.Duration) Sample {
	rs := make([]sample.Process, len(snap.Processes))
	first := make(map[uint32]bool, len(snap.Processes))
	for i, p := range snap.Processes {
		rs[i] = sample.FromGPU(p)
		if !first[p.PID] {
			first[p.PID] = true
			if idleFor != nil && p.Flags&gpu.FlagIdle != 0 {
				rs[i].IdleFor = idleFor(p)
			}
		}
	}
	return FromProcesses(snap.Time, rs)
}
