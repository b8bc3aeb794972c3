package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

func TestClassOf(t *testing.T) {
	tests := []struct {
		size  uint64
		class int
	}{
		{512, 1}, {1024, 2}, {63 * 512, 63}, {64 * 512, 64}, {65 * 512, 65},
		{127 * 512, 127}, {128 * 512, 128}, {130 * 512, 129}, // from 64 KiB, classes span 1 KiB
		{1 << 63, alloc.NumClasses - 64},
	}
	for _, tt := range tests {
		if got := alloc.ClassOf(tt.size); got != tt.class {
			t.Errorf("ClassOf(%d) = %d, want %d", tt.size, got, tt.class)
		}
	}
	// Classes never decrease with size, and stay in range.
	prev := 0
	for size := uint64(512); size < 1<<40; size += size/37/512*512 + 512 {
		c := alloc.ClassOf(size)
		if c < prev || c >= alloc.NumClasses {
			t.Fatalf("ClassOf(%d) = %d after %d", size, c, prev)
		}
		prev = c
	}
	if c := alloc.ClassOf(^uint64(0) &^ 511); c >= alloc.NumClasses {
		t.Fatalf("largest size maps to class %d of %d", c, alloc.NumClasses)
	}
}

// TestBestFitPrefersSmallest checks that the search returns the smallest
// fitting block even when a larger one sits in the same class.
func TestBestFitPrefersSmallest(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	// Carve holes of different sizes in one 20 MiB segment, separated by
	// live blocks so they cannot merge.
	var holes, keep []uint64
	for _, sz := range []uint64{3 * miB, 1*miB + 600*kiB, 2 * miB, 1*miB + 520*kiB} {
		holes = append(holes, mustMalloc(t, a, sz, 0))
		keep = append(keep, mustMalloc(t, a, 1*miB+1, 0))
	}
	for _, p := range holes {
		mustFree(t, a, p)
	}
	check(t, a)
	got := mustMalloc(t, a, 1*miB+500*kiB, 0)
	if got != holes[3] {
		t.Fatalf("1.49 MiB request got %#x, want the 1.51 MiB hole %#x", got, holes[3])
	}
	got2 := mustMalloc(t, a, 1*miB+590*kiB, 0)
	if got2 != holes[1] {
		t.Fatalf("1.58 MiB request got %#x, want the 1.59 MiB hole %#x", got2, holes[1])
	}
	for _, p := range append(keep, got, got2) {
		mustFree(t, a, p)
	}
}
