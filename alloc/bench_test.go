package alloc_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// benchSizes is a mix of request sizes in the proportions of a training
// step: mostly small activations and gradients, some mid-size buffers, a
// few large ones.
var benchSizes = func() []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]uint64, 1024)
	for i := range out {
		switch k := r.IntN(100); {
		case k < 60:
			out[i] = 1 + r.Uint64N(64<<10)
		case k < 85:
			out[i] = 64<<10 + r.Uint64N(1<<20)
		case k < 97:
			out[i] = 1<<20 + r.Uint64N(9<<20)
		default:
			out[i] = 10<<20 + r.Uint64N(54<<20)
		}
	}
	return out
}()

// warmRing runs the benchmark loop (free the oldest of len(ring) live
// allocations, allocate the next size of benchSizes) in whole passes over
// the sizes, the loop's period, until warmQuietPasses passes in a row make
// no device allocation, so that a timed loop that continues from here
// measures the cached path only. One quiet pass is not enough: best fit
// over a changing set of holes keeps moving the layout, and on the
// simulated device the third pass grows the pool again after a quiet
// second one. It returns the number of passes, or an error after
// warmMaxPasses.
func warmRing(a *alloc.Allocator, ring []uint64) (passes int, err error) {
	quiet := 0
	for passes < warmMaxPasses {
		grown := a.Stats().NumDeviceAlloc
		for i := range benchSizes {
			slot := i % len(ring)
			if err := a.Free(ring[slot]); err != nil {
				return passes, err
			}
			p, err := a.Malloc(benchSizes[i], 0)
			if err != nil {
				return passes, err
			}
			ring[slot] = p
		}
		passes++
		if a.Stats().NumDeviceAlloc == grown {
			quiet++
		} else {
			quiet = 0
		}
		if quiet == warmQuietPasses {
			return passes, nil
		}
	}
	return passes, fmt.Errorf("the benchmark loop still grows the pool after %d passes over the sizes", passes)
}

const (
	warmQuietPasses = 4
	warmMaxPasses   = 100
)

// BenchCachedAllocFree measures one cached Malloc plus one Free on dev, with
// 64 allocations kept live so the pools hold a realistic number of blocks.
// The pool is warmed first, so no timed operation calls the device. The
// gpu-tagged benchmarks reuse it with the real backend.
func BenchCachedAllocFree(b *testing.B, dev alloc.Device) {
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const window = 64
	var ring [window]uint64
	if _, err := warmRing(a, ring[:]); err != nil {
		b.Fatal(err)
	}
	before := a.Stats().NumDeviceAlloc
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slot := i % window
		_ = a.Free(ring[slot])
		ring[slot], _ = a.Malloc(benchSizes[i%len(benchSizes)], 0)
	}
	b.StopTimer()
	if after := a.Stats().NumDeviceAlloc; after != before {
		b.Logf("note: %d device allocations during the timed loop", after-before)
	}
	for _, p := range ring {
		_ = a.Free(p)
	}
	_ = a.Close()
}

// BenchCachedAllocFreeParallel is BenchCachedAllocFree from
// GOMAXPROCS goroutines sharing one allocator, each on its own stream.
func BenchCachedAllocFreeParallel(b *testing.B, dev alloc.Device) {
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	var nextStream atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := alloc.Stream(nextStream.Add(1))
		const window = 16
		var ring [window]uint64
		i := 0
		for pb.Next() {
			slot := i % window
			if ring[slot] != 0 {
				_ = a.Free(ring[slot])
			}
			ring[slot], _ = a.Malloc(benchSizes[i%len(benchSizes)], s)
			i++
		}
		for _, p := range ring {
			_ = a.Free(p)
		}
	})
}

func BenchmarkCachedAllocFree(b *testing.B) {
	BenchCachedAllocFree(b, sim.MustNew(sim.Config{}))
}

func BenchmarkCachedAllocFreeParallel(b *testing.B) {
	BenchCachedAllocFreeParallel(b, sim.MustNew(sim.Config{}))
}

// BenchmarkCachedAllocFreeSameSize is the best case: one size, one block.
func BenchmarkCachedAllocFreeSameSize(b *testing.B) {
	a, err := alloc.New(sim.MustNew(sim.Config{}), alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	p, _ := a.Malloc(4096, 0)
	_ = a.Free(p)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, _ := a.Malloc(4096, 0)
		_ = a.Free(p)
	}
}

// BenchCachedOpLatency times every cached Malloc and Free of the
// BenchCachedAllocFree loop one by one and reports their p50 and p99 in
// ns (metrics p50-ns, p99-ns). The figures include one clock read per
// operation (reported as clock-ns, measured the same way on an empty
// operation); they are not subtracted.
func BenchCachedOpLatency(b *testing.B, dev alloc.Device) {
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const window = 64
	var ring [window]uint64
	if _, err := warmRing(a, ring[:]); err != nil {
		b.Fatal(err)
	}
	before := a.Stats().NumDeviceAlloc
	lat := make([]int64, 0, 2*b.N)
	empty := make([]int64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		slot := i % window
		t0 := nanotime()
		_ = a.Free(ring[slot])
		t1 := nanotime()
		ring[slot], _ = a.Malloc(benchSizes[i%len(benchSizes)], 0)
		t2 := nanotime()
		t3 := nanotime()
		lat = append(lat, t1-t0, t2-t1)
		empty = append(empty, t3-t2)
	}
	b.StopTimer()
	if after := a.Stats().NumDeviceAlloc; after != before {
		b.Logf("note: %d device allocations during the timed loop", after-before)
	}
	slices.Sort(lat)
	slices.Sort(empty)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
	b.ReportMetric(float64(empty[len(empty)/2]), "clock-ns")
	for _, p := range ring {
		_ = a.Free(p)
	}
}

var clockBase = time.Now()

func nanotime() int64 { return int64(time.Since(clockBase)) }

func BenchmarkCachedOpLatency(b *testing.B) {
	BenchCachedOpLatency(b, sim.MustNew(sim.Config{}))
}

// BenchCachedPairEvicted times an allocate+free pair after the caches were
// evicted, as allocations come inside training: before each pair the loop
// walks a buffer of evict bytes, one byte every 64, outside the timed
// part. It reports the pair's p50 and p90 in ns (one clock read included);
// ns/op is mostly the walk's and means nothing here.
func BenchCachedPairEvicted(b *testing.B, dev alloc.Device, evict int) {
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const size = 64 << 10
	if p, err := a.Malloc(size, 0); err != nil {
		b.Fatal(err)
	} else {
		_ = a.Free(p)
	}
	buf := make([]byte, evict)
	lat := make([]int64, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < len(buf); j += 64 {
			buf[j]++ // a store to every line: the walk cannot be dropped
		}
		t0 := nanotime()
		p, _ := a.Malloc(size, 0)
		_ = a.Free(p)
		lat = append(lat, nanotime()-t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*9/10]), "p90-ns")
	_ = a.Close()
}

func BenchmarkCachedPairEvicted(b *testing.B) {
	for _, evict := range []int{256 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("walk=%dKiB", evict>>10), func(b *testing.B) {
			BenchCachedPairEvicted(b, sim.MustNew(sim.Config{}), evict)
		})
	}
}
