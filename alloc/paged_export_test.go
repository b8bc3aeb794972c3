package alloc

// Test access to the page-mapped mode's internals.

// countMappedLocked recounts the bytes of mapped pages in ar's page table.
func (a *Allocator) countMappedLocked(ar *arena) uint64 {
	var n uint64
	for _, p := range ar.pages {
		if p.ok {
			n += a.pg.gran
		}
	}
	return n
}

// checkPagedLocked checks the invariants of the page-mapped mode (paged.go):
// unmapped blocks are page-aligned and map nothing, every page that another
// block touches is mapped, the mapped count is right, no physical page is
// mapped at two places, the unmapped lists hold exactly the unmapped blocks.
func (a *Allocator) checkPagedLocked(fail func(format string, args ...any)) {
	g := a.pg.gran
	handles := map[PhysHandle]uint64{}
	for _, ar := range a.pg.arenas {
		seg := ar.seg
		if seg.arena != ar {
			fail("arena %#x: its segment points elsewhere", seg.addr)
		}
		if a.segmentAtLocked(seg.addr) != seg {
			fail("arena %#x: not among the segments", seg.addr)
		}
		if mapped := a.countMappedLocked(ar); mapped != ar.mapped {
			fail("arena %#x: %d bytes mapped, count says %d", seg.addr, mapped, ar.mapped)
		}
		mappedAt := func(addr uint64) bool {
			i := int((addr - seg.addr) / g)
			return i < len(ar.pages) && ar.pages[i].ok
		}
		for i, p := range ar.pages {
			if !p.ok {
				continue
			}
			at := seg.addr + uint64(i)*g
			if prev, dup := handles[p.h]; dup {
				fail("physical handle %d is mapped at %#x and at %#x", p.h, prev, at)
			}
			handles[p.h] = at
		}
		inList := map[*block]bool{}
		for u := ar.unmapped; u != nil; u = u.right {
			if inList[u] {
				fail("arena %#x: unmapped list loops at %#x", seg.addr, u.addr)
				break
			}
			inList[u] = true
			if u.right != nil && u.right.left != u {
				fail("arena %#x: unmapped list links broken at %#x", seg.addr, u.addr)
			}
		}
		unmapped := 0
		for b := seg.head; b != nil; b = b.next {
			if b.unmapped {
				unmapped++
				if b.state != stateFree {
					fail("block %#x: unmapped but %v", b.addr, b.state)
				}
				if b.addr%g != 0 || b.size%g != 0 {
					fail("unmapped block %#x+%d is not page-aligned", b.addr, b.size)
				}
				if !inList[b] {
					fail("unmapped block %#x is not in its arena's list", b.addr)
				}
				for at := b.addr; at < b.addr+b.size && int((at-seg.addr)/g) < len(ar.pages); at += g {
					if mappedAt(at) {
						fail("unmapped block %#x+%d: page %#x is mapped", b.addr, b.size, at)
						break
					}
				}
				continue
			}
			for at := b.addr / g * g; at < b.addr+b.size; at += g {
				if !mappedAt(at) {
					fail("%v block %#x+%d: page %#x is not mapped", b.state, b.addr, b.size, at)
					break
				}
			}
		}
		if unmapped != len(inList) {
			fail("arena %#x: %d unmapped blocks, %d in the list", seg.addr, unmapped, len(inList))
		}
	}
}

// PageGranularity returns the page size of the page-mapped mode (0 when off).
func (a *Allocator) PageGranularity() uint64 {
	if a.pg == nil {
		return 0
	}
	return a.pg.gran
}

// IdlePages returns the number of mapped pages that no block uses.
func (a *Allocator) IdlePages() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pg == nil {
		return 0
	}
	_, n := a.idleRangesLocked(0, 0)
	return n
}

// ArenaCount returns the number of page-mapped arenas.
func (a *Allocator) ArenaCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pg == nil {
		return 0
	}
	return len(a.pg.arenas)
}
