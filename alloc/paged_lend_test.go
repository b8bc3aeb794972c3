package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// waitingDev records the streams the allocator waits for before it unmaps
// or lends their pages.
type waitingDev struct {
	*sim.Device
	waited []alloc.Stream
}

func (d *waitingDev) SynchronizeStream(s alloc.Stream) error {
	d.waited = append(d.waited, s)
	return nil
}

// pinnedChunk makes two 20 MiB chunks in a row on stream s and leaves the
// first pinned by a live 4 MiB block q at its start, with its other 16 MiB
// idle and not next to any unmapped address space; p2 fills the second.
func pinnedChunk(t *testing.T, a *alloc.Allocator, d alloc.Device, s alloc.Stream) (q, p2 uint64) {
	t.Helper()
	p1 := mustMalloc(t, a, 20*miB, s)
	p2 = mustMalloc(t, a, 20*miB, s)
	mustFree(t, a, p1)
	q = mustMalloc(t, a, 4*miB, s)
	if q != p1 {
		t.Fatalf("the 4 MiB block went to %#x, not into the freed chunk at %#x", q, p1)
	}
	fill(t, d, q, 4*miB, 1)
	fill(t, d, p2, 20*miB, 2)
	return q, p2
}

// A growth maps the idle pages of a chunk that a live block pins a second
// time, where it needs them, instead of creating memory: the reserve grows
// by the shortfall only, both blocks keep their contents, and the pages
// come home and are released once nothing uses the chunk.
func TestPagedLendsPinnedPages(t *testing.T) {
	defer alloc.ForceFine()()     // lending on every growth, as under a cap
	defer alloc.SetSizeShare(0)() // 20 MiB chunks: a job this small would get small ones
	a, d := newAlloc(t, giB, paged)
	q, p2 := pinnedChunk(t, a, d, 0)
	st0, c0 := a.Stats(), d.Calls()

	r := mustMalloc(t, a, 30*miB, 0)
	check(t, a)
	st1, c1 := a.Stats(), d.Calls()
	if got := st1.NumPageLends - st0.NumPageLends; got != 1 {
		t.Errorf("%d runs lent, want 1 (the pinned chunk's 16 idle MiB)", got)
	}
	if got := st1.ReservedBytes.All.Current - st0.ReservedBytes.All.Current; got != 14*miB {
		t.Errorf("reserve grew by %d MiB, want 14 (30 asked, 16 lent)", got/miB)
	}
	if got := c1.MemCreate - c0.MemCreate; got != 1 {
		t.Errorf("%d MemCreate, want 1 (the 14 MiB shortfall)", got)
	}
	if got := c1.MemMap - c0.MemMap; got != 2 {
		t.Errorf("%d MemMap, want 2 (the alias and the new chunk)", got)
	}
	if got := c1.MemUnmap - c0.MemUnmap; got != 0 {
		t.Errorf("%d MemUnmap, want 0: nothing moves", got)
	}
	ds := d.Stats()
	if ds.PhysBytes != uint64(st1.ReservedBytes.All.Current) || ds.MappedBytes != ds.PhysBytes+a.LentBytes() || a.LentBytes() != 16*miB {
		t.Errorf("device: %d physical, %d mapped; allocator: %d reserved, %d lent", ds.PhysBytes, ds.MappedBytes, st1.ReservedBytes.All.Current, a.LentBytes())
	}
	fill(t, d, r, 30*miB, 3)
	same(t, d, q, 4*miB, 1)
	same(t, d, p2, 20*miB, 2)
	same(t, d, r, 30*miB, 3)

	// The new block's pages are idle again; the alias cannot go home while
	// q pins its chunk, and it is never released itself.
	mustFree(t, a, r)
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	check(t, a)
	if got := a.Stats().ReservedBytes.All.Current; got != 40*miB || a.LentBytes() != 16*miB {
		t.Errorf("after EmptyCache with q live: reserved %d MiB, lent %d MiB; want 40 and 16", got/miB, a.LentBytes()/miB)
	}
	same(t, d, q, 4*miB, 1)

	// With q gone the alias returns and the chunk goes.
	mustFree(t, a, q)
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	check(t, a)
	if got := a.Stats().ReservedBytes.All.Current; got != 20*miB || a.LentBytes() != 0 {
		t.Errorf("after EmptyCache with only p2 live: reserved %d MiB, lent %d MiB; want 20 and 0", got/miB, a.LentBytes()/miB)
	}
	same(t, d, p2, 20*miB, 2)
	mustFree(t, a, p2)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.InUse != 0 || st.Reservations != 0 || st.PhysBytes != 0 {
		t.Errorf("after Close: %d bytes in use, %d reservations, %d physical", st.InUse, st.Reservations, st.PhysBytes)
	}
}

// Pages lent to another stream are lent only after the stream that used
// them was waited for; pages lent within one stream need no wait.
func TestPagedLendWaitsForTheOtherStream(t *testing.T) {
	defer alloc.ForceFine()()
	defer alloc.SetSizeShare(0)()
	for _, tc := range []struct {
		name string
		to   alloc.Stream
		want []alloc.Stream
	}{
		{"same stream", 0, nil},
		{"other stream", 7, []alloc.Stream{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &waitingDev{Device: newDev(t, giB)}
			a, err := alloc.New(d, paged)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := pinnedChunk(t, a, d, 0)
			st0 := a.Stats()
			r := mustMalloc(t, a, 30*miB, tc.to)
			check(t, a)
			if got := a.Stats().NumPageLends - st0.NumPageLends; got != 1 {
				t.Fatalf("%d runs lent, want 1", got)
			}
			if len(d.waited) != len(tc.want) || len(tc.want) > 0 && d.waited[0] != tc.want[0] {
				t.Errorf("waited for streams %v, want %v", d.waited, tc.want)
			}
			fill(t, d, r, 30*miB, 3)
			same(t, d, q, 4*miB, 1)
		})
	}
}

// Without lending the same growth creates all it needs: what the other
// tests measure against.
func TestPagedWithoutLending(t *testing.T) {
	defer alloc.ForceFine()()
	defer alloc.SetSizeShare(0)()
	defer alloc.SetLending(false)()
	a, d := newAlloc(t, giB, paged)
	pinnedChunk(t, a, d, 0)
	st0 := a.Stats()
	mustMalloc(t, a, 30*miB, 0)
	st1 := a.Stats()
	if st1.NumPageLends != 0 || st1.ReservedBytes.All.Current-st0.ReservedBytes.All.Current != 30*miB {
		t.Errorf("lending off: %d lent, reserve grew by %d MiB; want 0 and 30", st1.NumPageLends, (st1.ReservedBytes.All.Current-st0.ReservedBytes.All.Current)/miB)
	}
}

// In the coarse regime (no cap) a growth lends only when it needs at least
// a whole chunk; a smaller one creates, as it did before lending.
func TestPagedCoarseLendsForLargeGrowthsOnly(t *testing.T) {
	defer alloc.SetSizeShare(0)()
	defer alloc.SetCoarse(20*miB, 0)() // 20 MiB chunks and no slack: moves and lends at once
	for _, tc := range []struct {
		name  string
		size  uint64
		lends int64
	}{
		{"smaller than a chunk", 18 * miB, 0},
		{"a chunk or more", 30 * miB, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := newAlloc(t, giB, paged)
			if a.FineRegime() {
				t.Fatal("fine regime without a cap")
			}
			pinnedChunk(t, a, d, 0)
			st0 := a.Stats()
			mustMalloc(t, a, tc.size, 0)
			check(t, a)
			if got := a.Stats().NumPageLends - st0.NumPageLends; got != tc.lends {
				t.Errorf("%d runs lent for %d MiB, want %d", got, tc.size/miB, tc.lends)
			}
		})
	}
}
