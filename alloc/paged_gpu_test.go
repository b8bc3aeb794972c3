//go:build gpu

package alloc_test

// The page-mapped mode's stream markers on the real driver: an idle chunk
// freed before a completed marker moves without cuStreamSynchronize; one
// freed after it (or with no marker) moves with page_defer_unmap:false only
// after one, and by default without one, mapped at its new address while
// its old mapping stays (one physical allocation mapped twice: what the
// new block holds reads back at the old address too, until the old
// mapping goes). The blocks that stay keep their contents through the
// move (cuMemUnmap and cuMemMap of real chunks). The simulated-device
// tests of the same rules are TestPagedMovesSettledChunksWithoutWaiting
// and TestPagedMoveLeavesGhost.

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

func TestGPUPagedSettledMove(t *testing.T) {
	d := openGPU(t)
	needDriver(t, d)              // the page-mapped mode needs cudadev's virtual-memory calls
	defer alloc.SetSizeShare(0)() // 20 MiB chunks, one per block
	cases := []struct {
		name        string
		marker      bool
		unmapAtMove bool
		waits       int64
	}{
		{"no marker, page_defer_unmap:false", false, true, 1},
		{"no marker", false, false, 0},
		{"a completed marker", true, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := alloc.New(d.cu, alloc.Config{PageMapped: true, PageFine: true, PageUnmapAtMove: c.unmapAtMove})
			if err != nil {
				t.Fatal(err)
			}
			s := d.newStream(t)
			var ps [4]uint64
			for i := range ps {
				ps[i] = mustMalloc(t, a, 20*miB, s)
				fill(t, d.cu, ps[i], 20*miB, byte(i))
			}
			mustFree(t, a, ps[0])
			mustFree(t, a, ps[2])
			if c.marker {
				a.RecordMarkers()
				if err := d.cu.SynchronizeStream(s); err != nil {
					t.Fatal(err)
				}
			}
			w0, r0 := a.Stats().NumStreamSyncs, a.Stats().ReservedBytes.All.Current
			p := mustMalloc(t, a, 40*miB, s) // two 20 MiB holes, none fits
			st := a.Stats()
			if got := st.NumStreamSyncs - w0; got != c.waits {
				t.Errorf("%d stream waits, want %d", got, c.waits)
			}
			if st.ReservedBytes.All.Current != r0 {
				t.Errorf("reserved went from %d to %d MiB: the idle chunks should have moved", r0/miB, st.ReservedBytes.All.Current/miB)
			}
			t.Logf("num_mem_unmap %d, num_stream_syncs %d, stream_sync_ns %d", st.NumMemUnmap, st.NumStreamSyncs, st.StreamSyncNanos)
			fill(t, d.cu, p, 40*miB, 9)
			same(t, d.cu, ps[1], 20*miB, 1)
			same(t, d.cu, ps[3], 20*miB, 3)
			same(t, d.cu, p, 40*miB, 9)
			if ghosts := a.GhostBytes(); !c.marker && !c.unmapAtMove {
				// Both holes' chunks moved into p and stay mapped where
				// they were: the old addresses read p's contents.
				if ghosts != 40*miB {
					t.Errorf("%d MiB of old mappings, want 40", ghosts/miB)
				}
				same(t, d.cu, ps[0], 20*miB, 9)
				same(t, d.cu, ps[2], 20*miB, 9)
			} else if ghosts != 0 {
				t.Errorf("%d MiB of old mappings, want none", ghosts/miB)
			}
			for _, q := range []uint64{p, ps[1], ps[3]} {
				mustFree(t, a, q)
			}
			if err := a.CheckInvariants(); err != nil {
				t.Error(err)
			}
			if err := a.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}
