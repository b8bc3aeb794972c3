package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

func TestStatsAndFreeReserve(t *testing.T) {
	a, _ := newAlloc(t, 1<<30, alloc.Config{})
	p1 := mustMalloc(t, a, 3<<20, 0)
	p2 := mustMalloc(t, a, 5<<20, 0)
	if err := a.Free(p1); err != nil {
		t.Fatal(err)
	}
	st, fr := a.StatsAndFreeReserve()
	// One 20 MiB segment: 3 MiB free in front, 5 MiB allocated, 12 MiB free behind.
	if st.ReservedBytes.All.Current != 20<<20 || fr.Bytes != 15<<20 || fr.Largest != 12<<20 {
		t.Fatalf("reserved %d, free reserve %+v; want 20 MiB reserved, 15 MiB free, largest 12 MiB", st.ReservedBytes.All.Current, fr)
	}
	if err := a.Free(p2); err != nil {
		t.Fatal(err)
	}
	if _, fr = a.StatsAndFreeReserve(); fr.Bytes != 20<<20 || fr.Largest != 20<<20 {
		t.Fatalf("after freeing all: %+v", fr)
	}
}
