package sim

import (
	"bytes"
	"testing"

	"github.com/vramhq/vram/alloc"
)

// TestLagCopies: with events held and a lag of k, a stream runs its oldest
// copy whenever more than k are queued, and exactly the events recorded
// before its oldest copy still queued complete; other streams are left
// alone, and CompleteStream runs the rest.
func TestLagCopies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lag    int
		copies int
		// after queueing the copies (each followed by an event): how many
		// ran, and how many of the events completed
		wantRan, wantDone int
	}{
		{"no lag: all held", 0, 5, 0, 0},
		{"lag 1", 1, 5, 4, 4},
		{"lag 2", 2, 5, 3, 3},
		{"lag above the copies", 8, 5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDev(t, Config{HoldEvents: true})
			d.LagCopies(tc.lag)
			s, other := d.NewStream(), d.NewStream()
			addr, err := d.Malloc(uint64(tc.copies) * kib)
			must(t, err)
			host, err := d.HostAlloc(uint64(tc.copies) * kib)
			must(t, err)
			for i := range host {
				host[i] = byte(i/kib + 1)
			}
			early, _ := d.EventCreate() // recorded before any copy
			must(t, d.EventRecord(early, s))
			elsewhere, _ := d.EventCreate()
			must(t, d.EventRecord(elsewhere, other))
			var evs []alloc.Event
			for i := range tc.copies {
				off := uint64(i) * kib
				must(t, d.CopyHtoDAsync(addr+off, host[off:off+kib], s))
				ev, _ := d.EventCreate()
				must(t, d.EventRecord(ev, s))
				evs = append(evs, ev)
			}
			if n := d.QueuedCopies(); n != tc.copies-tc.wantRan {
				t.Errorf("%d copies queued, want %d", n, tc.copies-tc.wantRan)
			}
			got := make([]byte, tc.copies*kib)
			must(t, d.CopyDtoH(got, addr))
			for i := range tc.copies {
				ran := got[i*kib] == byte(i+1)
				if ran != (i < tc.wantRan) {
					t.Errorf("copy %d ran: %v, want %v", i, ran, i < tc.wantRan)
				}
				done, err := d.EventQuery(evs[i])
				must(t, err)
				if done != (i < tc.wantDone) {
					t.Errorf("event after copy %d done: %v, want %v", i, done, i < tc.wantDone)
				}
			}
			if done, _ := d.EventQuery(early); done != (tc.wantRan > 0) {
				t.Errorf("event before the first copy done: %v, want %v", done, tc.wantRan > 0)
			}
			if done, _ := d.EventQuery(elsewhere); done {
				t.Error("an event on another stream completed")
			}
			d.CompleteStream(s)
			must(t, d.CopyDtoH(got, addr))
			if !bytes.Equal(got, host) {
				t.Error("CompleteStream did not run the copies left")
			}
			if n := d.PendingEvents(); n != 1 {
				t.Errorf("%d events pending, want only the other stream's", n)
			}
		})
	}
}
