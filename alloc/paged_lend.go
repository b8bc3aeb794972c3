package alloc

// Lending idle pages (page-mapped mode). A chunk is mapped whole and the
// driver unmaps only whole mappings, so a chunk that one live block still
// touches cannot move, however many of its pages are idle; before lending,
// those pages served requests only where they were, and a large request
// that no free run fitted created new memory beside them. A physical
// allocation may be mapped at more than one address, from any page of it
// (cuMemMap's offset), so a growth that has moved every idle chunk it can
// maps a run of such idle pages a second time, at the place it needs them:
// an alias. The memory is the same, so the reserve does not grow; an alias
// costs one MemMap, and one MemUnmap when it goes, against the MemCreate
// and MemMap of new memory and the MemUnmap and MemRelease of giving it back.
//
// While a run is lent, a block in state stateLent stands for it at home:
// in no free index, merged with nothing, counted as neither active nor
// inactive, so nothing is placed there until the run comes back. Exactly one
// address of a lent page is usable at a time. A chunk with aliases is never
// idle as a whole (its lent block is not free), so it is neither moved nor
// released. An alias whose pages are all idle is an idle chunk like any
// other: a growth may move it (it keeps its handle and offset). When the
// release policy or EmptyCache wants memory back, the aliases of a chunk
// that would then be idle as a whole are unmapped and their runs return
// home, and the chunk is released as before; an alias is never released
// itself, since its handle belongs to its home chunk.
//
// The pages are idle at home, but the stream that last used them may
// still have work queued there: a run is lent to another stream only after
// waiting for that one, as a move does. An alias is unmapped only after its
// own stream was waited for (cuMemUnmap does not wait for work in flight).

import "sort"

// lendPages turns lending on; tests and experiments turn it off to measure
// the difference.
var lendPages = true

// lendRun is a run [lo, hi) of whole idle pages of chunk c, inside the
// mapped free block b, that can be lent.
type lendRun struct {
	b      *block
	c      *chunk
	lo, hi uint64
}

// lendRunsLocked lists the runs of idle pages that can be lent, leaving out
// [exLo, exHi) and the chunks in skip, largest first (then the highest).
// Only chunks that own their handle lend: the pages of an alias go home
// before they go elsewhere.
func (a *Allocator) lendRunsLocked(exLo, exHi uint64, skip []idleChunk) []lendRun {
	g := a.pg.gran
	ranges, _ := a.idleRangesLocked(exLo, exHi)
	var out []lendRun
	for _, r := range ranges {
		ar := r.b.seg.arena
		for at := r.lo; at < r.hi; {
			c := ar.at(at, g)
			if c == nil { // cannot happen: the pages of a mapped free block are mapped
				at += g
				continue
			}
			lo, hi := max(at, c.addr), min(r.hi, c.end())
			if c.home == nil && !skipped(skip, c) {
				out = append(out, lendRun{r.b, c, lo, hi})
			}
			at = c.end()
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if ni, nj := out[i].hi-out[i].lo, out[j].hi-out[j].lo; ni != nj {
			return ni > nj
		}
		return out[i].lo > out[j].lo
	})
	return out
}

func skipped(skip []idleChunk, c *chunk) bool {
	for _, s := range skip {
		if s.c == c {
			return true
		}
	}
	return false
}

// lendableLocked returns the bytes of idle pages that a growth could lend,
// once the chunks in picks have moved.
func (a *Allocator) lendableLocked(exLo, exHi uint64, picks []idleChunk) uint64 {
	var n uint64
	for _, r := range a.lendRunsLocked(exLo, exHi, picks) {
		n += r.hi - r.lo
	}
	return n
}

// lendLocked lends want bytes of idle pages (whole pages, no more than
// lendableLocked said once the picks moved) to a growth on stream s, the
// largest runs first, and returns the aliases, not yet mapped. It waits
// for the other streams whose pages it lends. On error the aliases made so
// far are returned with it.
func (a *Allocator) lendLocked(exLo, exHi, want uint64, s Stream) ([]*chunk, error) {
	var take []lendRun
	var n uint64
	for _, r := range a.lendRunsLocked(exLo, exHi, nil) {
		if n >= want {
			break
		}
		r.hi = r.lo + min(r.hi-r.lo, want-n)
		take = append(take, r)
		n += r.hi - r.lo
	}
	// Highest first: cutting a run out of the top of a free block leaves
	// the block's struct in place for the part below.
	sort.Slice(take, func(i, j int) bool { return take[i].lo > take[j].lo })
	var out []*chunk
	for _, r := range take {
		if r.b.stream != s {
			if err := a.syncStreamLocked(r.b.stream); err != nil {
				return out, err
			}
		}
		out = append(out, a.lendRunLocked(r))
	}
	return out, nil
}

// lendRunLocked cuts run r out of its free block into a lent block and
// returns the alias that will map it.
func (a *Allocator) lendRunLocked(r lendRun) *chunk {
	b := r.b
	a.detachFreeLocked(b)
	mid := b
	if r.lo > b.addr {
		mid = a.splitBlock(b, r.lo)
	}
	var right *block
	if r.hi < mid.addr+mid.size {
		right = a.splitBlock(mid, r.hi)
	}
	mid.state = stateLent
	if mid != b {
		a.attachFreeLocked(b)
	}
	if right != nil {
		a.attachFreeLocked(right)
	}
	n := r.hi - r.lo
	b.seg.arena.lent += n
	r.c.aliases++
	a.st.numPageLends++
	return &chunk{h: r.c.h, size: n, off: r.c.off + r.lo - r.c.addr, home: r.c, lent: mid}
}

// unlendLocked gives the run of an unmapped alias back to its home: the
// lent block becomes free there again.
func (a *Allocator) unlendLocked(al *chunk) {
	lb := al.lent
	lb.seg.arena.lent -= al.size
	al.home.aliases--
	lb.state = stateFree
	a.attachFreeLocked(lb)
}

// returnAliasesLocked unmaps the idle aliases (among cands, the idle
// chunks) of every chunk that is idle as a whole once they return, and
// gives their runs back, so that the release policy can release the chunk.
// It returns how many aliases it returned.
func (a *Allocator) returnAliasesLocked(cands []idleChunk) (int, error) {
	idle := map[*chunk]int{} // home → its idle aliases
	for _, c := range cands {
		if h := c.c.home; h != nil {
			idle[h]++
		}
	}
	if len(idle) == 0 {
		return 0, nil
	}
	ok := map[*chunk]bool{}
	var picks []idleChunk
	for _, c := range cands {
		h := c.c.home
		if h == nil || idle[h] != h.aliases {
			continue
		}
		v, seen := ok[h]
		if !seen {
			v = homeIdle(h, c.c.lent)
			ok[h] = v
		}
		if v {
			picks = append(picks, c)
		}
	}
	// Unmap them all before any run returns: a run that returns merges
	// with free blocks at home, which the blocks of picks may be.
	hand, err := a.unmapChunksLocked(picks)
	for _, c := range hand {
		a.unlendLocked(c)
	}
	return len(hand), err
}

// homeIdle reports whether chunk h holds nothing but idle and lent pages;
// lb is one of its lent blocks.
func homeIdle(h *chunk, lb *block) bool {
	quiet := func(b *block) bool {
		return b.state == stateLent || b.state == stateFree && !b.unmapped
	}
	for b := lb; b != nil && b.addr+b.size > h.addr; b = b.prev {
		if !quiet(b) {
			return false
		}
	}
	for b := lb.next; b != nil && b.addr < h.end(); b = b.next {
		if !quiet(b) {
			return false
		}
	}
	return true
}

// ownersOnly drops the aliases from cands, keeping the chunks that own
// their handle: those that can be released.
func ownersOnly(cands []idleChunk) []idleChunk {
	out := cands[:0]
	for _, c := range cands {
		if c.c.home == nil {
			out = append(out, c)
		}
	}
	return out
}
