package sim

import "sort"

// vaSpace hands out virtual address ranges first fit from an address-ordered
// list of free extents, coalescing on release. It is not safe for concurrent
// use; the Device's mutex guards it.
type vaSpace struct {
	free []extent // sorted by start, non-overlapping, non-adjacent
}

type extent struct{ start, end uint64 } // [start, end)

func newVASpace(base, size uint64) *vaSpace {
	return &vaSpace{free: []extent{{base, base + size}}}
}

// alloc returns the lowest address aligned to align (a power of two) that has
// size free bytes, or ok=false when no extent fits.
func (s *vaSpace) alloc(size, align uint64) (addr uint64, ok bool) {
	for i, e := range s.free {
		a := alignUp(e.start, align)
		if a < e.start || a > e.end || e.end-a < size {
			continue
		}
		// Carve [a, a+size) out of e: up to two pieces remain.
		var rest []extent
		if a > e.start {
			rest = append(rest, extent{e.start, a})
		}
		if a+size < e.end {
			rest = append(rest, extent{a + size, e.end})
		}
		s.free = append(s.free[:i], append(rest, s.free[i+1:]...)...)
		return a, true
	}
	return 0, false
}

// release returns [addr, addr+size) to the free list. The caller guarantees
// that the range was allocated.
func (s *vaSpace) release(addr, size uint64) {
	end := addr + size
	i := sort.Search(len(s.free), func(i int) bool { return s.free[i].start >= end })
	// i is the first extent after the range; i-1 may end exactly at addr.
	mergePrev := i > 0 && s.free[i-1].end == addr
	mergeNext := i < len(s.free) && s.free[i].start == end
	switch {
	case mergePrev && mergeNext:
		s.free[i-1].end = s.free[i].end
		s.free = append(s.free[:i], s.free[i+1:]...)
	case mergePrev:
		s.free[i-1].end = end
	case mergeNext:
		s.free[i].start = addr
	default:
		s.free = append(s.free, extent{})
		copy(s.free[i+1:], s.free[i:])
		s.free[i] = extent{addr, end}
	}
}

func alignUp(x, align uint64) uint64 { return (x + align - 1) &^ (align - 1) }
