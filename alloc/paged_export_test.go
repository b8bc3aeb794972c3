package alloc

// Test access to the page-mapped mode's internals.

// countMappedLocked recounts the bytes of mapped pages in ar's page table.
func (a *Allocator) countMappedLocked(ar *arena) uint64 {
	var n uint64
	for _, c := range ar.pages {
		if c != nil {
			n += a.pg.gran
		}
	}
	return n
}

// checkPagedLocked checks the invariants of the page-mapped mode (paged.go):
// unmapped blocks are page-aligned and map nothing, every page that another
// block touches is mapped, the mapped count is right, every chunk is
// mapped whole at one place (its pages in a row, pointing at it, its
// size a multiple of the page), no physical handle is mapped twice, the
// unmapped lists hold exactly the unmapped blocks.
func (a *Allocator) checkPagedLocked(fail func(format string, args ...any)) {
	g := a.pg.gran
	handles := map[PhysHandle]*chunk{}
	retiring := map[*block]bool{}
	chunks := map[*chunk]bool{}
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
		mappedAt := func(addr uint64) bool { return ar.at(addr, g) != nil }
		for i, c := range ar.pages {
			if c == nil {
				continue
			}
			at := seg.addr + uint64(i)*g
			if at == c.addr {
				if c.size == 0 || c.size%g != 0 || c.end() > ar.end() {
					fail("chunk %#x+%d: not whole pages inside its arena", c.addr, c.size)
				}
				if prev, dup := handles[c.h]; dup {
					fail("physical handle %d is mapped at %#x and at %#x", c.h, prev.addr, c.addr)
				}
				handles[c.h] = c
				chunks[c] = true
			}
			if at < c.addr || at >= c.end() {
				fail("page %#x points at chunk %#x+%d, which does not cover it", at, c.addr, c.size)
			}
			if at == c.addr {
				for x := c.addr; x < c.end(); x += g {
					if ar.at(x, g) != c {
						fail("chunk %#x+%d: page %#x is not mapped to it", c.addr, c.size, x)
						break
					}
				}
			}
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
			if b.state == stateRetiring {
				retiring[b] = true
				if b.addr%g != 0 || b.size%g != 0 {
					fail("retiring block %#x+%d is not page-aligned", b.addr, b.size)
				}
				for at := b.addr; at < b.addr+b.size; at += g {
					if mappedAt(at) {
						fail("retiring block %#x+%d: page %#x is in the page table", b.addr, b.size, at)
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
	// Every retiring block has exactly one ghost, whose chunk counts it.
	ghosts := map[*chunk]int{}
	for _, gh := range a.pg.ghosts {
		if !retiring[gh.b] {
			fail("ghost at %#x: its block is not a retiring block of an arena", gh.b.addr)
		}
		delete(retiring, gh.b)
		if !gh.unmapped {
			ghosts[gh.c]++
		}
		if gh.b.size != gh.c.size {
			fail("ghost at %#x: %d bytes, its chunk has %d", gh.b.addr, gh.b.size, gh.c.size)
		}
	}
	for b := range retiring {
		fail("retiring block %#x has no ghost", b.addr)
	}
	for c := range chunks {
		if c.ghosts != ghosts[c] {
			fail("chunk %#x: %d old mappings, it counts %d", c.addr, ghosts[c], c.ghosts)
		}
		delete(ghosts, c)
	}
	for c := range ghosts {
		fail("a ghost's chunk (%#x) is not mapped anywhere", c.addr)
	}
}

// GhostBytes returns the bytes of the old mappings of moved chunks not yet
// unmapped (paged.go, ghost).
func (a *Allocator) GhostBytes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pg == nil {
		return 0
	}
	var n uint64
	for _, gh := range a.pg.ghosts {
		if !gh.unmapped {
			n += gh.b.size
		}
	}
	return n
}

// PageGranularity returns the page size of the page-mapped mode (0 when off).
func (a *Allocator) PageGranularity() uint64 {
	if a.pg == nil {
		return 0
	}
	return a.pg.gran
}

// IdleChunkBytes returns the bytes of the chunks all of whose pages are
// idle: what EmptyCache can release.
func (a *Allocator) IdleChunkBytes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pg == nil {
		return 0
	}
	cs, _ := a.idleChunksLocked(0, 0)
	var n uint64
	for _, c := range cs {
		n += c.c.size
	}
	return n
}

// SetGrowChunkBytes sets the least bytes one page-mapped growth creates,
// for allocators created afterwards, and returns a function that restores
// the previous value. Not safe while other tests create allocators.
func SetGrowChunkBytes(n uint64) (restore func()) {
	old := growChunkBytes
	growChunkBytes = n
	return func() { growChunkBytes = old }
}

// SetMaxChunkBytes sets the most bytes of one physical allocation in
// page-mapped mode, for allocators created afterwards, and returns a
// function that restores the previous value.
func SetMaxChunkBytes(n uint64) (restore func()) {
	old := maxChunkBytes
	maxChunkBytes = n
	return func() { maxChunkBytes = old }
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

// SetChunkShare sets chunkShare (0: no bound under pressure) for
// allocators created afterwards, and for the bound an allocator learns
// when the device runs out, and returns a function that restores the
// previous value. Not safe while other tests create allocators.
func SetChunkShare(n uint64) (restore func()) {
	old := chunkShare
	chunkShare = n
	return func() { chunkShare = old }
}

// SetSizeShare sets sizeShare (0: chunks not bounded by the job's size)
// and returns a function that restores the previous value. Not safe while
// other tests create allocators.
func SetSizeShare(n uint64) (restore func()) {
	old := sizeShare
	sizeShare = n
	return func() { sizeShare = old }
}

// MaxChunkBytes returns the most bytes one new physical chunk may hold
// now (0 when the page-mapped mode is off).
func (a *Allocator) MaxChunkBytes() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pg == nil {
		return 0
	}
	return a.pg.maxChunk
}

// SetCoarse sets the coarse regime's most bytes of one chunk and its grow
// slack for the duration of a test.
func SetCoarse(maxChunk uint64, slack float64) (restore func()) {
	oldMax, oldSlack := coarseMaxChunkBytes, coarseGrowSlack
	coarseMaxChunkBytes, coarseGrowSlack = maxChunk, slack
	return func() { coarseMaxChunkBytes, coarseGrowSlack = oldMax, oldSlack }
}

// FineRegime reports whether the page-mapped mode is in its fine regime.
func (a *Allocator) FineRegime() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pg != nil && a.pg.fine
}
