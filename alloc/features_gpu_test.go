//go:build gpu

package alloc_test

// The features that first ran only on the simulated device, on the real
// one: scopes, leak attribution (LiveBySite, Since(Mark()), Leaked),
// poison-on-free, prealloc_bytes, resetting statistics, the
// garbage-collection threshold and the pinned-host pool. Run with the other
// GPU tests (gpu_test.go says how); VRAM_GPU_TEST_SIM=1 runs them on the
// simulated device.

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

const gpuMiB = 1 << 20

func TestGPUScopeRelease(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{})
	sc := a.NewScope()
	sizes := []uint64{1, 4096, 1 << 20, 3 << 20, 12 << 20, 40 << 20}
	var want uint64
	var bufs []*alloc.Buffer
	for i, n := range sizes {
		b, err := sc.Alloc(n, 0)
		if err != nil {
			t.Fatalf("scope Alloc(%d): %v", n, err)
		}
		if err := b.CopyFromHost(gpuPattern(n, uint64(i))); err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
		want += n
	}
	p, err := sc.Malloc(5000, 0)
	if err != nil {
		t.Fatal(err)
	}
	want += 5000
	// One freed early, by Buffer.Free: Close must skip it.
	if err := bufs[1].Free(); err != nil {
		t.Fatal(err)
	}
	want -= sizes[1]
	freed, err := sc.Close()
	if err != nil || freed != want {
		t.Fatalf("Close = %d, %v; want %d bytes", freed, err, want)
	}
	if n := a.Stats().Allocation.All.Current; n != 0 {
		t.Errorf("%d allocations live after Close", n)
	}
	if _, err := sc.Alloc(10, 0); !errors.Is(err, alloc.ErrClosed) {
		t.Errorf("Alloc after Close: %v, want ErrClosed", err)
	}
	if err := bufs[0].CopyToHost(make([]byte, 1)); !errors.Is(err, alloc.ErrFreed) {
		t.Errorf("use after Close: %v, want ErrFreed", err)
	}
	_ = p
	t.Logf("scope released %d bytes in %d allocations", freed, len(sizes))
}

//go:noinline
func gpuAllocHere(t *testing.T, a *alloc.Allocator, n uint64) *alloc.Buffer {
	b, err := a.Alloc(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

//go:noinline
func gpuAllocThere(t *testing.T, a *alloc.Allocator, n uint64) *alloc.Buffer {
	b, err := a.Alloc(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGPULiveBySiteAndSince(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{RecordCallSites: alloc.CallSitesAll})
	early := gpuAllocHere(t, a, 2*gpuMiB)
	m := a.Mark()
	var here, there []*alloc.Buffer
	for range 3 {
		here = append(here, gpuAllocHere(t, a, gpuMiB))
	}
	for range 2 {
		there = append(there, gpuAllocThere(t, a, 30*gpuMiB))
	}
	sites := map[string]alloc.SiteUsage{}
	for _, u := range a.LiveBySite() {
		for _, fn := range []string{"gpuAllocHere", "gpuAllocThere"} {
			if strings.Contains(u.Site, fn) {
				sites[fn] = u
			}
		}
	}
	if u := sites["gpuAllocHere"]; u.Count != 4 || u.Bytes != 5*gpuMiB {
		t.Errorf("LiveBySite gpuAllocHere = %+v, want 4 allocations of 5 MiB in all", u)
	}
	if u := sites["gpuAllocThere"]; u.Count != 2 || u.Bytes != 60*gpuMiB {
		t.Errorf("LiveBySite gpuAllocThere = %+v, want 2 allocations of 60 MiB", u)
	}
	if err := here[0].Free(); err != nil {
		t.Fatal(err)
	}
	since := a.Since(m)
	if len(since) != 4 {
		t.Fatalf("Since(Mark()) lists %d allocations, want 4 (the 5 made after the mark, less the one freed)", len(since))
	}
	live := map[uint64]bool{here[1].Ptr(): true, here[2].Ptr(): true, there[0].Ptr(): true, there[1].Ptr(): true}
	for _, x := range since {
		if !live[x.Ptr] {
			t.Errorf("Since lists %#x (%d bytes, %s), not one of the live allocations made after the mark", x.Ptr, x.Requested, x.Site)
		}
	}
	for _, b := range append(append(here[1:], there...), early) {
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.Since(m)) != 0 || len(a.LiveBySite()) != 0 {
		t.Errorf("after freeing: Since %d, LiveBySite %d", len(a.Since(m)), len(a.LiveBySite()))
	}
}

//go:noinline
func gpuLeak(a *alloc.Allocator) {
	for range 3 {
		if _, err := a.Alloc(8*gpuMiB, 0); err != nil {
			panic(err)
		}
	}
}

func TestGPULeaked(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{RecordCallSites: alloc.CallSitesAll})
	gpuLeak(a)
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().Allocation.All.Current != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("leaked buffers not reclaimed: %d allocations live", a.Stats().Allocation.All.Current)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	leaks := a.Leaked()
	if len(leaks) != 1 || leaks[0].Count != 3 || leaks[0].Bytes != 24*gpuMiB || !strings.Contains(leaks[0].Site, "gpuLeak") {
		t.Fatalf("Leaked = %+v, want 3 buffers of 8 MiB from gpuLeak", leaks)
	}
	t.Logf("Leaked: %+v", leaks)
}

func TestGPUPoisonOnFree(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{PoisonOnFree: true})
	for _, n := range []uint64{4096, 3 * gpuMiB} {
		b, err := a.Alloc(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CopyFromHost(gpuPattern(n, 9)); err != nil {
			t.Fatal(err)
		}
		p := b.Ptr()
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
		// Read the freed (cached) block behind the allocator's back.
		got := make([]byte, n)
		if err := d.CopyDtoH(got, p); err != nil {
			t.Fatal(err)
		}
		if diff := gpuDiff(got, bytes.Repeat([]byte{alloc.PoisonByte}, int(n))); diff != "" {
			t.Errorf("freed %d-byte block is not poisoned: %s", n, diff)
		}
	}
}

func TestGPUPreallocBytes(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{PreallocBytes: 100 * gpuMiB})
	st := a.Stats()
	if st.ReservedBytes.All.Current != 100*gpuMiB || st.NumDeviceAlloc != 1 {
		t.Fatalf("after New: reserved %d, %d device allocations; want 100 MiB in 1", st.ReservedBytes.All.Current, st.NumDeviceAlloc)
	}
	var bufs []*alloc.Buffer
	for _, n := range []uint64{30 * gpuMiB, 20 * gpuMiB, 40 * gpuMiB} {
		b, err := a.Alloc(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if n := a.Stats().NumDeviceAlloc; n != 1 {
		t.Errorf("90 MiB inside a 100 MiB preallocation made %d device allocations, want 1", n)
	}
	for _, b := range bufs {
		_ = b.Free()
	}
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if r := a.Stats().ReservedBytes.All.Current; r != 100*gpuMiB {
		t.Errorf("EmptyCache released the preallocation: reserved %d", r)
	}
}

func TestGPUResetStats(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{})
	big, _ := a.Alloc(64*gpuMiB, 0)
	small, _ := a.Alloc(gpuMiB, 0)
	_ = big.Free()
	st := a.Stats()
	if st.AllocatedBytes.All.Peak < 65*gpuMiB || st.Allocation.All.Allocated != 2 {
		t.Fatalf("before reset: peak %d, allocated count %d", st.AllocatedBytes.All.Peak, st.Allocation.All.Allocated)
	}
	a.ResetPeakStats()
	st = a.Stats()
	if st.AllocatedBytes.All.Peak != st.AllocatedBytes.All.Current || st.ReservedBytes.All.Peak != st.ReservedBytes.All.Current {
		t.Errorf("after ResetPeakStats: allocated peak %d current %d, reserved peak %d current %d",
			st.AllocatedBytes.All.Peak, st.AllocatedBytes.All.Current, st.ReservedBytes.All.Peak, st.ReservedBytes.All.Current)
	}
	a.ResetAccumulatedStats()
	st = a.Stats()
	if st.Allocation.All.Allocated != 0 || st.Allocation.All.Freed != 0 || st.NumDeviceAlloc != 0 {
		t.Errorf("after ResetAccumulatedStats: allocated %d freed %d device allocs %d",
			st.Allocation.All.Allocated, st.Allocation.All.Freed, st.NumDeviceAlloc)
	}
	if st.Allocation.All.Current != 1 {
		t.Errorf("ResetAccumulatedStats changed the current count to %d", st.Allocation.All.Current)
	}
	_ = small.Free()
}

func TestGPUGarbageCollectionThreshold(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{MaxBytes: 256 * gpuMiB, GarbageCollectionThreshold: 0.5})
	var bufs []*alloc.Buffer
	for range 3 {
		b, err := a.Alloc(40*gpuMiB, 0)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		_ = b.Free()
	}
	before := a.Stats()
	if before.ReservedBytes.All.Current != 120*gpuMiB {
		t.Fatalf("reserved %d, want 120 MiB cached", before.ReservedBytes.All.Current)
	}
	// 100 MiB fits no cached block; growing to 220 MiB would pass half of
	// the 256 MiB cap, so the cached segments go first.
	b, err := a.Alloc(100*gpuMiB, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := a.Stats()
	if after.ReservedBytes.All.Current > 128*gpuMiB || after.NumDeviceFree-before.NumDeviceFree != 3 {
		t.Errorf("after growth: reserved %d MiB, %d segments released; want at most 128 MiB and 3",
			after.ReservedBytes.All.Current/gpuMiB, after.NumDeviceFree-before.NumDeviceFree)
	}
	_ = b.Free()
}

func TestGPUPinnedPool(t *testing.T) {
	d := openGPU(t)
	var h alloc.HostMemory = d.sim
	if d.cu != nil {
		h = d.cu
	}
	pool := alloc.NewPinnedPool(h)
	a := newGPUAlloc(t, d, alloc.Config{})
	const n = 64 * gpuMiB
	src, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	gpuFill(src, 5)
	b, err := a.Alloc(n, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Free() }()
	start := time.Now()
	if err := b.CopyFromHost(src); err != nil {
		t.Fatal(err)
	}
	pinnedH2D := time.Since(start)
	dst, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := b.CopyToHost(dst); err != nil {
		t.Fatal(err)
	}
	pinnedD2H := time.Since(start)
	if d := gpuDiff(dst, src); d != "" {
		t.Fatalf("through pinned buffers: %s", d)
	}
	pageable := make([]byte, n)
	copy(pageable, src)
	start = time.Now()
	if err := b.CopyFromHost(pageable); err != nil {
		t.Fatal(err)
	}
	pageableH2D := time.Since(start)
	gbps := func(d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }
	t.Logf("64 MiB host to device: pinned %.1f GB/s, pageable %.1f GB/s; device to host pinned %.1f GB/s",
		gbps(pinnedH2D), gbps(pageableH2D), gbps(pinnedD2H))

	inUse, cached := pool.Usage()
	if inUse != 2*n || cached != 0 {
		t.Errorf("Usage = %d in use, %d cached; want %d, 0", inUse, cached, 2*n)
	}
	first := &src[0]
	if err := pool.Put(src); err != nil {
		t.Fatal(err)
	}
	if err := pool.Put(src); err == nil {
		t.Error("second Put of the same buffer succeeded")
	}
	again, err := pool.Get(n - 1)
	if err != nil {
		t.Fatal(err)
	}
	if &again[0] != first {
		t.Error("Get of the same size class did not reuse the cached pinned buffer")
	}
	_ = pool.Put(again)
	_ = pool.Put(dst)
	freed, err := pool.EmptyCache()
	if err != nil || freed != 2*n {
		t.Errorf("EmptyCache = %d, %v; want %d", freed, err, 2*n)
	}
}
