package sim

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/vramhq/vram/alloc"
)

// TestAgainstModel drives the device with random Malloc, Free, MemCreate,
// MemMap and MemUnmap calls and checks it against a simple model after
// every call: live ranges never overlap, the bytes in use are the sum of
// what is live, and every allocation still holds the bytes last written to
// it (so no two allocations share backing).
func TestAgainstModel(t *testing.T) {
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 1))
		d := newDev(t, Config{Capacity: 64 * mib})
		type live struct {
			addr, size, rounded uint64
			tag                 byte
		}
		var allocs []live
		var handles []alloc.PhysHandle
		handleSize := map[alloc.PhysHandle]uint64{}
		res, err := d.AddressReserve(32 * mib)
		if err != nil {
			t.Fatal(err)
		}
		mapped := map[uint64]alloc.PhysHandle{} // page address -> handle (2 MiB handles)
		var used uint64
		for step := range 2000 {
			switch op := rng.IntN(10); {
			case op < 4: // Malloc
				n := uint64(rng.IntN(3*mib)) + 1
				a, err := d.Malloc(n)
				r, _ := mallocSize(n)
				if errors.Is(err, alloc.ErrDeviceOutOfMemory) {
					if used+r <= 64*mib {
						t.Fatalf("seed %d step %d: OOM for %d bytes with %d used", seed, step, r, used)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				tag := byte(step)
				must(t, d.CopyHtoD(a, []byte{tag}))
				must(t, d.CopyHtoD(a+n-1, []byte{tag}))
				allocs = append(allocs, live{a, n, r, tag})
				used += r
			case op < 7 && len(allocs) > 0: // Free
				i := rng.IntN(len(allocs))
				must(t, d.Free(allocs[i].addr))
				used -= allocs[i].rounded
				allocs = append(allocs[:i], allocs[i+1:]...)
			case op == 7: // MemCreate + MemMap at a free page
				h, err := d.MemCreate(2 * mib)
				if errors.Is(err, alloc.ErrDeviceOutOfMemory) {
					continue
				}
				must(t, err)
				used += 2 * mib
				handles = append(handles, h)
				handleSize[h] = 2 * mib
				page := res + uint64(rng.IntN(16))*2*mib
				if _, ok := mapped[page]; !ok {
					must(t, d.MemMap(page, 2*mib, h))
					must(t, d.MemSetAccess(page, 2*mib))
					mapped[page] = h
				}
			case op == 8 && len(mapped) > 0: // MemUnmap + MemRelease
				pages := make([]uint64, 0, len(mapped))
				for p := range mapped {
					pages = append(pages, p)
				}
				sort.Slice(pages, func(i, j int) bool { return pages[i] < pages[j] })
				p := pages[rng.IntN(len(pages))]
				h := mapped[p]
				must(t, d.MemUnmap(p, 2*mib))
				must(t, d.MemRelease(h))
				delete(mapped, p)
				used -= handleSize[h]
				delete(handleSize, h)
			case op == 9 && len(handles) > 0: // release an unmapped handle, if any
				for i, h := range handles {
					if _, ok := handleSize[h]; !ok {
						continue
					}
					isMapped := false
					for _, mh := range mapped {
						isMapped = isMapped || mh == h
					}
					if !isMapped {
						must(t, d.MemRelease(h))
						used -= handleSize[h]
						delete(handleSize, h)
						handles = append(handles[:i], handles[i+1:]...)
						break
					}
				}
			}
			// Check the model.
			s := d.Stats()
			if s.InUse != used {
				t.Fatalf("seed %d step %d: InUse %d, model %d", seed, step, s.InUse, used)
			}
			sorted := append([]live(nil), allocs...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i].addr < sorted[j].addr })
			for i := 1; i < len(sorted); i++ {
				if sorted[i-1].addr+sorted[i-1].rounded > sorted[i].addr {
					t.Fatalf("seed %d step %d: allocations %#x and %#x overlap", seed, step, sorted[i-1].addr, sorted[i].addr)
				}
			}
			for _, a := range sorted {
				if a.addr < res+32*mib && a.addr+a.rounded > res {
					t.Fatalf("allocation %#x overlaps the reservation", a.addr)
				}
			}
		}
		buf := make([]byte, 1)
		for _, a := range allocs {
			for _, at := range []uint64{a.addr, a.addr + a.size - 1} {
				must(t, d.CopyDtoH(buf, at))
				if buf[0] != a.tag {
					t.Fatalf("seed %d: allocation %#x holds %d at %#x, want %d", seed, a.addr, buf[0], at, a.tag)
				}
			}
		}
	}
}

func BenchmarkMallocFree(b *testing.B) {
	d := MustNew(Config{})
	// 1000 live allocations of mixed sizes, then one Malloc and one Free per op.
	var live []uint64
	for i := range 1000 {
		a, err := d.Malloc(uint64(i%7+1) * 300 * kib)
		if err != nil {
			b.Fatal(err)
		}
		live = append(live, a)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a, err := d.Malloc(uint64(i%5+1) * 700 * kib)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Free(a); err != nil {
			b.Fatal(err)
		}
	}
}
