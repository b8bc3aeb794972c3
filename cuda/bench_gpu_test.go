//go:build gpu

package cuda

import (
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// reportPercentiles adds p50 and p99 of the per-call durations as metrics.
func reportPercentiles(b *testing.B, prefix string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), prefix+"p50-ns")
	b.ReportMetric(at(0.99), prefix+"p99-ns")
}

// BenchmarkGPUMemAllocFree measures one cuMemAlloc_v2 and one cuMemFree_v2
// through Context, each timed on its own (the clock read adds about 20 ns
// to each).
func BenchmarkGPUMemAllocFree(b *testing.B) {
	ctx := gpuContext(b)
	for _, size := range []uint64{512, 1 << 20, 2 << 20, 20 << 20, 1 << 30} {
		b.Run(sizeName(size), func(b *testing.B) {
			// Warm up: the first allocations of a size map fresh pages.
			for range 20 {
				p, err := ctx.MemAlloc(size)
				must(b, err)
				must(b, ctx.MemFree(p))
			}
			allocs := make([]time.Duration, 0, b.N)
			frees := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				p, err := ctx.MemAlloc(size)
				t1 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				if err := ctx.MemFree(p); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				allocs = append(allocs, t1.Sub(t0))
				frees = append(frees, t2.Sub(t1))
			}
			b.StopTimer()
			reportPercentiles(b, "alloc-", allocs)
			reportPercentiles(b, "free-", frees)
		})
	}
}

func sizeName(n uint64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatUint(n>>30, 10) + "GiB"
	case n >= 1<<20:
		return strconv.FormatUint(n>>20, 10) + "MiB"
	}
	return strconv.FormatUint(n, 10) + "B"
}

// BenchmarkGPUCallOverhead measures the fixed cost of a driver call through
// this package: the FFI crossing alone, the context handling, and the
// pieces an alternative design would use.
func BenchmarkGPUCallOverhead(b *testing.B) {
	ctx := gpuContext(b)
	d := lib

	// One purego call of a trivial driver function, no context handling.
	b.Run("raw/cuDriverGetVersion", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var v int32
			if callNoCtx(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))) != success {
				b.Fatal("cuDriverGetVersion failed")
			}
		}
	})
	// The same with no output parameter (no heap object per call).
	b.Run("raw/cuCtxSetCurrent", func(b *testing.B) {
		b.ReportAllocs()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range b.N {
			if callNoCtx(d.cuCtxSetCurrent, ctx.handle) != success {
				b.Fatal("cuCtxSetCurrent failed")
			}
		}
	})
	// A trivial call through Context: lock thread, set current, call, unlock.
	b.Run("context/cuCtxGetCurrent", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var cur uintptr
			if r, err := ctx.call(d.cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur))); err != nil || r != success || cur != ctx.handle {
				b.Fatalf("cuCtxGetCurrent: %v %v current %#x", r, err, cur)
			}
		}
	})
	b.Run("context/cuCtxGetCurrent/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var cur uintptr
				if r, err := ctx.call(d.cuCtxGetCurrent, uintptr(unsafe.Pointer(&cur))); err != nil || r != success {
					b.Errorf("cuCtxGetCurrent: %v %v", r, err)
					return
				}
			}
		})
	})
	// The public API's cheapest context call that returns a value.
	b.Run("context/MemGetInfo", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := ctx.MemGetInfo(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What a per-thread cache of the current context would pay instead of
	// cuCtxSetCurrent: the thread id (a system call) and the lock.
	b.Run("alternative/gettid", func(b *testing.B) {
		for range b.N {
			runtime.LockOSThread()
			_ = syscall.Gettid()
			runtime.UnlockOSThread()
		}
	})
	b.Run("alternative/LockOSThread", func(b *testing.B) {
		for range b.N {
			runtime.LockOSThread()
			runtime.UnlockOSThread()
		}
	})
}
