package serve

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
)

// fakeChannel is a statistics channel whose records the test sets.
type fakeChannel struct {
	mu   sync.Mutex
	recs []statchan.Record
}

func (c *fakeChannel) Read(dst []statchan.Record) ([]statchan.Record, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(dst[:0], c.recs...), nil
}

// publish makes pid, on the simulated GPU 0, a process on vram's
// allocator with these figures.
func (c *fakeChannel) publish(pid uint32, allocated, reserved, freeCached, largest int64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = []statchan.Record{{
		Header:  statchan.Header{PID: int(pid), Device: 0, Backend: "sim", Version: "test"},
		Figures: statchan.Figures{Allocated: allocated, Reserved: reserved, FreeCached: freeCached, LargestFree: largest, NumOOMs: 1},
		Updated: at,
	}}
}

// withChannel makes the daemon's sampler read the channel c.
func withChannel(t *testing.T, c gpu.ChannelReader) envOption {
	return func(o *Options) {
		s, err := gpu.NewSampler(o.Opened.Host, gpu.SamplerOptions{Procs: o.Opened.Procs, Now: o.Now, IdleWindow: 30 * time.Second, Channel: c})
		if err != nil {
			t.Fatal(err)
		}
		o.Opened.Sampler = s
	}
}

// TestAllocatorFiguresInStateAndHistory: a process on vram's allocator
// has its figures in the State, and the history keeps the most it had
// allocated and reserved over each history interval.
func TestAllocatorFiguresInStateAndHistory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HistoryInterval = 5 * time.Second
	ch := &fakeChannel{}
	e := newEnv(t, 1, cfg, withChannel(t, ch))
	t0 := e.clk.Now()
	e.step(time.Second) // written at once, without figures
	s, _ := e.d.State()
	if len(s.Processes) < 2 {
		t.Fatalf("the simulated GPU has %d processes, want 2 or more", len(s.Processes))
	}
	pid := s.Processes[0].PID
	// Samples at 2..6 s: allocated peaks at 4 s, reserved at 6 s.
	for i, f := range [][2]int64{{100, 1000}, {300, 1000}, {500, 1200}, {200, 1200}, {200, 1500}} {
		ch.publish(pid, f[0]<<20, f[1]<<20, 400<<20, 300<<20, e.clk.Now())
		e.step(time.Second)
		if i == 0 {
			s, _ = e.d.State()
		}
	}
	for _, p := range s.Processes {
		if p.PID != pid {
			if p.AllocatedBytes != nil || p.ReservedBytes != nil || p.Allocator != nil {
				t.Errorf("process %d, not on the allocator, has figures %+v", p.PID, p.AllocatorFields)
			}
			continue
		}
		a := p.Allocator
		if p.AllocatedBytes == nil || *p.AllocatedBytes != 100<<20 || p.ReservedBytes == nil || *p.ReservedBytes != 1000<<20 || a == nil ||
			a.NumOOMs != 1 || a.Backend != "sim" || a.LargestFreeBlock != 300<<20 || a.Fragmentation != 0.1 {
			t.Errorf("process %d on the allocator: %+v %+v", pid, p.AllocatorFields, a)
		}
	}
	e.flush(t)
	pts, err := e.d.ProcessHistory(context.Background(), s.Processes[0].GPU, pid, api.HistoryQuery{From: t0, To: e.clk.Now().Add(time.Second)})
	if err != nil || len(pts) != 2 {
		t.Fatalf("process history: %+v %v", pts, err)
	}
	if pts[0].Allocated != nil || pts[0].Reserved != nil {
		t.Errorf("first point, before the figures: %+v", pts[0])
	}
	if a, r := pts[1].Allocated, pts[1].Reserved; a == nil || r == nil || a.Max != 500<<20 || r.Max != 1500<<20 {
		t.Errorf("second point: allocated %+v, reserved %+v; want the interval's peaks 500 MiB and 1500 MiB", a, r)
	}
}
