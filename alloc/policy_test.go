package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

const (
	kiB = 1 << 10
	miB = 1 << 20
	giB = 1 << 30
)

func TestRoundSize(t *testing.T) {
	plain, _ := newAlloc(t, giB, alloc.Config{})
	div4, _ := newAlloc(t, giB, alloc.Config{RoundupPower2Divisions: [16]uint32{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}})
	tests := []struct {
		a    *alloc.Allocator
		in   uint64
		want uint64
	}{
		{plain, 1, 512}, {plain, 511, 512}, {plain, 512, 512}, {plain, 513, 1024},
		{plain, 1000000, 1000448}, {plain, 3*miB + 1, 3*miB + 512},
		{div4, 1200, 1200 + 512 - 1200%512}, // at most 512*4: plain rounding
		{div4, 2049, 2560},                  // 2048..4096 in steps of 512
		{div4, 5000, 5120},                  // 4096..8192 in steps of 1024
		{div4, 4096, 4096},                  // powers of two stay
		{div4, 5*miB + 1, 6 * miB},          // 4 MiB..8 MiB in steps of 1 MiB
		{div4, 300 * miB, 320 * miB},        // 256..512 in steps of 64
	}
	for _, tt := range tests {
		if got := tt.a.RoundSize(tt.in); got != tt.want {
			t.Errorf("RoundSize(%d) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestPoolAndSegmentSize(t *testing.T) {
	tests := []struct {
		size    uint64
		pool    int
		segment uint64
	}{
		{512, alloc.PoolSmall, 2 * miB},
		{miB, alloc.PoolSmall, 2 * miB},
		{miB + 512, alloc.PoolLarge, 20 * miB},
		{10*miB - 512, alloc.PoolLarge, 20 * miB},
		{10 * miB, alloc.PoolLarge, 10 * miB},
		{11*miB + 512, alloc.PoolLarge, 12 * miB},
		{giB + 512, alloc.PoolLarge, giB + 2*miB},
	}
	for _, tt := range tests {
		if got := alloc.PoolOf(tt.size); got != tt.pool {
			t.Errorf("PoolOf(%d) = %d, want %d", tt.size, got, tt.pool)
		}
		if got := alloc.SegmentSize(tt.size); got != tt.segment {
			t.Errorf("SegmentSize(%d) = %d, want %d", tt.size, got, tt.segment)
		}
	}
}

// TestSplitCoalesce walks through splitting a segment and merging it back.
func TestSplitCoalesce(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{})
	p1 := mustMalloc(t, a, 1000, 0)
	p2 := mustMalloc(t, a, 1000, 0)
	p3 := mustMalloc(t, a, 1000, 0)
	if p2 != p1+1024 || p3 != p2+1024 {
		t.Fatalf("small blocks not carved in order: %#x %#x %#x", p1, p2, p3)
	}
	if n := d.Calls().Malloc; n != 1 {
		t.Fatalf("three small allocations made %d device calls, want 1", n)
	}
	s := a.Stats()
	if s.ReservedBytes.SmallPool.Current != 2*miB || s.AllocatedBytes.All.Current != 3072 || s.RequestedBytes.All.Current != 3000 {
		t.Fatalf("stats after 3 allocs: reserved %d allocated %d requested %d", s.ReservedBytes.SmallPool.Current, s.AllocatedBytes.All.Current, s.RequestedBytes.All.Current)
	}
	if s.InactiveSplit.All.Current != 1 || s.InactiveSplitBytes.All.Current != 2*miB-3072 {
		t.Fatalf("inactive split = %d blocks, %d bytes", s.InactiveSplit.All.Current, s.InactiveSplitBytes.All.Current)
	}
	mustFree(t, a, p2) // hole between two live blocks
	check(t, a)
	if s := a.Stats(); s.InactiveSplit.All.Current != 2 {
		t.Fatalf("after freeing the middle block: %d inactive splits, want 2", s.InactiveSplit.All.Current)
	}
	// Best fit: a 1000-byte request takes the hole, not the tail.
	if p := mustMalloc(t, a, 700, 0); p != p2 {
		t.Fatalf("best fit returned %#x, want the hole at %#x", p, p2)
	} else {
		mustFree(t, a, p)
	}
	mustFree(t, a, p1)
	mustFree(t, a, p3) // merges with the hole before and the tail after
	check(t, a)
	s = a.Stats()
	if s.InactiveSplit.All.Current != 0 || s.Allocation.All.Current != 0 {
		t.Fatalf("after freeing all: %+v", s.InactiveSplit.All)
	}
	if total, rel := a.SegmentCount(); total != 1 || rel != 1 {
		t.Fatalf("segments %d, releasable %d; want one whole free segment", total, rel)
	}
	if n, err := a.EmptyCache(); err != nil || n != 2*miB {
		t.Fatalf("EmptyCache = %d, %v", n, err)
	}
	if c := d.Calls(); c.Free != 1 {
		t.Fatalf("device frees = %d", c.Free)
	}
}

func TestLargePoolPolicy(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{})
	// 1..10 MiB requests share 20 MiB segments.
	p1 := mustMalloc(t, a, 3*miB, 0)
	p2 := mustMalloc(t, a, 3*miB, 0)
	if p2 != p1+3*miB || d.Calls().Malloc != 1 {
		t.Fatalf("3 MiB requests not packed in one 20 MiB segment")
	}
	// A 16 MiB request does not fit the 14 MiB left: it gets its own
	// 16 MiB segment.
	p3 := mustMalloc(t, a, 16*miB, 0)
	if a.BlockSize(p3) != 16*miB || d.Calls().Malloc != 2 {
		t.Fatalf("16 MiB block size %d, device calls %d", a.BlockSize(p3), d.Calls().Malloc)
	}
	// A large remainder of 1 MiB or less is not split off.
	mustFree(t, a, p3)
	p4 := mustMalloc(t, a, 15*miB+512*kiB, 0)
	if p4 != p3 || a.BlockSize(p4) != 16*miB {
		t.Fatalf("15.5 MiB in a 16 MiB block: ptr %#x size %d", p4, a.BlockSize(p4))
	}
	for _, p := range []uint64{p1, p2, p4} {
		mustFree(t, a, p)
	}
}

func TestStreamsDoNotShareBlocks(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{})
	p := mustMalloc(t, a, 4*kiB, 1)
	mustFree(t, a, p)
	q := mustMalloc(t, a, 4*kiB, 2)
	if d.Calls().Malloc != 2 {
		t.Fatalf("a block freed on stream 1 served stream 2 (device calls %d)", d.Calls().Malloc)
	}
	r := mustMalloc(t, a, 4*kiB, 1)
	if r != p {
		t.Fatalf("stream 1 did not reuse its own block")
	}
	mustFree(t, a, q)
	mustFree(t, a, r)
}

func TestMaxSplitSize(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{MaxSplitSize: 40 * miB})
	big := mustMalloc(t, a, 100*miB, 0)
	mustFree(t, a, big)
	// A normal request must not carve the oversize block.
	small := mustMalloc(t, a, 5*miB, 0)
	s := a.Stats()
	if s.Segment.All.Current != 2 {
		t.Fatalf("segments = %d, want 2 (oversize block kept whole)", s.Segment.All.Current)
	}
	if s.OversizeSegments.Current != 1 || s.MaxSplitSize != 40*miB {
		t.Fatalf("oversize segments %d, max split %d", s.OversizeSegments.Current, s.MaxSplitSize)
	}
	// An oversize request reuses it when the waste is under 20 MiB.
	big2 := mustMalloc(t, a, 90*miB, 0)
	if big2 != big {
		t.Fatalf("90 MiB request did not reuse the 100 MiB oversize block")
	}
	if s := a.Stats(); s.OversizeAllocations.Current != 1 {
		t.Fatalf("oversize allocations %d", s.OversizeAllocations.Current)
	}
	mustFree(t, a, big2)
	// But a 60 MiB request would waste 40 MiB: new segment.
	big3 := mustMalloc(t, a, 60*miB, 0)
	if big3 == big {
		t.Fatalf("60 MiB request took the 100 MiB oversize block")
	}
	mustFree(t, a, big3)
	mustFree(t, a, small)
}

func TestSizeZero(t *testing.T) {
	a, d := newAlloc(t, giB, alloc.Config{})
	p, err := a.Malloc(0, 0)
	if p != 0 || err != nil || d.Calls().Malloc != 0 {
		t.Fatalf("Malloc(0) = %#x, %v", p, err)
	}
	if err := a.Free(0); err != nil {
		t.Fatal(err)
	}
}
