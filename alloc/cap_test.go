package alloc_test

import (
	"errors"
	"testing"

	"github.com/vramhq/vram/alloc"
)

// TestSetCap: a cap set after New (torch.cuda.set_per_process_memory_fraction)
// bounds growth from then on, in both modes, and can be raised again.
func TestSetCap(t *testing.T) {
	for _, conf := range []alloc.Config{{}, {PageMapped: true}} {
		a, _ := newAlloc(t, 256*miB, conf)
		if a.Cap() != 256*miB {
			t.Fatalf("page_mapped %v: cap %d at New", conf.PageMapped, a.Cap())
		}
		if err := a.SetCap(0, 0.25); err != nil {
			t.Fatal(err)
		}
		if a.Cap() != 64*miB {
			t.Fatalf("page_mapped %v: cap %d after SetCap(0, 0.25)", conf.PageMapped, a.Cap())
		}
		_, err := a.Malloc(80*miB, 0)
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Cap != 64*miB {
			t.Fatalf("page_mapped %v: 80 MiB under a 64 MiB cap: %v", conf.PageMapped, err)
		}
		if err := a.SetCap(128*miB, 0.75); err != nil {
			t.Fatal(err)
		}
		if a.Cap() != 128*miB {
			t.Fatalf("page_mapped %v: cap %d after SetCap(128 MiB, 0.75)", conf.PageMapped, a.Cap())
		}
		p := mustMalloc(t, a, 80*miB, 0)
		mustFree(t, a, p)
		check(t, a)
		if err := a.SetCap(0, 1.5); err == nil {
			t.Fatal("fraction 1.5 accepted")
		}
	}
}

func TestTraceEvents(t *testing.T) {
	a, _ := newAlloc(t, 64*miB, alloc.Config{TraceEvents: 8, MaxBytes: 16 * miB})
	if _, err := (func() ([]alloc.TraceEvent, error) {
		b, _ := newAlloc(t, 64*miB, alloc.Config{})
		return b.TraceEvents()
	})(); err == nil {
		t.Fatal("TraceEvents without trace_events: no error")
	}
	p := mustMalloc(t, a, 1000, 7)
	mustFree(t, a, p)
	if _, err := a.Malloc(32*miB, 0); err == nil {
		t.Fatal("32 MiB under a 16 MiB cap")
	}
	ev, err := a.TraceEvents()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		action string
		ptr    uint64
		size   uint64
	}{{"alloc", p, 1000}, {"free", p, 1000}, {"alloc_failure", 0, 32 * miB}}
	if len(ev) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(ev), len(want), ev)
	}
	for i, w := range want {
		if ev[i].Action != w.action || ev[i].Ptr != w.ptr || ev[i].Size != w.size {
			t.Errorf("event %d: %+v, want %+v", i, ev[i], w)
		}
		if i > 0 && ev[i].Time.Before(ev[i-1].Time) {
			t.Errorf("event %d before event %d", i, i-1)
		}
	}
	if ev[0].Stream != 7 {
		t.Errorf("stream %d, want 7", ev[0].Stream)
	}
}
