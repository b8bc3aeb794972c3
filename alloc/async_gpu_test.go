//go:build gpu

package alloc_test

// Asynchronous copies on the real device: bandwidth of CopyFromHostAsync and
// CopyToHostAsync side by side with plain synchronous copies (pageable and
// pinned) and with the raw driver copies from pinned memory
// (cuMemcpy{HtoD,DtoH}Async_v2, what cudaMemcpyAsync does), and overlap of
// two copies in opposite directions on two streams. Run with the other GPU
// tests (gpu_test.go says how):
//
//	go test -c -tags gpu -o .gpu/alloc.test ./alloc
//	.gpu/alloc.test -test.run 'GPUAsync' -test.v

import (
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

// asyncGPU returns an allocator directly over the backend, so that its
// optional interfaces (AsyncCopier, HostMemory) are visible, and two
// non-blocking streams.
func asyncGPU(t *testing.T) (*gpuDev, *alloc.Allocator, [2]alloc.Stream) {
	d := openGPU(t)
	needDriver(t, d)
	a, err := alloc.New(d.cu, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ss [2]alloc.Stream
	for i := range ss {
		if ss[i], err = d.cu.NewNonBlockingStream(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range ss {
			_ = d.cu.DestroyStream(s)
		}
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d, a, ss
}

// best runs f reps times and returns the shortest wall time.
func best(t *testing.T, reps int, f func() error) time.Duration {
	t.Helper()
	var min time.Duration
	for i := 0; i < reps; i++ {
		start := time.Now()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); i == 0 || d < min {
			min = d
		}
	}
	return min
}

func TestGPUAsyncBandwidth(t *testing.T) {
	d, a, ss := asyncGPU(t)
	const n = 256 * gpuMiB
	const reps = 5
	s := ss[0]
	b, err := a.Alloc(n, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.FreeAsync(s) }()
	pool, err := a.PinnedPool()
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pool.Put(pinned) }()
	pageable := gpuPattern(n, 11)
	copy(pinned, pageable)
	gbps := func(dur time.Duration) float64 { return float64(n) / dur.Seconds() / 1e9 }

	syncStream := func() error { return d.cu.SynchronizeStream(s) }
	h2dPageable := best(t, reps, func() error { return b.CopyFromHost(pageable) })
	h2dPinned := best(t, reps, func() error { return b.CopyFromHost(pinned) })
	h2dRaw := best(t, reps, func() error {
		if err := d.cu.CopyHtoDAsync(b.Ptr(), pinned, s); err != nil {
			return err
		}
		return syncStream()
	})
	h2dAsync := best(t, reps, func() error {
		tr, err := b.CopyFromHostAsync(pageable, s)
		if err != nil {
			return err
		}
		return tr.Wait()
	})
	got := make([]byte, n)
	if err := b.CopyToHost(got); err != nil {
		t.Fatal(err)
	}
	if diff := gpuDiff(got, pageable); diff != "" {
		t.Fatalf("after CopyFromHostAsync: %s", diff)
	}
	d2hPageable := best(t, reps, func() error { return b.CopyToHost(got) })
	d2hRaw := best(t, reps, func() error {
		if err := d.cu.CopyDtoHAsync(pinned, b.Ptr(), s); err != nil {
			return err
		}
		return syncStream()
	})
	clear(got)
	d2hAsync := best(t, reps, func() error {
		tr, err := b.CopyToHostAsync(got, s)
		if err != nil {
			return err
		}
		return tr.Wait()
	})
	if diff := gpuDiff(got, pageable); diff != "" {
		t.Fatalf("after CopyToHostAsync: %s", diff)
	}
	t.Logf("256 MiB host to device: CopyFromHostAsync %.1f GB/s, raw cuMemcpyHtoDAsync from pinned %.1f GB/s, sync pinned %.1f GB/s, sync pageable %.1f GB/s",
		gbps(h2dAsync), gbps(h2dRaw), gbps(h2dPinned), gbps(h2dPageable))
	t.Logf("256 MiB device to host: CopyToHostAsync+Wait %.1f GB/s, raw cuMemcpyDtoHAsync to pinned %.1f GB/s, sync pageable %.1f GB/s",
		gbps(d2hAsync), gbps(d2hRaw), gbps(d2hPageable))
	t.Logf("CopyFromHostAsync at %.0f%% of the raw copy, CopyToHostAsync at %.0f%% (both include the staging copy from or to pageable memory)",
		100*h2dRaw.Seconds()/h2dAsync.Seconds(), 100*d2hRaw.Seconds()/d2hAsync.Seconds())
	if st := a.Transfers(); st.InFlight != 0 || st.Abandoned != 0 {
		t.Errorf("Transfers = %+v after waiting for every copy", st)
	}
}

// TestGPUAsyncOverlap copies host to device on one stream and device to
// host on another at the same time, and compares the wall time with the two
// copies run one after the other: PCIe and NVLink-C2C are full duplex, so
// the pair should take well under the serial sum.
func TestGPUAsyncOverlap(t *testing.T) {
	d, a, ss := asyncGPU(t)
	const n = 256 * gpuMiB
	const reps = 5
	up, err := a.Alloc(n, ss[0])
	if err != nil {
		t.Fatal(err)
	}
	down, err := a.Alloc(n, ss[1])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.FreeAsync(ss[0]); _ = down.FreeAsync(ss[1]) }()
	pool, _ := a.PinnedPool()
	in, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pool.Put(in); _ = pool.Put(out) }()
	gpuFill(in, 3)
	if err := down.CopyFromHost(in); err != nil {
		t.Fatal(err)
	}
	h2d := func() error { return d.cu.CopyHtoDAsync(up.Ptr(), in, ss[0]) }
	d2h := func() error { return d.cu.CopyDtoHAsync(out, down.Ptr(), ss[1]) }
	sync2 := func() error {
		if err := d.cu.SynchronizeStream(ss[0]); err != nil {
			return err
		}
		return d.cu.SynchronizeStream(ss[1])
	}
	one := func(f func() error) func() error {
		return func() error {
			if err := f(); err != nil {
				return err
			}
			return sync2()
		}
	}
	rawH2D := best(t, reps, one(h2d))
	rawD2H := best(t, reps, one(d2h))
	rawBoth := best(t, reps, func() error {
		if err := h2d(); err != nil {
			return err
		}
		if err := d2h(); err != nil {
			return err
		}
		return sync2()
	})
	gb := float64(n) / 1e9
	t.Logf("raw copies from/to pinned, 256 MiB each way: H2D alone %.1f GB/s, D2H alone %.1f GB/s; both on two streams %v vs serial sum %v (%.2fx, %.1f GB/s combined)",
		gb/rawH2D.Seconds(), gb/rawD2H.Seconds(), rawBoth, rawH2D+rawD2H, (rawH2D+rawD2H).Seconds()/rawBoth.Seconds(), 2*gb/rawBoth.Seconds())
	if rawBoth > (rawH2D+rawD2H)*9/10 {
		t.Errorf("copies in opposite directions on two streams took %v, not clearly less than the serial %v: no overlap", rawBoth, rawH2D+rawD2H)
	}

	// The same through the allocator's API, each direction from its own goroutine.
	src := gpuPattern(n, 4)
	dst := make([]byte, n)
	apiUp := func() error {
		tr, err := up.CopyFromHostAsync(src, ss[0])
		if err != nil {
			return err
		}
		return tr.Wait()
	}
	apiDown := func() error {
		tr, err := down.CopyToHostAsync(dst, ss[1])
		if err != nil {
			return err
		}
		return tr.Wait()
	}
	aUp := best(t, reps, apiUp)
	aDown := best(t, reps, apiDown)
	aBoth := best(t, reps, func() error {
		var wg sync.WaitGroup
		var e1, e2 error
		wg.Add(2)
		go func() { defer wg.Done(); e1 = apiUp() }()
		go func() { defer wg.Done(); e2 = apiDown() }()
		wg.Wait()
		if e1 != nil {
			return e1
		}
		return e2
	})
	t.Logf("CopyFromHostAsync and CopyToHostAsync, 256 MiB each: alone %.1f and %.1f GB/s; both at once %v vs serial sum %v (%.2fx)",
		gb/aUp.Seconds(), gb/aDown.Seconds(), aBoth, aUp+aDown, (aUp+aDown).Seconds()/aBoth.Seconds())
	if diff := gpuDiff(dst, in); diff != "" {
		t.Errorf("CopyToHostAsync delivered: %s", diff)
	}
	got := make([]byte, n)
	if err := up.CopyToHost(got); err != nil {
		t.Fatal(err)
	}
	if diff := gpuDiff(got, src); diff != "" {
		t.Errorf("CopyFromHostAsync wrote: %s", diff)
	}
}
