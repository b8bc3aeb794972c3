package gpu

import (
	"maps"
	"sync"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
)

// ChannelReader reads the statistics channel of processes running vram's
// allocator (package alloc/statchan): *statchan.Reader, or a fake.
type ChannelReader interface {
	Read(dst []statchan.Record) ([]statchan.Record, error)
}

// AllocIndex finds a process's channel record for a device. Build one per
// sample with NewAllocIndex.
type AllocIndex struct {
	byPID     map[uint32][]*statchan.Record
	simulated bool
}

// NewAllocIndex indexes recs (kept, not copied) for a host; simulated
// says whether the host is a Sim, whose devices carry the processes on
// libvram's simulated backend.
func NewAllocIndex(recs []statchan.Record, simulated bool) AllocIndex {
	x := AllocIndex{simulated: simulated}
	if len(recs) == 0 {
		return x
	}
	x.byPID = make(map[uint32][]*statchan.Record, len(recs))
	for i := range recs {
		r := &recs[i]
		x.byPID[uint32(r.PID)] = append(x.byPID[uint32(r.PID)], r)
	}
	return x
}

// Lookup returns the record of pid on the device with this NVML index and
// UUID, or nil when the process publishes none there. A record names its
// device by UUID (the CUDA ordinal inside the process depends on its
// CUDA_VISIBLE_DEVICES); a record of the simulated backend has none and
// matches the simulated host's device of its ordinal.
func (x AllocIndex) Lookup(pid uint32, index int, uuid string) *statchan.Record {
	for _, r := range x.byPID[pid] {
		switch {
		case r.UUIDKnown && !x.simulated:
			if r.UUIDString() == uuid {
				return r
			}
		case !r.UUIDKnown && x.simulated && r.Backend == "sim":
			if r.Device == index {
				return r
			}
		}
	}
	return nil
}

// simContext is what the simulated driver adds to the reserved memory of a
// process on libvram's simulated backend: its CUDA context.
const simContext = 500 << 20

// simChannel is a Sim's view of the processes that run libvram on its
// simulated backend: they appear on the simulated devices as the driver
// would list them, their reserved memory plus a context.
type simChannel struct {
	mu     sync.Mutex
	r      ChannelReader
	procs  ProcSource // their /proc
	recs   []statchan.Record
	readAt time.Time
	pids   map[int]bool
	// shadowed is set when an adopted PID is also a synthetic one's: a
	// real process hides the synthetic process of its PID (a simulated
	// host draws PIDs that a real process may hold).
	shadowed bool
}

// channelRefresh bounds how often a Sim reads the channel.
const channelRefresh = 20 * time.Millisecond

// AdoptChannel makes the processes that run libvram with VRAM_DEVICE=sim,
// as r reads them, processes of the simulated devices of their ordinals;
// procs answers Stat and Details for them (the real /proc). Without it a
// Sim shows only its synthetic processes.
func (s *Sim) AdoptChannel(r ChannelReader, procs ProcSource) {
	s.ch = &simChannel{r: r, procs: procs, pids: map[int]bool{}}
}

// channelProcs returns the adopted processes of device dev.
func (s *Sim) channelProcs(dev int) []DriverProcess {
	c := s.ch
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.readAt) >= channelRefresh {
		c.readAt = now
		c.recs, _ = c.r.Read(c.recs)
		clear(c.pids)
		c.shadowed = false
		for _, r := range c.recs {
			if r.Backend == "sim" && !r.UUIDKnown {
				c.pids[r.PID] = true
				_, synthetic := s.procs[r.PID]
				c.shadowed = c.shadowed || synthetic
			}
		}
	}
	var out []DriverProcess
	for _, r := range c.recs {
		if r.Backend == "sim" && !r.UUIDKnown && r.Device == dev {
			out = append(out, DriverProcess{PID: uint32(r.PID), Memory: uint64(r.Reserved) + simContext, MemoryKnown: true, Kind: KindCompute})
		}
	}
	return out
}

// hiddenPIDs returns the PIDs of the adopted processes (a copy) when one
// of them holds the PID of a synthetic process, which it hides; nil when
// none does.
func (s *Sim) hiddenPIDs() map[int]bool {
	c := s.ch
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.shadowed {
		return nil
	}
	return maps.Clone(c.pids)
}

// adopted returns the ProcSource of an adopted PID, or nil.
func (s *Sim) adopted(pid int) ProcSource {
	c := s.ch
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pids[pid] && c.procs != nil {
		return c.procs
	}
	return nil
}

// NewSimChannelOnly is a simulated host of n GPUs with no synthetic
// processes: its devices carry only the processes that run libvram on the
// simulated backend (AdoptChannel). vram run --simulate uses it, so that
// no synthetic PID can be taken for one of the job's.
func NewSimChannelOnly(n int, now func() time.Time) (*Sim, error) {
	s, err := NewSimProcs(n, 0, 1, now)
	if err != nil {
		return nil, err
	}
	for pid, p := range s.procs {
		if p.onGPU {
			delete(s.procs, pid)
		}
	}
	s.byDev, s.loads = make([][]*simProc, n), make([][]simLoad, n)
	return s, nil
}
