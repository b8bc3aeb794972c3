package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// newDev returns a simulated device of the given capacity.
func newDev(t testing.TB, capacity uint64) *sim.Device {
	t.Helper()
	d, err := sim.New(sim.Config{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// newAlloc returns an allocator over a fresh simulated device; it checks
// the invariants when the test ends.
func newAlloc(t testing.TB, capacity uint64, cfg alloc.Config) (*alloc.Allocator, *sim.Device) {
	t.Helper()
	d := newDev(t, capacity)
	a, err := alloc.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.CheckInvariants(); err != nil {
			t.Errorf("invariants at the end: %v", err)
		}
	})
	return a, d
}

func mustMalloc(t testing.TB, a *alloc.Allocator, size uint64, s alloc.Stream) uint64 {
	t.Helper()
	p, err := a.Malloc(size, s)
	if err != nil {
		t.Fatalf("Malloc(%d, %d): %v", size, s, err)
	}
	return p
}

func mustFree(t testing.TB, a *alloc.Allocator, p uint64) {
	t.Helper()
	if err := a.Free(p); err != nil {
		t.Fatalf("Free(%#x): %v", p, err)
	}
}

func check(t testing.TB, a *alloc.Allocator) {
	t.Helper()
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
