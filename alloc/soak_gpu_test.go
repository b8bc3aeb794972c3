//go:build gpu

package alloc_test

// A soak: a million random operations on the real device, then a check that
// nothing leaked, neither in the allocator's books nor on the device.

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

var soakOps = flag.Int("soak.ops", 1_000_000, "operations of TestGPUSoak")

// soakSize draws a request size from 512 B to 64 MiB with a heavy small
// tail: most requests are activations and gradients of a few KiB, a few
// are tens of MiB. Sizes are rarely multiples of 512, so rounding is
// exercised.
func soakSize(r *rand.Rand) uint64 {
	switch k := r.IntN(100); {
	case k < 60:
		return gpuLogUniform(r, 512, 64<<10)
	case k < 85:
		return gpuLogUniform(r, 64<<10, 1<<20)
	case k < 97:
		return gpuLogUniform(r, 1<<20, 16<<20)
	default:
		return gpuLogUniform(r, 16<<20, 64<<20)
	}
}

type soakAlloc struct {
	ptr, size uint64
	tag       uint64 // nonzero: a tag was written at both ends
}

// TestGPUSoak runs random allocations and frees (and an EmptyCache every
// 50,000 operations) with a live set that drifts between a few hundred and
// a few thousand allocations. One allocation in 16 gets a tag written at
// both ends and checked before its free, so memory handed out twice is
// caught on the device. The invariants are checked every 100,000
// operations. At the end everything is freed: the allocator must count
// zero bytes allocated and, after EmptyCache, the device's free memory
// must be what it was at the start.
func TestGPUSoak(t *testing.T) {
	d := openGPU(t)
	ops := *soakOps
	if testing.Short() {
		ops = min(ops, 100_000)
	}
	// Warm the driver: its first allocations of each kind may set up state
	// it keeps (page tables, pools); the baseline is taken after them.
	rawFree0, _ := gpuMemInfo(t, d)
	for _, n := range []uint64{512, 2 << 20, 20 << 20, 64 << 20} {
		p, err := d.Malloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	free0, _ := gpuMemInfo(t, d)

	a := newGPUAlloc(t, d, alloc.Config{})
	r := rand.New(rand.NewPCG(2024, 6))
	live := make([]soakAlloc, 0, 8192)
	var tag, tagChecks, emptyCaches, allocs uint64
	writeTag := func(x soakAlloc) error {
		b := tagBytes(x)
		if err := d.CopyHtoD(x.ptr, b[:]); err != nil {
			return err
		}
		return d.CopyHtoD(x.ptr+x.size-16, b[:])
	}
	checkTag := func(x soakAlloc) error {
		var got [16]byte
		for _, at := range []uint64{x.ptr, x.ptr + x.size - 16} {
			if err := d.CopyDtoH(got[:], at); err != nil {
				return err
			}
			if got != tagBytes(x) {
				return fmt.Errorf("tag of the %d-byte allocation at %#x overwritten at %#x: % x", x.size, x.ptr, at, got)
			}
		}
		tagChecks++
		return nil
	}
	target := 1500
	start := time.Now()
	for op := 1; op <= ops; op++ {
		if op%200_000 == 0 {
			target = []int{300, 1500, 4000, 800, 2500}[op/200_000%5]
		}
		if op%50_000 == 0 {
			if _, err := a.EmptyCache(); err != nil {
				t.Fatalf("op %d: EmptyCache: %v", op, err)
			}
			emptyCaches++
			continue
		}
		if op%100_000 == 1 {
			if err := a.CheckInvariants(); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
		}
		pAlloc := 45
		if len(live) < target {
			pAlloc = 55
		}
		if len(live) == 0 || r.IntN(100) < pAlloc {
			n := soakSize(r)
			p, err := a.Malloc(n, 0)
			if err != nil {
				t.Fatalf("op %d: Malloc(%d) with %d live: %v", op, n, len(live), err)
			}
			allocs++
			x := soakAlloc{ptr: p, size: n}
			if allocs%16 == 0 {
				tag++
				x.tag = tag
				if err := writeTag(x); err != nil {
					t.Fatalf("op %d: writing a tag: %v", op, err)
				}
			}
			live = append(live, x)
			continue
		}
		k := r.IntN(len(live))
		x := live[k]
		if x.tag != 0 {
			if err := checkTag(x); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
		}
		if err := a.Free(x.ptr); err != nil {
			t.Fatalf("op %d: Free(%#x): %v", op, x.ptr, err)
		}
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for _, x := range live {
		if x.tag != 0 {
			if err := checkTag(x); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Free(x.ptr); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	t.Logf("%d operations (%d allocations, %d EmptyCache, %d tag checks) in %v, %.0f ns per operation including tag copies",
		ops, allocs, emptyCaches, tagChecks, elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/float64(ops))
	t.Logf("device calls: %d allocations, %d frees; peak reserved %d MiB, peak allocated %d MiB, peak requested %d MiB",
		st.NumDeviceAlloc, st.NumDeviceFree, st.ReservedBytes.All.Peak>>20, st.AllocatedBytes.All.Peak>>20, st.RequestedBytes.All.Peak>>20)
	for name, s := range map[string]alloc.StatSet{
		"allocation": st.Allocation, "allocated_bytes": st.AllocatedBytes,
		"active_bytes": st.ActiveBytes, "requested_bytes": st.RequestedBytes,
	} {
		if s.All.Current != 0 || s.SmallPool.Current != 0 || s.LargePool.Current != 0 {
			t.Errorf("%s current = %d (small %d, large %d), want 0", name, s.All.Current, s.SmallPool.Current, s.LargePool.Current)
		}
	}
	if st.Allocation.All.Allocated != int64(allocs) || st.Allocation.All.Freed != int64(allocs) {
		t.Errorf("allocation.all allocated %d, freed %d; the test made %d", st.Allocation.All.Allocated, st.Allocation.All.Freed, allocs)
	}
	released, err := a.EmptyCache()
	if err != nil {
		t.Fatal(err)
	}
	st = a.Stats()
	if st.ReservedBytes.All.Current != 0 || st.Segment.All.Current != 0 {
		t.Errorf("after EmptyCache: %d bytes in %d segments still reserved", st.ReservedBytes.All.Current, st.Segment.All.Current)
	}
	if st.NumDeviceAlloc != st.NumDeviceFree {
		t.Errorf("%d device allocations but %d device frees", st.NumDeviceAlloc, st.NumDeviceFree)
	}
	free1, _ := gpuMemInfo(t, d)
	t.Logf("device free memory: %d before the driver warm-up, %d at the start, %d at the end (difference %d bytes); last EmptyCache released %d MiB",
		rawFree0, free0, free1, int64(free1)-int64(free0), released>>20)
	if free1 != free0 {
		t.Errorf("the device's free memory is %d bytes, %d at the start: %d bytes not returned",
			free1, free0, int64(free0)-int64(free1))
	}
}

// tagBytes is what a tagged allocation holds at both ends: its tag and its
// address.
func tagBytes(x soakAlloc) (b [16]byte) {
	binary.LittleEndian.PutUint64(b[:8], x.tag)
	binary.LittleEndian.PutUint64(b[8:], x.ptr)
	return b
}
