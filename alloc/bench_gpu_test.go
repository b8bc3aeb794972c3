//go:build gpu

package alloc_test

// The cached path on the real device against direct driver calls, in one
// run: benchmarks (ns per Free+Malloc pair) and per-operation latency
// percentiles. The sizes and the access pattern are those of
// BenchCachedAllocFree (bench_test.go): a ring of 64 live allocations, each
// step frees the oldest and allocates the next size of benchSizes.

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/cuda"
)

var (
	latencyOps       = flag.Int("latency.ops", 1_000_000, "Free+Malloc pairs timed one by one on the cached path")
	latencyDriverOps = flag.Int("latency.driver_ops", 20_000, "cuMemFree+cuMemAlloc pairs timed one by one")
	latencySizesOut  = flag.String("latency.sizes_out", "", "write benchSizes to this file, one per line (for the native comparison)")
)

const benchWindow = 64

func BenchmarkGPUCachedAllocFree(b *testing.B) {
	BenchCachedAllocFree(b, openGPU(b))
}

func BenchmarkGPUCachedAllocFreeParallel(b *testing.B) {
	BenchCachedAllocFreeParallel(b, openGPU(b))
}

// BenchmarkGPUDriverAllocFree is BenchCachedAllocFree with cuMemFree_v2 and
// cuMemAlloc_v2 in place of the allocator: what every operation would cost
// without a cache.
func BenchmarkGPUDriverAllocFree(b *testing.B) {
	d := openGPU(b)
	needDriver(b, d)
	ctx := d.cu.Context()
	var ring [benchWindow]cuda.DevicePtr
	step := func(i int) error {
		slot := i % benchWindow
		if ring[slot] != 0 {
			if err := ctx.MemFree(ring[slot]); err != nil {
				return err
			}
		}
		p, err := ctx.MemAlloc(benchSizes[i%len(benchSizes)])
		ring[slot] = p
		return err
	}
	for i := range 2 * len(benchSizes) {
		if err := step(i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := step(i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, p := range ring {
		if err := ctx.MemFree(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGPUDriverAllocFreeParallel is the driver side of
// BenchCachedAllocFreeParallel: GOMAXPROCS goroutines, 16 live allocations
// each.
func BenchmarkGPUDriverAllocFreeParallel(b *testing.B) {
	d := openGPU(b)
	needDriver(b, d)
	ctx := d.cu.Context()
	var failed atomic.Pointer[error]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ring [16]cuda.DevicePtr
		i := 0
		for pb.Next() {
			slot := i % len(ring)
			if ring[slot] != 0 {
				if err := ctx.MemFree(ring[slot]); err != nil {
					failed.Store(&err)
				}
			}
			p, err := ctx.MemAlloc(benchSizes[i%len(benchSizes)])
			if err != nil {
				failed.Store(&err)
			}
			ring[slot] = p
			i++
		}
		for _, p := range ring {
			if p != 0 {
				_ = ctx.MemFree(p)
			}
		}
	})
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// gpuClock returns nanoseconds since its creation: one monotonic clock read
// (time.Since of a time with a monotonic reading does not read the wall
// clock).
func gpuClock() func() int64 {
	origin := time.Now()
	return func() int64 { return int64(time.Since(origin)) }
}

// latencies are per-operation durations in nanoseconds.
type latencies []int64

func (l latencies) row(name string) string {
	s := slices.Clone(l)
	slices.Sort(s)
	at := func(q float64) int64 { return s[int(q*float64(len(s)-1))] }
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	return fmt.Sprintf("%-28s %9d %8d %8d %8d %9d %10d %9.1f", name, len(s),
		at(0.50), at(0.90), at(0.99), at(0.999), s[len(s)-1], sum/float64(len(s)))
}

const latencyHeader = "operation                            n   p50 ns   p90 ns   p99 ns  p99.9 ns     max ns   mean ns"

// TestGPULatency times every operation of the benchmark loop on its own:
// the allocator's cached Free and Malloc (a million pairs by default), the
// driver's cuMemFree_v2 and cuMemAlloc_v2 on the same sizes, and an empty
// operation (two clock reads) whose cost is included in every other row.
// It fails only on errors and if the timed cached loop calls the device;
// the figures are for docs/alloc.md.
func TestGPULatency(t *testing.T) {
	d := openGPU(t)
	if *latencySizesOut != "" {
		var sb strings.Builder
		for _, n := range benchSizes {
			fmt.Fprintln(&sb, n)
		}
		if err := os.WriteFile(*latencySizesOut, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	now := gpuClock()
	n := *latencyOps
	rows := []string{latencyHeader}

	empty := make(latencies, n)
	for i := range empty {
		t0 := now()
		empty[i] = now() - t0
	}
	rows = append(rows, empty.row("empty (timer cost)"))

	a := newGPUAlloc(t, d, alloc.Config{})
	// Warm until whole passes over the sizes (the loop's period) make no
	// device call, so that the timed loop measures the cached path only.
	var ring [benchWindow]uint64
	passes, err := warmRing(a, ring[:])
	if err != nil {
		t.Fatal(err)
	}
	before := a.Stats()
	t.Logf("cached path warm after %d passes over the sizes: %d segments, %d MiB reserved",
		passes, before.Segment.All.Current, before.ReservedBytes.All.Current>>20)
	frees, mallocs := make(latencies, n), make(latencies, n)
	var firstErr error
	start := now()
	for i := range n {
		slot := i % benchWindow
		t0 := now()
		err1 := a.Free(ring[slot])
		t1 := now()
		p, err2 := a.Malloc(benchSizes[i%len(benchSizes)], 0)
		t2 := now()
		ring[slot] = p
		frees[i], mallocs[i] = t1-t0, t2-t1
		if (err1 != nil || err2 != nil) && firstErr == nil {
			firstErr = fmt.Errorf("pair %d: free: %v; malloc: %v", i, err1, err2)
		}
	}
	loop := now() - start
	after := a.Stats()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// The layout still drifts slowly after the warm-up (best fit over a
	// changing set of holes), so a few growths may happen; more than one
	// in a thousand operations would mean the loop is not the cached path.
	grew := after.NumDeviceAlloc - before.NumDeviceAlloc + after.NumDeviceFree - before.NumDeviceFree
	t.Logf("device calls during the timed loop: %d allocations, %d frees",
		after.NumDeviceAlloc-before.NumDeviceAlloc, after.NumDeviceFree-before.NumDeviceFree)
	if grew > int64(n)/1000 {
		t.Errorf("the timed loop called the device %d times in %d pairs", grew, n)
	}
	rows = append(rows, mallocs.row("cached Malloc"), frees.row("cached Free"),
		append(slices.Clone(mallocs), frees...).row("cached, both"))
	for _, p := range ring {
		if err := a.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	// The same loop untimed per operation, for the cost without the clock.
	plain := now()
	for i := range n {
		slot := i % benchWindow
		_ = a.Free(ring[slot])
		ring[slot], _ = a.Malloc(benchSizes[i%len(benchSizes)], 0)
	}
	plain = now() - plain
	for _, p := range ring {
		if err := a.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	summary := fmt.Sprintf("cached loop: %.1f ns per operation with per-op clocks, %.1f ns without (%d pairs)",
		float64(loop)/float64(2*n), float64(plain)/float64(2*n), n)

	if d.cu != nil {
		nd := *latencyDriverOps
		ctx := d.cu.Context()
		var dring [benchWindow]cuda.DevicePtr
		dfrees, dmallocs := make(latencies, 0, nd), make(latencies, 0, nd)
		for i := range 2*len(benchSizes) + nd {
			slot := i % benchWindow
			t0 := now()
			if dring[slot] != 0 {
				if err := ctx.MemFree(dring[slot]); err != nil {
					t.Fatal(err)
				}
			}
			t1 := now()
			p, err := ctx.MemAlloc(benchSizes[i%len(benchSizes)])
			t2 := now()
			if err != nil {
				t.Fatal(err)
			}
			dring[slot] = p
			if i >= 2*len(benchSizes) { // after the warm-up
				dfrees, dmallocs = append(dfrees, t1-t0), append(dmallocs, t2-t1)
			}
		}
		for _, p := range dring {
			if err := ctx.MemFree(p); err != nil {
				t.Fatal(err)
			}
		}
		rows = append(rows, dmallocs.row("driver cuMemAlloc_v2"), dfrees.row("driver cuMemFree_v2"),
			append(slices.Clone(dmallocs), dfrees...).row("driver, both"))
		p50 := func(l latencies) float64 {
			s := slices.Clone(l)
			slices.Sort(s)
			return float64(s[len(s)/2])
		}
		both := append(slices.Clone(mallocs), frees...)
		dboth := append(slices.Clone(dmallocs), dfrees...)
		summary += fmt.Sprintf("; p50 per operation: driver / cached = %.0f×", p50(dboth)/math.Max(1, p50(both)))
	}
	t.Logf("per-operation latency (sizes of benchSizes, %d live):\n%s\n%s", benchWindow, strings.Join(rows, "\n"), summary)
}
