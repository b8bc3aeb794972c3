package alloc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

func TestOutOfMemoryError(t *testing.T) {
	a, _ := newAlloc(t, 64*miB, alloc.Config{})
	p := mustMalloc(t, a, 40*miB, 0)
	_, err := a.Malloc(30*miB, 0)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("Malloc past capacity: %v", err)
	}
	if oom.Requested != 30*miB || oom.DeviceTotal != 64*miB || oom.Allocated != 40*miB || oom.Reserved != 40*miB {
		t.Fatalf("report: %+v", oom)
	}
	for _, want := range []string{
		"tried to allocate 30.00 MiB", "total capacity of 64.00 MiB of which 24.00 MiB is free",
		"40.00 MiB is allocated and 0 bytes is reserved but unallocated", "reduce the batch size",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%s", want, err)
		}
	}
	s := a.Stats()
	if s.NumOOMs != 1 || s.NumAllocRetries != 1 {
		t.Fatalf("num_ooms %d, num_alloc_retries %d", s.NumOOMs, s.NumAllocRetries)
	}
	mustFree(t, a, p)

	// Memory held by other processes: the device itself runs out.
	b, d := newAlloc(t, 64*miB, alloc.Config{})
	d.SetReservedByOthers(50 * miB)
	_, err = b.Malloc(20*miB, 0)
	if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Fatalf("device OOM not wrapped: %v", err)
	}
	if oom.DeviceFree != 14*miB || !strings.Contains(err.Error(), "check other processes") {
		t.Fatalf("report: %+v\n%s", oom, err)
	}
}

// TestOutOfMemoryFragmented: enough free reserve in total, but split by live
// blocks. The message must say so and suggest max_split_size_mb.
func TestOutOfMemoryFragmented(t *testing.T) {
	a, _ := newAlloc(t, 100*miB, alloc.Config{MaxBytes: 40 * miB})
	var ps []uint64
	for i := 0; i < 8; i++ { // two 20 MiB segments of 4 × 5 MiB
		ps = append(ps, mustMalloc(t, a, 5*miB, 0))
	}
	for i := 0; i < 8; i += 2 {
		mustFree(t, a, ps[i])
	}
	_, err := a.Malloc(12*miB, 0)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("want OOM, got %v", err)
	}
	if oom.FreeReserve != 20*miB || oom.LargestFreeBlock != 5*miB || oom.Cap != 40*miB {
		t.Fatalf("report: %+v", oom)
	}
	if f := oom.Fragmentation(); f != 0.75 {
		t.Fatalf("fragmentation %v, want 0.75", f)
	}
	for _, want := range []string{"largest free block is 5.00 MiB", "75% of the 20.00 MiB free reserve is fragmented", "max_split_size_mb", "40.00 MiB allowed (cap)", "raise the cap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q:\n%s", want, err)
		}
	}
	for i := 1; i < 8; i += 2 {
		mustFree(t, a, ps[i])
	}
}

// TestOOMRetrySearchesPoolAgain: a block waiting on another stream's event
// is the only fit; when growth fails, the allocator waits for the events
// and must find that block instead of failing (pytorch/pytorch#189504).
func TestOOMRetrySearchesPoolAgain(t *testing.T) {
	dev := sim.MustNew(sim.Config{Capacity: 20 * miB, HoldEvents: true})
	a, err := alloc.New(syncDev{dev}, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustMalloc(t, a, 20*miB, 0)
	if err := a.RecordStream(p, 7); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, p)
	if s := a.Stats(); s.Active.All.Current != 1 || s.Allocation.All.Current != 0 {
		t.Fatalf("freed block used on stream 7 should be pending: %+v %+v", s.Active.All, s.Allocation.All)
	}
	q, err := a.Malloc(20*miB, 0)
	if err != nil {
		t.Fatalf("allocation failed although the pending block became free: %v", err)
	}
	if q != p {
		t.Fatalf("got %#x, want the recycled block %#x", q, p)
	}
	s := a.Stats()
	if s.NumAllocRetries != 1 || s.NumOOMs != 0 || s.NumSyncAllStreams != 1 || s.NumDeviceAlloc != 1 {
		t.Fatalf("retries %d ooms %d syncs %d device allocs %d", s.NumAllocRetries, s.NumOOMs, s.NumSyncAllStreams, s.NumDeviceAlloc)
	}
	check(t, a)
	mustFree(t, a, q)
}

func TestRecordStreamDelaysReuse(t *testing.T) {
	dev := sim.MustNew(sim.Config{Capacity: giB, HoldEvents: true})
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustMalloc(t, a, 4*kiB, 0)
	if err := a.RecordStream(p, 0); err != nil { // own stream: no event
		t.Fatal(err)
	}
	if err := a.RecordStream(p, 3); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, p)
	q := mustMalloc(t, a, 4*kiB, 0)
	if q == p {
		t.Fatal("block reused while stream 3 may still use it")
	}
	dev.CompleteStream(3)
	r := mustMalloc(t, a, 4*kiB, 0) // polls events first
	if r != p {
		t.Fatalf("block not reused after its event completed: got %#x want %#x", r, p)
	}
	check(t, a)
	mustFree(t, a, q)
	mustFree(t, a, r)
	if c := dev.Calls(); c.EventCreate != 1 || c.EventRecord != 1 {
		t.Fatalf("event calls: %+v", c)
	}
}

// TestEmptyCachePollsEvents: on a device without EventSynchronize,
// EmptyCache polls until the events complete.
func TestEmptyCachePollsEvents(t *testing.T) {
	dev := sim.MustNew(sim.Config{Capacity: giB, HoldEvents: true})
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustMalloc(t, a, 4*kiB, 0)
	_ = a.RecordStream(p, 2)
	mustFree(t, a, p)
	go func() {
		time.Sleep(20 * time.Millisecond)
		dev.CompleteEvents()
	}()
	n, err := a.EmptyCache()
	if err != nil || n != 2*miB {
		t.Fatalf("EmptyCache = %d, %v", n, err)
	}
	check(t, a)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if dev.LiveEvents() != 0 {
		t.Fatalf("%d events not destroyed", dev.LiveEvents())
	}
}

// failingDev returns a non-OOM error from Malloc: the allocator must return
// it as is, without retrying or reporting out of memory.
type failingDev struct {
	*sim.Device
	err error
}

func (d failingDev) Malloc(n uint64) (uint64, error) {
	if d.err != nil {
		return 0, d.err
	}
	return d.Device.Malloc(n)
}

func TestDeviceErrors(t *testing.T) {
	boom := errors.New("device lost")
	dev := sim.MustNew(sim.Config{Capacity: giB})
	a, err := alloc.New(failingDev{dev, boom}, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Malloc(1000, 0)
	if !errors.Is(err, boom) || errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("Malloc error = %v", err)
	}
	if s := a.Stats(); s.NumAllocRetries != 0 || s.NumOOMs != 0 {
		t.Fatalf("non-OOM error counted as OOM: %+v", s)
	}
	check(t, a)

	// A failing device free leaves the segment cached and consistent.
	b, _ := newAlloc(t, giB, alloc.Config{})
	_ = b
	a2, dev2 := newAlloc(t, giB, alloc.Config{})
	p := mustMalloc(t, a2, 1000, 0)
	mustFree(t, a2, p)
	remove := dev2.FailNth(sim.KindFree, 1)
	if _, err := a2.EmptyCache(); !errors.Is(err, sim.ErrInjected) {
		t.Fatalf("EmptyCache with failing free: %v", err)
	}
	remove()
	check(t, a2)
	if n, err := a2.EmptyCache(); n != 2*miB || err != nil {
		t.Fatalf("EmptyCache after the fault = %d, %v", n, err)
	}

	// An injected device OOM is retried after releasing the cache.
	a3, dev3 := newAlloc(t, giB, alloc.Config{})
	p3 := mustMalloc(t, a3, 1000, 0)
	mustFree(t, a3, p3)
	dev3.FailNth(sim.KindMalloc, 1)
	if _, err := a3.Malloc(5*miB, 0); err != nil {
		t.Fatalf("Malloc after one injected OOM: %v", err)
	}
	if s := a3.Stats(); s.NumAllocRetries != 1 || s.NumDeviceFree != 1 {
		t.Fatalf("retries %d device frees %d", s.NumAllocRetries, s.NumDeviceFree)
	}
}

func TestCapAndFraction(t *testing.T) {
	tests := []struct {
		cfg  alloc.Config
		want uint64
	}{
		{alloc.Config{}, 100 * miB},
		{alloc.Config{MaxBytes: 30 * miB}, 30 * miB},
		{alloc.Config{MaxFraction: 0.5}, 50 * miB},
		{alloc.Config{MaxBytes: 30 * miB, MaxFraction: 0.2}, 20 * miB},
		{alloc.Config{MaxBytes: 300 * miB}, 100 * miB},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.cfg), func(t *testing.T) {
			a, _ := newAlloc(t, 100*miB, tt.cfg)
			if a.Cap() != tt.want {
				t.Fatalf("Cap = %d, want %d", a.Cap(), tt.want)
			}
			// Fill up to the cap with 2 MiB segments; the next one fails.
			var ps []uint64
			for {
				p, err := a.Malloc(miB, 0)
				if err != nil {
					break
				}
				ps = append(ps, p)
			}
			if got := a.Stats().ReservedBytes.All.Peak; uint64(got) > tt.want || uint64(got) < tt.want-2*miB {
				t.Fatalf("reserved peak %d, cap %d", got, tt.want)
			}
			for _, p := range ps {
				mustFree(t, a, p)
			}
		})
	}
}

func TestGarbageCollectionThreshold(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{MaxBytes: 100 * miB, GarbageCollectionThreshold: 0.5})
	// Three cached 20 MiB segments, used in order p1, p2, p3.
	p1 := mustMalloc(t, a, 20*miB, 0)
	p2 := mustMalloc(t, a, 20*miB, 0)
	mustFree(t, a, p1)
	mustFree(t, a, p2)
	// Reserved 40 MiB; a 20 MiB request of another size grows to 60 MiB,
	// past 50 MiB: the least recently used segment (p1's) goes first.
	p3 := mustMalloc(t, a, 25*miB, 0)
	s := a.Stats()
	if s.ReservedBytes.All.Current != 46*miB || s.NumDeviceFree != 1 {
		t.Fatalf("reserved %d MiB, device frees %d", s.ReservedBytes.All.Current>>20, s.NumDeviceFree)
	}
	if c := d.Calls(); c.Free != 1 {
		t.Fatalf("device frees %d", c.Free)
	}
	// p2's segment is still cached.
	if q := mustMalloc(t, a, 20*miB, 0); q != p2 {
		t.Fatalf("the most recently used segment was released")
	} else {
		mustFree(t, a, q)
	}
	mustFree(t, a, p3)
}

func TestPrealloc(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{PreallocBytes: 100 * miB})
	if s := a.Stats(); s.ReservedBytes.All.Current != 100*miB || d.Calls().Malloc != 1 {
		t.Fatalf("prealloc: reserved %d", s.ReservedBytes.All.Current)
	}
	p := mustMalloc(t, a, 30*miB, 0)
	q := mustMalloc(t, a, 50*miB, 0)
	if d.Calls().Malloc != 1 {
		t.Fatalf("large requests did not use the preallocated segment")
	}
	mustFree(t, a, p)
	mustFree(t, a, q)
	if n, _ := a.EmptyCache(); n != 0 {
		t.Fatalf("EmptyCache released %d bytes of preallocated memory", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if d.Stats().InUse != 0 {
		t.Fatal("Close kept preallocated memory")
	}
	if _, err := a.Malloc(1, 0); !errors.Is(err, alloc.ErrClosed) {
		t.Fatalf("Malloc after Close: %v", err)
	}
	if _, err := alloc.New(newDev(t, 10*miB), alloc.Config{PreallocBytes: 20 * miB}); err == nil || !strings.Contains(err.Error(), "prealloc_bytes") {
		t.Fatalf("prealloc larger than the device: %v", err)
	}
}

func TestBadFrees(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	p := mustMalloc(t, a, 4096, 0)
	if err := a.Free(p + 512); !errors.Is(err, alloc.ErrInteriorPointer) {
		t.Fatalf("interior: %v", err)
	}
	if err := a.Free(0xdead0000); !errors.Is(err, alloc.ErrUnknownPointer) {
		t.Fatalf("foreign: %v", err)
	}
	mustFree(t, a, p)
	if err := a.Free(p); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	if err := a.RecordStream(p, 1); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Fatalf("record stream after free: %v", err)
	}
	check(t, a)
}

func TestPoisonOnFree(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{PoisonOnFree: true})
	keep := mustMalloc(t, a, 512, 0) // keeps the segment from being released
	p := mustMalloc(t, a, 4096, 0)
	if err := d.CopyHtoD(p, []byte("secret")); err != nil {
		t.Fatal(err)
	}
	mustFree(t, a, p)
	got := make([]byte, 6)
	if err := d.CopyDtoH(got, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range got {
		if c != alloc.PoisonByte {
			t.Fatalf("freed memory reads %x, want poison %x", got, alloc.PoisonByte)
		}
	}
	mustFree(t, a, keep)
}

func TestResetStats(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	p := mustMalloc(t, a, 10*miB, 0)
	q := mustMalloc(t, a, 10*miB, 0)
	mustFree(t, a, q)
	a.ResetPeakStats()
	if s := a.Stats(); s.AllocatedBytes.All.Peak != 10*miB {
		t.Fatalf("peak after reset %d", s.AllocatedBytes.All.Peak)
	}
	a.ResetAccumulatedStats()
	s := a.Stats()
	if s.AllocatedBytes.All.Allocated != 0 || s.AllocatedBytes.All.Freed != 0 || s.NumDeviceAlloc != 0 || s.AllocatedBytes.All.Current != 10*miB {
		t.Fatalf("after accumulated reset: %+v", s.AllocatedBytes.All)
	}
	_ = a.Free(p) // the invariant check at cleanup tolerates reset sums
}
