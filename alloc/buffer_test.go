package alloc_test

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

func TestBuffer(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	b, err := a.Alloc(1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 1000 || b.Ptr() == 0 {
		t.Fatalf("Len %d Ptr %#x", b.Len(), b.Ptr())
	}
	msg := []byte("hello, device")
	if err := b.CopyFromHost(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if err := b.CopyToHost(got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	v, err := b.Slice(7, 6)
	if err != nil {
		t.Fatal(err)
	}
	if v.Ptr() != b.Ptr()+7 || v.Len() != 6 {
		t.Fatalf("view %#x+%d", v.Ptr(), v.Len())
	}
	got = make([]byte, 6)
	if err := v.CopyToHost(got); err != nil || string(got) != "device" {
		t.Fatalf("view read %q, %v", got, err)
	}
	if _, err := b.Slice(990, 11); !errors.Is(err, alloc.ErrOutOfRange) {
		t.Fatalf("slice past the end: %v", err)
	}
	if _, err := b.Slice(^uint64(0), 2); !errors.Is(err, alloc.ErrOutOfRange) {
		t.Fatalf("overflowing slice: %v", err)
	}
	if err := b.CopyFromHost(make([]byte, 1001)); !errors.Is(err, alloc.ErrOutOfRange) {
		t.Fatalf("oversized copy: %v", err)
	}
	c, _ := a.Alloc(2000, 0)
	if err := c.CopyFrom(b); err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFrom(c); !errors.Is(err, alloc.ErrOutOfRange) {
		t.Fatalf("copy of a larger buffer: %v", err)
	}
	if err := c.Memset(7); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	_ = c.CopyToHost(one)
	if one[0] != 7 {
		t.Fatalf("memset: %d", one[0])
	}
	if err := v.Free(); err == nil {
		t.Fatal("freeing a view succeeded")
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	// Every use after free is refused, through the buffer and its views.
	for name, err := range map[string]error{
		"copy to host":   b.CopyToHost(got),
		"copy from host": b.CopyFromHost(msg),
		"memset":         b.Memset(0),
		"view read":      v.CopyToHost(got),
		"copy from":      c.CopyFrom(b),
		"record stream":  b.RecordStream(1),
	} {
		if !errors.Is(err, alloc.ErrFreed) {
			t.Errorf("%s after free: %v", name, err)
		}
	}
	if _, err := b.Slice(0, 1); !errors.Is(err, alloc.ErrFreed) {
		t.Errorf("slice after free: %v", err)
	}
	if err := b.Free(); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	// The freed memory is reused: the stale buffer must still be refused.
	d, _ := a.Alloc(1000, 0)
	if d.Ptr() != b.Ptr() {
		t.Fatalf("expected reuse of %#x, got %#x", b.Ptr(), d.Ptr())
	}
	if err := b.Memset(0); !errors.Is(err, alloc.ErrFreed) {
		t.Fatalf("stale buffer over reused memory: %v", err)
	}
	_ = c.Free()
	_ = d.Free()
}

func TestScope(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	sc := a.NewScope()
	b1, _ := sc.Alloc(1000, 0)
	_, _ = sc.Alloc(3000, 0)
	p, _ := sc.Malloc(5000, 0)
	q, _ := sc.Malloc(7000, 0)
	if err := b1.Free(); err != nil { // freed early, skipped by Close
		t.Fatal(err)
	}
	if err := sc.Free(q); err != nil {
		t.Fatal(err)
	}
	if err := sc.Free(q); !errors.Is(err, alloc.ErrUnknownPointer) {
		t.Fatalf("second scope free: %v", err)
	}
	n, err := sc.Close()
	if err != nil || n != 8000 {
		t.Fatalf("Close = %d, %v; want 8000 bytes", n, err)
	}
	if s := a.Stats(); s.Allocation.All.Current != 0 {
		t.Fatalf("%d allocations left after Close", s.Allocation.All.Current)
	}
	if err := a.Free(p); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Fatalf("free after scope close: %v", err)
	}
	if _, err := sc.Malloc(1, 0); !errors.Is(err, alloc.ErrClosed) {
		t.Fatalf("Malloc on a closed scope: %v", err)
	}
	if s := a.Stats(); s.Allocation.All.Current != 0 {
		t.Fatal("Malloc on a closed scope leaked")
	}
	if n, err := sc.Close(); n != 0 || err != nil {
		t.Fatalf("second Close = %d, %v", n, err)
	}
}

//go:noinline
func leakSomeBuffers(a *alloc.Allocator) {
	for i := 0; i < 3; i++ {
		if _, err := a.Alloc(4096, 0); err != nil {
			panic(err)
		}
	}
}

func TestLeakedBuffersAreReclaimed(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{RecordCallSites: alloc.CallSitesAll})
	keep, _ := a.Alloc(100, 0)
	leakSomeBuffers(a)
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Allocation.All.Current != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("leaked buffers not reclaimed: %d allocations live", a.Stats().Allocation.All.Current)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	leaks := a.Leaked()
	if len(leaks) != 1 || leaks[0].Count != 3 || leaks[0].Bytes != 3*4096 {
		t.Fatalf("Leaked = %+v", leaks)
	}
	if !strings.Contains(leaks[0].Site, "leakSomeBuffers") || !strings.Contains(leaks[0].Site, "buffer_test.go:") {
		t.Fatalf("leak site %q does not name the allocating function", leaks[0].Site)
	}
	runtime.KeepAlive(keep)
	_ = keep.Free()
}

func TestLiveBySiteAndSince(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{RecordCallSites: alloc.CallSitesAll})
	p1 := mustMallocHere(a, 1000)
	m := a.Mark()
	p2 := mustMallocHere(a, 2000)
	p3, _ := a.Malloc(50000, 0)
	sites := a.LiveBySite()
	if len(sites) != 2 || sites[0].Bytes != 50000 || sites[1].Count != 2 || sites[1].Bytes != 3000 {
		t.Fatalf("LiveBySite = %+v", sites)
	}
	if !strings.Contains(sites[0].Site, "TestLiveBySiteAndSince") || !strings.Contains(sites[1].Site, "mustMallocHere") {
		t.Fatalf("sites: %+v", sites)
	}
	since := a.Since(m)
	if len(since) != 2 || since[0].Ptr != p2 || since[1].Ptr != p3 || len(since[0].Frames) == 0 {
		t.Fatalf("Since = %+v", since)
	}
	_ = a.Free(p2)
	if since := a.Since(m); len(since) != 1 || since[0].Ptr != p3 {
		t.Fatalf("Since after free = %+v", since)
	}
	_ = a.Free(p1)
	_ = a.Free(p3)

	// Without recording, sites are reported as not recorded.
	b, _ := newAlloc(t, giB, alloc.Config{})
	q, _ := b.Malloc(10, 0)
	if s := b.LiveBySite(); len(s) != 1 || !strings.Contains(s[0].Site, "not recorded") {
		t.Fatalf("LiveBySite without recording = %+v", s)
	}
	_ = b.Free(q)
}

//go:noinline
func mustMallocHere(a *alloc.Allocator, n uint64) uint64 {
	p, err := a.Malloc(n, 0)
	if err != nil {
		panic(err)
	}
	return p
}

func TestSampledCallSites(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{RecordCallSites: alloc.CallSitesSampled, SampleRate: 0.25})
	var ps []uint64
	for i := 0; i < 100; i++ {
		ps = append(ps, mustMallocHere(a, 512))
	}
	recorded := 0
	for _, s := range a.LiveBySite() {
		if strings.Contains(s.Site, "mustMallocHere") {
			recorded = s.Count
		}
	}
	if recorded != 25 {
		t.Fatalf("%d of 100 allocations recorded at rate 0.25", recorded)
	}
	for _, p := range ps {
		_ = a.Free(p)
	}
}

// TestConcurrentStress hammers one allocator from many goroutines with
// raw pointers, buffers, scopes and cross-stream uses (run with -race).
func TestConcurrentStress(t *testing.T) {
	dev := sim.MustNew(sim.Config{Capacity: 512 * miB})
	a, err := alloc.New(syncDev{dev}, alloc.Config{RecordCallSites: alloc.CallSitesSampled, TraceEvents: 256})
	if err != nil {
		t.Fatal(err)
	}
	const workers, ops = 8, 1500
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			s := alloc.Stream(w % 3)
			var ptrs []uint64
			var bufs []*alloc.Buffer
			sc := a.NewScope()
			for i := 0; i < ops; i++ {
				size := uint64(1 + (i*7919+w*104729)%(3<<20))
				switch i % 5 {
				case 0, 1:
					if p, err := a.Malloc(size, s); err == nil {
						ptrs = append(ptrs, p)
						if i%3 == 0 {
							_ = a.RecordStream(p, alloc.Stream((w+1)%3))
						}
					} else if !errors.Is(err, alloc.ErrOutOfMemory) {
						errs <- err
						return
					}
				case 2:
					if b, err := a.Alloc(size%8192+1, s); err == nil {
						if err := b.Memset(byte(w)); err != nil {
							errs <- err
							return
						}
						bufs = append(bufs, b)
					}
				case 3:
					_, _ = sc.Malloc(size%4096+1, s)
				case 4:
					if len(ptrs) > 0 {
						if err := a.Free(ptrs[0]); err != nil {
							errs <- err
							return
						}
						ptrs = ptrs[1:]
					}
					if len(bufs) > 4 {
						if err := bufs[0].Free(); err != nil {
							errs <- err
							return
						}
						bufs = bufs[1:]
					}
				}
				if i%500 == 0 {
					_, _ = a.EmptyCache()
					_ = a.Stats()
					_ = a.Summary()
				}
			}
			for _, p := range ptrs {
				_ = a.Free(p)
			}
			for _, b := range bufs {
				_ = b.Free()
			}
			_, _ = sc.Close()
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if n := a.Stats().Allocation.All.Current; n != 0 {
		t.Fatalf("%d allocations left", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if dev.Stats().InUse != 0 {
		t.Fatal("device memory left after Close")
	}
}

func TestPinnedPool(t *testing.T) {
	dev := sim.MustNew(sim.Config{})
	p := alloc.NewPinnedPool(dev)
	b, err := p.Get(5000)
	if err != nil || len(b) != 5000 || cap(b) != 8192 {
		t.Fatalf("Get(5000) = len %d cap %d, %v", len(b), cap(b), err)
	}
	if err := p.Put(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Put(b); !errors.Is(err, alloc.ErrUnknownPointer) {
		t.Fatalf("double put: %v", err)
	}
	if err := p.Put(make([]byte, 10)); !errors.Is(err, alloc.ErrUnknownPointer) {
		t.Fatalf("foreign put: %v", err)
	}
	c, _ := p.Get(6000) // same class: the cached buffer
	if &c[0] != &b[0] || dev.Stats().HostAllocations != 1 {
		t.Fatal("cached pinned buffer not reused")
	}
	if inUse, cached := p.Usage(); inUse != 8192 || cached != 0 {
		t.Fatalf("usage %d %d", inUse, cached)
	}
	_ = p.Put(c[:10])
	if n, err := p.EmptyCache(); n != 8192 || err != nil {
		t.Fatalf("EmptyCache = %d, %v", n, err)
	}
	if dev.Stats().HostAllocations != 0 {
		t.Fatal("pinned memory not freed")
	}
	if _, err := p.Get(0); err == nil {
		t.Fatal("Get(0) succeeded")
	}
}
