package alloc_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// TestStatsAccumulated checks the sums that the allocator derives when
// read (Freed of every statistic, Allocated of "all") against a model that
// adds up every increase and decrease, across ResetAccumulatedStats calls
// made while allocations are live.
func TestStatsAccumulated(t *testing.T) {
	// Not newAlloc: its final invariant check expects sums never reset.
	a, err := alloc.New(newDev(t, 4<<30), alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	type sums struct{ count, bytes [3]alloc.Stat }
	var m sums // model: Current, Allocated, Freed; Peak unchecked here
	add := func(pool int, bytes int64) {
		for _, i := range []int{0, pool} {
			m.count[i].Current++
			m.count[i].Allocated++
			m.bytes[i].Current += bytes
			m.bytes[i].Allocated += bytes
		}
	}
	sub := func(pool int, bytes int64) {
		for _, i := range []int{0, pool} {
			m.count[i].Current--
			m.count[i].Freed++
			m.bytes[i].Current -= bytes
			m.bytes[i].Freed += bytes
		}
	}
	poolOf := func(size uint64) int {
		if size <= 1<<20 {
			return 1
		}
		return 2
	}
	r := rand.New(rand.NewPCG(3, 4))
	type live struct {
		ptr  uint64
		size uint64
	}
	var ptrs []live
	for step := range 3000 {
		switch k := r.IntN(100); {
		case k < 2:
			a.ResetAccumulatedStats()
			for i := range 3 {
				m.count[i].Allocated, m.count[i].Freed = 0, 0
				m.bytes[i].Allocated, m.bytes[i].Freed = 0, 0
			}
		case k < 55 || len(ptrs) == 0:
			req := 1 + r.Uint64N(4<<20)
			p := mustMalloc(t, a, req, 0)
			size := a.BlockSize(p)
			ptrs = append(ptrs, live{p, size})
			add(poolOf(size), int64(size))
		default:
			j := r.IntN(len(ptrs))
			l := ptrs[j]
			ptrs[j] = ptrs[len(ptrs)-1]
			ptrs = ptrs[:len(ptrs)-1]
			mustFree(t, a, l.ptr)
			sub(poolOf(l.size), int64(l.size))
		}
		s := a.Stats()
		got := sums{
			count: [3]alloc.Stat{s.Allocation.All, s.Allocation.SmallPool, s.Allocation.LargePool},
			bytes: [3]alloc.Stat{s.AllocatedBytes.All, s.AllocatedBytes.SmallPool, s.AllocatedBytes.LargePool},
		}
		for i := range 3 {
			for _, c := range []struct {
				name      string
				got, want alloc.Stat
			}{{"allocation", got.count[i], m.count[i]}, {"allocated_bytes", got.bytes[i], m.bytes[i]}} {
				if c.got.Current != c.want.Current || c.got.Allocated != c.want.Allocated || c.got.Freed != c.want.Freed {
					t.Fatalf("step %d: %s[%d] = %+v, model %+v", step, c.name, i, c.got, c.want)
				}
				if c.got.Peak < c.got.Current {
					t.Fatalf("step %d: %s[%d] peak below current: %+v", step, c.name, i, c.got)
				}
			}
		}
	}
	for _, l := range ptrs {
		mustFree(t, a, l.ptr)
	}
}

// slowSim is the simulated device with memory calls that take at least
// delay each, as the driver's take tens of µs.
type slowSim struct {
	*sim.Device
	delay time.Duration
}

func (d slowSim) Malloc(n uint64) (uint64, error) { time.Sleep(d.delay); return d.Device.Malloc(n) }
func (d slowSim) MemCreate(n uint64) (alloc.PhysHandle, error) {
	time.Sleep(d.delay)
	return d.Device.MemCreate(n)
}

// device_call_ns adds up the time spent in device calls: at least the
// calls' delay for each growth, nothing for a request served from the
// cache, and zero after ResetAccumulatedStats.
func TestDeviceCallTime(t *testing.T) {
	const delay = 2 * time.Millisecond
	for _, tc := range []struct {
		name string
		cfg  alloc.Config
	}{
		{"segments", alloc.Config{}},
		{"page-mapped", alloc.Config{PageMapped: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := alloc.New(slowSim{newDev(t, giB), delay}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			p := mustMalloc(t, a, 30*miB, 0)
			s1 := a.Stats()
			if min := s1.NumDeviceAlloc * int64(delay); s1.DeviceCallNanos < min {
				t.Errorf("device_call_ns %d after %d device allocations of at least %v each, want >= %d", s1.DeviceCallNanos, s1.NumDeviceAlloc, delay, min)
			}
			if m := a.StatsMap()["device_call_ns"]; m != s1.DeviceCallNanos {
				t.Errorf("StatsMap device_call_ns %d, Stats %d", m, s1.DeviceCallNanos)
			}
			mustFree(t, a, p)
			q := mustMalloc(t, a, 30*miB, 0) // from the cache
			if s2 := a.Stats(); s2.NumDeviceAlloc != s1.NumDeviceAlloc || s2.DeviceCallNanos-s1.DeviceCallNanos >= int64(delay) {
				t.Errorf("a cached request: %d more device allocations, %d ns more in device calls; want 0 and under %v",
					s2.NumDeviceAlloc-s1.NumDeviceAlloc, s2.DeviceCallNanos-s1.DeviceCallNanos, delay)
			}
			mustFree(t, a, q)
			a.ResetAccumulatedStats()
			if s := a.Stats(); s.DeviceCallNanos != 0 {
				t.Errorf("device_call_ns %d after ResetAccumulatedStats, want 0", s.DeviceCallNanos)
			}
		})
	}
}
