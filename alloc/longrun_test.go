package alloc_test

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// liveSpan is one live allocation of the long runs' shadow model.
type liveSpan struct{ addr, size, req uint64 }

// TestLongRandomOps makes ten million random allocations and frees (the
// page-mapped mode as it runs without a cap; a million each for the
// default mode and for the page-mapped mode under a cap, its fine regime)
// on a simulated device of 4 GiB with at most 1.5 GiB and 400 blocks live,
// against a shadow model: after every
// allocation no two live blocks overlap (the new block's neighbours by
// address are checked), every 4096 operations the allocated and requested
// bytes and the allocation count equal the model's exactly, and at the end
// the invariants hold and everything goes back. Only the default mode may
// run out of memory (its segments fragment); the page-mapped mode may not.
// A -race build runs a tenth.
func TestLongRandomOps(t *testing.T) {
	if testing.Short() {
		t.Skip("long run")
	}
	for _, tc := range []struct {
		name string
		conf string
		ops  int
	}{
		{"paged", "page_mapped:true", 10_000_000},
		{"paged under a cap", "page_mapped:true,max_bytes:3GiB", 1_000_000},
		{"default", "", 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := tc.ops
			if raceOn {
				ops /= 10
			}
			cfg, err := alloc.ParseConfig(tc.conf)
			if err != nil {
				t.Fatal(err)
			}
			a, err := alloc.New(sim.MustNew(sim.Config{Capacity: 4 << 30}), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(ops)))
			var live []liveSpan // sorted by address
			var allocated, requested uint64
			size := func() uint64 {
				switch r := rng.IntN(100); {
				case r < 60: // small pool
					return 1 + rng.Uint64N(1<<20)
				case r < 95:
					return 1<<20 + rng.Uint64N(31<<20)
				default:
					return 32<<20 + rng.Uint64N(224<<20)
				}
			}
			const maxLive = 1536 << 20
			var ooms int
			for i := range ops {
				req := size()
				if len(live) > 0 && (len(live) >= 400 || requested+req > maxLive || rng.IntN(2) == 0) {
					j := rng.IntN(len(live))
					s := live[j]
					if err := a.Free(s.addr); err != nil {
						t.Fatalf("op %d: free %#x: %v", i, s.addr, err)
					}
					live = append(live[:j], live[j+1:]...)
					allocated -= s.size
					requested -= s.req
				} else {
					p, err := a.Malloc(req, 0)
					var oom *alloc.OutOfMemoryError
					if errors.As(err, &oom) && tc.conf == "" {
						ooms++ // the default mode fragments: an honest out of memory, nothing changed
						continue
					}
					if err != nil {
						t.Fatalf("op %d: malloc %d with %d bytes live: %v", i, req, requested, err)
					}
					n := a.BlockSize(p)
					if n < req {
						t.Fatalf("op %d: block %#x of %d bytes for %d", i, p, n, req)
					}
					j := sort.Search(len(live), func(k int) bool { return live[k].addr > p })
					if j > 0 && live[j-1].addr+live[j-1].size > p {
						t.Fatalf("op %d: %#x+%d overlaps %#x+%d", i, p, n, live[j-1].addr, live[j-1].size)
					}
					if j < len(live) && p+n > live[j].addr {
						t.Fatalf("op %d: %#x+%d overlaps %#x+%d", i, p, n, live[j].addr, live[j].size)
					}
					live = append(live, liveSpan{})
					copy(live[j+1:], live[j:])
					live[j] = liveSpan{p, n, req}
					allocated += n
					requested += req
				}
				if i%4096 == 0 {
					st := a.Stats()
					if uint64(st.AllocatedBytes.All.Current) != allocated || uint64(st.RequestedBytes.All.Current) != requested ||
						int(st.Allocation.All.Current) != len(live) {
						t.Fatalf("op %d: stats say %d allocations, %d allocated and %d requested bytes; the model %d, %d, %d",
							i, st.Allocation.All.Current, st.AllocatedBytes.All.Current, st.RequestedBytes.All.Current,
							len(live), allocated, requested)
					}
				}
			}
			if err := a.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			for _, s := range live {
				if err := a.Free(s.addr); err != nil {
					t.Fatal(err)
				}
			}
			if st := a.Stats(); st.AllocatedBytes.All.Current != 0 || st.Allocation.All.Current != 0 {
				t.Fatalf("after freeing everything: %d allocations of %d bytes", st.Allocation.All.Current, st.AllocatedBytes.All.Current)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			st := a.Stats()
			t.Logf("%d operations (%d out of memory): peak %d MiB allocated, %d MiB reserved, %d device calls", ops,
				ooms, st.AllocatedBytes.All.Peak>>20, st.ReservedBytes.All.Peak>>20, st.NumDeviceAlloc+st.NumDeviceFree+st.NumMemMap+st.NumMemUnmap)
		})
	}
}
