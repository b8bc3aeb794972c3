//go:build gpu

package alloc_test

// Out of memory on the real device: at its capacity, at a cap, and with the
// free memory split between live blocks.

import (
	"errors"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/cuda"
)

// gpuMemInfo returns the device's free and total memory.
func gpuMemInfo(t testing.TB, d *gpuDev) (free, total uint64) {
	t.Helper()
	free, total, err := d.MemInfo()
	if err != nil {
		t.Fatalf("MemInfo: %v", err)
	}
	return free, total
}

// wantOOM checks that err is an *alloc.OutOfMemoryError for a request of
// req bytes whose message says what it must, and returns it.
func wantOOM(t *testing.T, err error, req uint64) *alloc.OutOfMemoryError {
	t.Helper()
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("Malloc(%d) = %v, want an *alloc.OutOfMemoryError", req, err)
	}
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Errorf("errors.Is(err, ErrOutOfMemory) is false")
	}
	if oom.Requested != req || oom.Rounded < req {
		t.Errorf("Requested %d, Rounded %d; asked for %d", oom.Requested, oom.Rounded, req)
	}
	if oom.Reserved != oom.Allocated+oom.ReservedUnallocated {
		t.Errorf("Reserved %d != Allocated %d + ReservedUnallocated %d", oom.Reserved, oom.Allocated, oom.ReservedUnallocated)
	}
	if oom.LargestFreeBlock > oom.FreeReserve || oom.FreeReserve > oom.ReservedUnallocated {
		t.Errorf("LargestFreeBlock %d, FreeReserve %d, ReservedUnallocated %d out of order",
			oom.LargestFreeBlock, oom.FreeReserve, oom.ReservedUnallocated)
	}
	if oom.DeviceTotal == 0 || oom.DeviceFree > oom.DeviceTotal || oom.Cap > oom.DeviceTotal {
		t.Errorf("DeviceTotal %d, DeviceFree %d, Cap %d", oom.DeviceTotal, oom.DeviceFree, oom.Cap)
	}
	msg := err.Error()
	for _, s := range []string{"tried to allocate", "total capacity", "is free", "is allocated", "reserved but unallocated", "To fix:"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q: %s", s, msg)
		}
	}
	if oom.FreeReserve > 0 && !strings.Contains(msg, "the largest free block is") {
		t.Errorf("message does not give the largest free block (%d bytes): %s", oom.LargestFreeBlock, msg)
	}
	t.Logf("OOM message: %s", msg)
	return oom
}

// TestGPUOutOfMemoryAtCapacity fills the device to near its free memory,
// asks for more, and checks the error, the counters and the recovery.
func TestGPUOutOfMemoryAtCapacity(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{})
	// Two small blocks, one freed: a split segment whose free part the
	// allocator cannot release, so the report has a free reserve.
	p1, err := a.Malloc(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := a.Malloc(4096, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(p1); err != nil {
		t.Fatal(err)
	}
	free, total := gpuMemInfo(t, d)
	big := (free - 512<<20) &^ (2<<20 - 1)
	pb, err := a.Malloc(big, 0)
	if err != nil {
		t.Fatalf("Malloc of %d MiB with %d MiB free: %v", big>>20, free>>20, err)
	}
	t.Logf("device: %d MiB total, %d MiB free; allocated %d MiB in one block", total>>20, free>>20, big>>20)

	const req = 1 << 30
	_, err = a.Malloc(req, 0)
	oom := wantOOM(t, err, req)
	if oom.DeviceTotal != total || oom.Cap != total {
		t.Errorf("DeviceTotal %d, Cap %d; the device has %d", oom.DeviceTotal, oom.Cap, total)
	}
	if oom.DeviceFree >= req {
		t.Errorf("DeviceFree %d: the device had room for %d", oom.DeviceFree, req)
	}
	if oom.Allocated != big+4096 || oom.LargestFreeBlock == 0 {
		t.Errorf("Allocated %d (want %d), LargestFreeBlock %d", oom.Allocated, big+4096, oom.LargestFreeBlock)
	}
	// Either the driver refused the growth, or the allocator saw that it
	// would pass the device's total memory and did not ask.
	switch {
	case errors.Is(err, alloc.ErrDeviceOutOfMemory):
		if !cuda.IsOutOfMemory(err) {
			t.Errorf("the driver's error is not in the chain: %v", oom.Cause)
		}
		t.Logf("the driver refused the growth")
	case oom.Cause != nil && strings.Contains(oom.Cause.Error(), "device's total memory"):
		t.Logf("the allocator stopped at the device's total memory without asking the driver")
	default:
		t.Errorf("unexpected cause: %v", oom.Cause)
	}
	st := a.Stats()
	if st.NumOOMs != 1 || st.NumAllocRetries != 1 {
		t.Errorf("num_ooms %d, num_alloc_retries %d; want 1 and 1", st.NumOOMs, st.NumAllocRetries)
	}
	m := a.StatsMap()
	if m["num_ooms"] != 1 || m["num_alloc_retries"] != 1 {
		t.Errorf("StatsMap: num_ooms %d, num_alloc_retries %d", m["num_ooms"], m["num_alloc_retries"])
	}

	// Recovery: free the big block and the same request succeeds (the
	// allocator releases the cached segment when growth fails).
	if err := a.Free(pb); err != nil {
		t.Fatal(err)
	}
	p, err := a.Malloc(req, 0)
	if err != nil {
		t.Fatalf("Malloc(1 GiB) after freeing %d MiB: %v", big>>20, err)
	}
	st = a.Stats()
	t.Logf("recovered: 1 GiB allocated; num_ooms %d, num_alloc_retries %d, device allocs %d, device frees %d",
		st.NumOOMs, st.NumAllocRetries, st.NumDeviceAlloc, st.NumDeviceFree)
	for _, q := range []uint64{p, p2} {
		if err := a.Free(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
}

// TestGPUOutOfMemoryAtCap checks that max_fraction and max_bytes stop
// growth at the cap while the device still has room.
func TestGPUOutOfMemoryAtCap(t *testing.T) {
	d := openGPU(t)
	_, total := gpuMemInfo(t, d)
	for _, conf := range []string{"max_fraction:0.25", "max_bytes:10GiB"} {
		t.Run(conf, func(t *testing.T) {
			cfg, err := alloc.ParseConfig(conf)
			if err != nil {
				t.Fatal(err)
			}
			a := newGPUAlloc(t, d, cfg)
			want := min(total, 10<<30)
			if cfg.MaxFraction != 0 {
				want = uint64(0.25 * float64(total))
			}
			if a.Cap() != want {
				t.Fatalf("Cap() = %d, want %d", a.Cap(), want)
			}
			const step = 1 << 30
			var ptrs []uint64
			defer func() {
				for _, p := range ptrs {
					if err := a.Free(p); err != nil {
						t.Error(err)
					}
				}
			}()
			var err2 error
			for {
				p, err := a.Malloc(step, 0)
				if err != nil {
					err2 = err
					break
				}
				ptrs = append(ptrs, p)
			}
			if got := uint64(len(ptrs)); got != want/step {
				t.Errorf("%d GiB allocated under a cap of %d bytes, want %d", got, want, want/step)
			}
			oom := wantOOM(t, err2, step)
			if oom.Cap != want || oom.Reserved > want || oom.Reserved+step <= want {
				t.Errorf("Cap %d, Reserved %d: the OOM is not at the cap %d", oom.Cap, oom.Reserved, want)
			}
			if oom.DeviceFree < step {
				t.Errorf("DeviceFree %d: the device itself was full", oom.DeviceFree)
			}
			msg := err2.Error()
			if !strings.Contains(msg, "allowed (cap)") || !strings.Contains(msg, "raise the cap") {
				t.Errorf("the message does not blame the cap: %s", msg)
			}
			if errors.Is(err2, alloc.ErrDeviceOutOfMemory) {
				t.Errorf("the device reported out of memory; the cap should have stopped growth first")
			}
			st := a.Stats()
			if st.NumOOMs != 1 || st.NumAllocRetries != 1 {
				t.Errorf("num_ooms %d, num_alloc_retries %d; want 1 and 1", st.NumOOMs, st.NumAllocRetries)
			}
			// One freed buffer makes room again.
			if err := a.Free(ptrs[0]); err != nil {
				t.Fatal(err)
			}
			if ptrs[0], err = a.Malloc(step, 0); err != nil {
				t.Fatalf("Malloc after a free under the cap: %v", err)
			}
		})
	}
}

// TestGPUFragmentation fills the device with 1 GiB buffers, frees every
// other one and asks for 2 GiB, twice:
//
//   - each buffer its own segment (the default for requests of 10 MiB or
//     more): the freed segments are cached, the growth fails at the driver,
//     the allocator releases them, retries and succeeds — the driver maps
//     the freed memory at a new address, so it is not fragmented;
//   - all buffers carved from one segment: the free half of the device lies
//     between live blocks, the allocator cannot release it, and the error
//     says so; EmptyCache cannot help either (it frees nothing) until the
//     live blocks go.
func TestGPUFragmentation(t *testing.T) {
	d := openGPU(t)
	const gib = 1 << 30

	t.Run("segment per buffer", func(t *testing.T) {
		a := newGPUAlloc(t, d, alloc.Config{})
		var ptrs []uint64
		var err error
		for {
			var p uint64
			if p, err = a.Malloc(gib, 0); err != nil {
				break
			}
			ptrs = append(ptrs, p)
		}
		free, total := gpuMemInfo(t, d)
		t.Logf("filled: %d × 1 GiB allocated, device %d MiB free of %d MiB", len(ptrs), free>>20, total>>20)
		wantOOM(t, err, gib)
		if len(ptrs) < 4 {
			t.Fatalf("only %d GiB fit", len(ptrs))
		}
		kept := ptrs[:0]
		for i, p := range ptrs {
			if i%2 == 1 {
				if err := a.Free(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			kept = append(kept, p)
		}
		ptrs = kept
		before := a.Stats()
		p, err := a.Malloc(2*gib, 0)
		if err != nil {
			t.Fatalf("Malloc(2 GiB) with half the device cached: %v", err)
		}
		after := a.Stats()
		t.Logf("2 GiB served after %d retry: %d cached segments released, 1 new; num_ooms %d",
			after.NumAllocRetries-before.NumAllocRetries, after.NumDeviceFree-before.NumDeviceFree, after.NumOOMs)
		if after.NumAllocRetries != before.NumAllocRetries+1 || after.NumDeviceFree <= before.NumDeviceFree {
			t.Errorf("expected one retry after releasing the cache: retries %d → %d, device frees %d → %d",
				before.NumAllocRetries, after.NumAllocRetries, before.NumDeviceFree, after.NumDeviceFree)
		}
		for _, q := range append(ptrs, p) {
			if err := a.Free(q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.EmptyCache(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("one segment", func(t *testing.T) {
		a := newGPUAlloc(t, d, alloc.Config{})
		free, _ := gpuMemInfo(t, d)
		// One segment of all but 768 MiB of the free memory, cached.
		whole := (free - 768<<20) &^ (2<<20 - 1)
		p, err := a.Malloc(whole, 0)
		if err != nil {
			t.Fatalf("Malloc(%d MiB) with %d MiB free: %v", whole>>20, free>>20, err)
		}
		if err := a.Free(p); err != nil {
			t.Fatal(err)
		}
		var ptrs []uint64
		for {
			var q uint64
			if q, err = a.Malloc(gib, 0); err != nil {
				break
			}
			ptrs = append(ptrs, q)
		}
		if total, _ := a.SegmentCount(); total != 1 {
			t.Fatalf("the 1 GiB buffers span %d segments, want 1", total)
		}
		t.Logf("filled: %d × 1 GiB carved from one %d MiB segment", len(ptrs), whole>>20)
		wantOOM(t, err, gib)
		kept := ptrs[:0]
		var freed uint64
		for i, q := range ptrs {
			if i%2 == 1 {
				if err := a.Free(q); err != nil {
					t.Fatal(err)
				}
				freed += gib
				continue
			}
			kept = append(kept, q)
		}
		ptrs = kept
		_, err = a.Malloc(2*gib, 0)
		oom := wantOOM(t, err, 2*gib)
		if oom.FreeReserve < freed || oom.LargestFreeBlock >= 2*gib || oom.Fragmentation() < 0.5 {
			t.Errorf("FreeReserve %d (freed %d), LargestFreeBlock %d, Fragmentation %.2f",
				oom.FreeReserve, freed, oom.LargestFreeBlock, oom.Fragmentation())
		}
		if msg := err.Error(); !strings.Contains(msg, "fragmented") || !strings.Contains(msg, "split between live blocks") {
			t.Errorf("the message does not explain the fragmentation: %s", msg)
		}
		released, err := a.EmptyCache()
		if err != nil || released != 0 {
			t.Errorf("EmptyCache with live blocks in the only segment released %d bytes (%v), want 0", released, err)
		}
		if _, err := a.Malloc(2*gib, 0); !errors.Is(err, alloc.ErrOutOfMemory) {
			t.Errorf("Malloc(2 GiB) after EmptyCache: %v, want out of memory", err)
		}
		for _, q := range ptrs {
			if err := a.Free(q); err != nil {
				t.Fatal(err)
			}
		}
		ptrs = nil
		// Now the segment is one free block: no device call is needed.
		before := a.Stats().NumDeviceAlloc
		q, err := a.Malloc(2*gib, 0)
		if err != nil {
			t.Fatalf("Malloc(2 GiB) once every block is free: %v", err)
		}
		if a.Stats().NumDeviceAlloc != before {
			t.Errorf("the 2 GiB came from the device, not from the free segment")
		}
		if err := a.Free(q); err != nil {
			t.Fatal(err)
		}
		released, err = a.EmptyCache()
		if err != nil || released != whole {
			t.Errorf("EmptyCache released %d bytes (%v), want the whole segment, %d", released, err, whole)
		}
		st := a.Stats()
		t.Logf("num_ooms %d, num_alloc_retries %d", st.NumOOMs, st.NumAllocRetries)
		if st.NumOOMs != 3 {
			t.Errorf("num_ooms %d, want 3", st.NumOOMs)
		}
	})
}
