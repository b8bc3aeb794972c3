//go:build gpu

package alloc_test

// The page-mapped mode's stream markers on the real driver: an idle chunk
// freed before a completed marker moves without cuStreamSynchronize, one
// freed after it (or with no marker) only after one, and the blocks that
// stay keep their contents through the move (cuMemUnmap and cuMemMap of
// real chunks). The simulated-device test of the same rule is
// TestPagedMovesSettledChunksWithoutWaiting.

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

func TestGPUPagedSettledMove(t *testing.T) {
	d := openGPU(t)
	needDriver(t, d)              // the page-mapped mode needs cudadev's virtual-memory calls
	defer alloc.SetSizeShare(0)() // 20 MiB chunks, one per block
	cases := []struct {
		name   string
		marker bool
		waits  int64
	}{
		{"no marker", false, 1},
		{"a completed marker", true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := alloc.New(d.cu, alloc.Config{PageMapped: true, PageFine: true})
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
