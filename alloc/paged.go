package alloc

// The page-mapped mode (page_mapped:true): large-pool memory is physical
// chunks (one MemCreate of whole pages each) mapped into reserved address
// ranges, and idle chunks move to where they are needed. See doc.go
// ("Page-mapped mode") for an overview; this file holds the arenas, the
// chunks, placement, moves, the release policy and the teardown.

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Defaults of the release policy and of growth.
const (
	defaultPageSlack  = 0.03 // page_release_slack
	defaultPageWindow = 4096 // page_release_window, allocations
	arenaVAFactor     = 4    // an arena reserves this many times the device's memory
	minTrimPages      = 4    // a trim releases at least this many pages, or nothing
)

// growChunkBytes is how far one growth may create ahead of need, rounded
// up to whole pages, when the cap and the free address space allow it and
// the large pool already holds 64 times as much (a small job grows by
// its shortfall only): PyTorch's expandable segments map 20 MiB pages in
// the large pool, so a run of small growths costs no more driver calls
// than theirs. Tests change it to measure the trade-off.
var growChunkBytes uint64 = 20 << 20

// maxChunkBytes is the most one MemCreate creates (rounded up to whole
// pages); a larger growth creates several chunks of this size, mapped in
// a row. Small chunks can be moved and released where large ones would
// stay pinned by a small live block; each costs a MemCreate and a MemMap.
var maxChunkBytes uint64 = 20 << 20

// chunkShare bounds chunks under memory pressure: with a cap, and after
// the device ran out of memory, one new chunk holds at most 1/chunkShare
// of the memory the allocator may hold (rounded to the nearest page, at
// least one page), so that the idle pages a live block pins in its chunk
// cost at most 0.2 % of that memory. The bound holds from the first
// growth, not only near the cap: on the recorded traces the chunks whose
// idle pages decide the smallest capacity are pinned by weights and
// optimizer state made in the job's first hundred allocations, long
// before the cap is near. 20 MiB chunks stay below it from a 10 GiB cap
// up, so only smaller caps pay the extra driver calls (docs/alloc.md).
// 0 turns the bound off (tests measure the difference).
var chunkShare uint64 = 512

// sizeShare bounds chunks by the size of the job: one new chunk holds at
// most 1/sizeShare of the most the large pool has held so far (rounded to
// the nearest page, at least one page, at most maxChunkBytes), so a job
// of a few GiB grows in chunks of a few pages, and one of 5 GiB or more
// in 20 MiB chunks as before. It applies with or without a cap, and to
// every chunk: large requests too, since once such a block is freed its
// pages serve smaller blocks, and the chunks they share are what pins
// memory (on the KV-cache trace, bounding only the small requests' chunks
// left reserved/live at 1.05-1.07 against 1.02). The
// chunks' share of the job stays the same at every size, and so does the
// worst case of the idle pages they pin, at about the same number of
// driver calls per GiB of growth; small jobs, whose chunks of 20 MiB were
// a large fraction of what they held, no longer lose 5-10 % of their
// reserve to chunks pinned by one small live block (docs/alloc.md has the
// traces). 0 turns the bound off.
var sizeShare uint64 = 256

// coarseMaxChunkBytes is the most one MemCreate creates while there is no
// memory pressure (no cap below the device's memory, the device never
// found full): the coarse regime, in which a job grows as PyTorch's
// expandable segments do, in few large steps, and driver calls are as few
// as theirs or fewer (docs/alloc.md, "Two regimes").
var coarseMaxChunkBytes uint64 = 64 << 20

// coarseGrowSlack is how far, in the coarse regime, the large pool's
// reserve may grow above the most it has had active by creating memory
// outright instead of moving idle chunks: a move costs as many driver
// calls as a growth, and a wait for the stream besides.
var coarseGrowSlack = 0.03

// streamSynchronizer is implemented by backends that can wait for the work
// queued on one stream (cuStreamSynchronize). Pages are unmapped only after
// the streams that used them are idle: unlike cuMemFree, cuMemUnmap does not
// wait for work in flight. The simulated device runs no work and needs none.
type streamSynchronizer interface {
	SynchronizeStream(s Stream) error
}

// pagedState is the state of the page-mapped mode, guarded by the
// allocator's mutex.
type pagedState struct {
	vm       VirtualMemory
	sync     streamSynchronizer // nil when the backend has none
	gran     uint64             // page size, from VirtualMemory.Granularity
	vaSize   uint64             // address space per arena
	arenas   []*arena           // in creation order
	slack    float64
	window   uint64 // allocations per release window; 0: no automatic release
	chunk    uint64 // least bytes one growth creates (growChunkBytes in pages)
	maxChunk uint64 // most bytes of one chunk (maxChunkBytes in pages)

	// fine is the regime under memory pressure (a cap below the device's
	// memory, or the device found full): small chunks, bounded by the
	// job's size (sizeShare) and by the memory it may hold (chunkShare),
	// growth close to need, and idle chunks moved before any is created.
	// Otherwise the coarse regime: chunks of up to coarseMaxChunkBytes, 20
	// MiB growth ahead of need, and memory created rather than moved while
	// the reserve stays within coarseGrowSlack of the active peak.
	fine bool
	// deviceFull records that MemCreate once found the device out of
	// memory: the fine regime stays whatever the cap.
	deviceFull bool

	// markers are events recorded on the arenas' streams, each tagged with
	// the free counter (Allocator.frees) when it was recorded; settled
	// holds, per stream, the tag of its newest completed marker. A free
	// block whose freed tag is at most that is settled: the work queued on
	// its stream before it was freed has run, so its pages may be unmapped
	// without waiting for the stream (see settledLocked).
	markers []marker
	settled []streamTag

	// ghosts are the old addresses of chunks moved while their stream
	// could still use them there (see ghost); deferUnmap allows them.
	ghosts     []ghost
	deferUnmap bool

	winStart uint64                // allocation number at the start of the current window
	winPeak  [releaseHorizon]int64 // large-pool active bytes peak of the last windows, this one at winIdx
	winIdx   int
	synced   []Stream // streams synchronised during the current operation
}

// arena is one reserved address range of a stream. Its segment's blocks
// tile the whole range; each free block is either mapped (every page it
// touches is mapped; it is in the pool's free index and counted as
// inactive split) or unmapped (page-aligned, no page mapped, in the
// arena's unmapped list through its left and right fields). Allocated and
// pending blocks are always mapped. Two adjacent free blocks are never of
// the same kind (they are merged).
type arena struct {
	seg      *segment
	pages    []*chunk // page i is [seg.addr+i*gran, +gran); nil or past the end: unmapped
	mapped   uint64   // bytes of mapped pages
	unmapped *block   // head of the unmapped free blocks
}

// chunk is one physical allocation (one MemCreate) of whole pages, mapped
// as a whole at [addr, addr+size) of an arena. The driver maps a physical
// allocation from its start and unmaps only whole mappings (cuMemUnmap
// cannot unmap part of a range that one cuMemMap mapped), so a chunk is
// moved or released only when all of its pages are idle; pages that are
// idle inside a chunk still in use serve requests where they are.
type chunk struct {
	h          PhysHandle
	addr, size uint64
	ghosts     int // old mappings of it not yet unmapped (ghost)
}

func (c *chunk) end() uint64 { return c.addr + c.size }

// idleRange is a run [lo, hi) of whole pages inside one mapped free block:
// memory no block uses, which can be moved or released.
type idleRange struct {
	b      *block
	lo, hi uint64
}

// idleChunk is a chunk all of whose pages are idle, inside free block b;
// settled says that no work queued on b's stream can still use it.
type idleChunk struct {
	c       *chunk
	b       *block
	settled bool
}

// ghost is the old address of a chunk that moved while work queued on its
// stream before its last free there could still be running: rather than
// wait for that work, the chunk was mapped at its new address while the
// old mapping stayed (a physical allocation may be mapped at several
// addresses at once). Only moves within one stream do this, so the
// stream's own order keeps the new block's work after the old block's,
// as it does for any cached block. The old range is the retiring block b,
// which nothing is placed in; once the stream's frees up to b.freed are
// settled (a marker recorded after them completed, or a wait), the old
// mapping is unmapped and b becomes an unmapped free block. The physical
// memory is counted once, at the chunk's new place.
type ghost struct {
	b        *block
	c        *chunk
	unmapped bool // the old mapping is gone; b waits for freeGhostsLocked
}

// marker is an event recorded on stream s when the free counter was at.
type marker struct {
	s  Stream
	ev Event
	at uint64
}

// streamTag is a free counter value of one stream.
type streamTag struct {
	s  Stream
	at uint64
}

// maxMarkers bounds the markers pending on one stream.
const maxMarkers = 4

// waitSlack is how far a growth may take the large pool's reserve above
// its active peak by creating memory, rather than wait for a stream to
// finish with idle pages that it could move instead (see
// createRatherThanWaitLocked).
const waitSlack = 0.01

func (a *Allocator) initPagedLocked() error {
	vm, ok := a.dev.(VirtualMemory)
	if !ok {
		return fmt.Errorf("page_mapped: the device (%T) does not implement alloc.VirtualMemory", a.dev)
	}
	g, err := vm.Granularity()
	if err != nil {
		return fmt.Errorf("page_mapped: reading the page granularity: %w", err)
	}
	if g == 0 || g&(g-1) != 0 || g%minBlockSize != 0 {
		return fmt.Errorf("page_mapped: granularity %d is not a power of two multiple of %d", g, minBlockSize)
	}
	pg := &pagedState{vm: vm, gran: g, slack: a.cfg.PageReleaseSlack, window: defaultPageWindow, deferUnmap: !a.cfg.PageUnmapAtMove}
	pg.sync, _ = a.dev.(streamSynchronizer)
	if pg.slack == 0 {
		pg.slack = defaultPageSlack
	}
	switch {
	case a.cfg.PageReleaseWindow < 0:
		pg.window = 0
	case a.cfg.PageReleaseWindow > 0:
		pg.window = uint64(a.cfg.PageReleaseWindow)
	}
	pg.vaSize = roundUp(max(a.total, g)*arenaVAFactor, g)
	pg.chunk = max(roundUp(growChunkBytes, g), g)
	a.pg = pg
	a.setPagedRegimeLocked(a.wantFineLocked())
	return nil
}

// wantFineLocked says whether the page-mapped mode should run its fine
// regime: when configured so, under a cap below the device's memory, or
// once the device was found full.
func (a *Allocator) wantFineLocked() bool {
	return a.cfg.PageFine || a.capBytes < a.total || a.pg.deviceFull
}

// setPagedRegimeLocked chooses the fine regime (memory pressure) or the
// coarse one and sets the most bytes of one new chunk accordingly.
func (a *Allocator) setPagedRegimeLocked(fine bool) {
	pg := a.pg
	g := pg.gran
	pg.fine = fine
	if !fine {
		pg.maxChunk = max(roundUp(coarseMaxChunkBytes, g), g)
		return
	}
	pg.maxChunk = max(roundUp(maxChunkBytes, g), g)
	if a.capBytes < a.total {
		pg.boundChunks(a.capBytes)
	}
}

// boundChunks lowers the most bytes of one new chunk to 1/chunkShare of
// capacity, the memory the allocator may hold (see chunkShare). It never
// raises it.
func (pg *pagedState) boundChunks(capacity uint64) {
	if chunkShare == 0 {
		return
	}
	g := pg.gran
	c := max((capacity/chunkShare+g/2)/g*g, g)
	pg.maxChunk = min(pg.maxChunk, c)
}

// deviceFullLocked is called when MemCreate found the device out of
// memory (other processes hold the rest, or the device is smaller than
// the cap): the memory this allocator may hold is then what it holds plus
// what the device has left, and new chunks are bounded by that from now
// on. When the device cannot say, the bound stays as it was.
func (a *Allocator) deviceFullLocked() {
	a.pg.deviceFull = true
	if !a.pg.fine {
		a.setPagedRegimeLocked(true)
	}
	free, _, err := a.dev.MemInfo()
	if err != nil {
		return
	}
	a.pg.boundChunks(a.reservedLocked() + free)
}

func (ar *arena) end() uint64 { return ar.seg.addr + ar.seg.size }

// page returns the page-table entry of the page at addr, growing the table.
func (ar *arena) page(addr, g uint64) **chunk {
	i := int((addr - ar.seg.addr) / g)
	if i >= len(ar.pages) {
		ar.pages = append(ar.pages, make([]*chunk, i+1-len(ar.pages))...)
	}
	return &ar.pages[i]
}

// at returns the chunk mapped at addr, or nil.
func (ar *arena) at(addr, g uint64) *chunk {
	if i := int((addr - ar.seg.addr) / g); i < len(ar.pages) {
		return ar.pages[i]
	}
	return nil
}

// setPages points the page-table entries of c's pages at to: c when it
// is mapped, nil when it is unmapped.
func (ar *arena) setPages(c, to *chunk, g uint64) {
	for at := c.addr; at < c.end(); at += g {
		*ar.page(at, g) = to
	}
}

// newArenaLocked reserves an address range for stream s. Its one block is
// free and unmapped.
func (a *Allocator) newArenaLocked(s Stream) (*arena, error) {
	pg := a.pg
	addr, err := pg.vm.AddressReserve(pg.vaSize)
	if err != nil {
		return nil, fmt.Errorf("alloc: reserving %s of address space for stream %#x: %w", formatBytes(pg.vaSize), uint64(s), err)
	}
	seg := &segment{addr: addr, size: pg.vaSize, pool: poolLarge, stream: s, lastUse: a.seq}
	ar := &arena{seg: seg}
	seg.arena = ar
	b := a.newBlock()
	b.addr, b.size, b.stream, b.seg, b.state, b.unmapped = addr, pg.vaSize, s, seg, stateFree, true
	seg.head = b
	ar.pushUnmapped(b)
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr > addr })
	a.segs = append(a.segs, nil)
	copy(a.segs[i+1:], a.segs[i:])
	a.segs[i] = seg
	pg.arenas = append(pg.arenas, ar)
	a.st.inc(statSegment, poolLarge, 1)
	return ar, nil
}

func (ar *arena) pushUnmapped(b *block) {
	b.left, b.right = nil, ar.unmapped
	if ar.unmapped != nil {
		ar.unmapped.left = b
	}
	ar.unmapped = b
}

func (ar *arena) dropUnmapped(b *block) {
	if b.left != nil {
		b.left.right = b.right
	} else {
		ar.unmapped = b.right
	}
	if b.right != nil {
		b.right.left = b.left
	}
	b.left, b.right = nil, nil
}

// detachFreeLocked takes free arena block b out of its container.
func (a *Allocator) detachFreeLocked(b *block) {
	if b.unmapped {
		b.seg.arena.dropUnmapped(b)
		return
	}
	a.pools[poolLarge].remove(b)
	a.st.dec(statInactiveSplit, poolLarge, 1)
	a.st.dec(statInactiveSplitBytes, poolLarge, int64(b.size))
}

// attachFreeLocked merges free arena block b (in no container) with
// attached free neighbours of its kind and files the result. The caller
// attaches neighbouring pieces of different kinds in any order.
func (a *Allocator) attachFreeLocked(b *block) *block {
	if prev := b.prev; prev != nil && prev.state == stateFree && prev.unmapped == b.unmapped {
		a.detachFreeLocked(prev)
		b.freed = max(b.freed, prev.freed)
		b.addr, b.size, b.prev = prev.addr, b.size+prev.size, prev.prev
		if b.prev != nil {
			b.prev.next = b
		} else {
			b.seg.head = b
		}
		a.recycle(prev)
	}
	if next := b.next; next != nil && next.state == stateFree && next.unmapped == b.unmapped {
		a.detachFreeLocked(next)
		b.freed = max(b.freed, next.freed)
		b.size += next.size
		b.next = next.next
		if b.next != nil {
			b.next.prev = b
		}
		a.recycle(next)
	}
	if b.unmapped {
		b.seg.arena.pushUnmapped(b)
	} else {
		a.pools[poolLarge].insert(b)
		a.st.inc(statInactiveSplit, poolLarge, 1)
		a.st.inc(statInactiveSplitBytes, poolLarge, int64(b.size))
	}
	return b
}

// splitBlock cuts b at x (inside it) and returns the right part, which
// has b's state and kind and is in no container.
func (a *Allocator) splitBlock(b *block, x uint64) *block {
	r := a.newBlock()
	r.addr, r.size, r.stream, r.seg, r.state, r.unmapped = x, b.addr+b.size-x, b.stream, b.seg, b.state, b.unmapped
	r.freed = b.freed
	r.prev, r.next = b, b.next
	if b.next != nil {
		b.next.prev = r
	}
	b.next = r
	b.size = x - b.addr
	return r
}

// placement is where a request that no mapped free block fits goes: at
// start, over the unmapped block u, whose pages [u.addr, mapEnd) must be
// mapped. [start, runEnd) is u with its mapped free neighbours; no page
// is taken from there to map u, so that u stays as it is.
type placement struct {
	u                     *block
	start, mapEnd, runEnd uint64
}

// placeLocked chooses, among the unmapped blocks of stream s together with
// their mapped free neighbours, the place that needs the fewest new pages
// (then the smallest room, then the lowest address), reserving a new arena
// when no unmapped block is large enough.
func (a *Allocator) placeLocked(size uint64, s Stream) (placement, error) {
	g := a.pg.gran
	var best placement
	var bestNew, bestRoom uint64
	found := false
	for _, ar := range a.pg.arenas {
		if ar.seg.stream != s {
			continue
		}
		for u := ar.unmapped; u != nil; u = u.right {
			start, room := u.addr, u.size
			if p := u.prev; p != nil && p.state == stateFree {
				start, room = p.addr, room+p.size
			}
			if n := u.next; n != nil && n.state == stateFree {
				room += n.size
			}
			if room < size {
				continue
			}
			mapEnd := u.addr
			if end := start + size; end > u.addr {
				mapEnd = min(roundUp(end, g), u.addr+u.size)
			}
			newBytes := mapEnd - u.addr
			if !found || newBytes < bestNew || newBytes == bestNew && (room < bestRoom || room == bestRoom && start < best.start) {
				best, bestNew, bestRoom, found = placement{u, start, mapEnd, start + room}, newBytes, room, true
			}
		}
	}
	if found {
		return best, nil
	}
	if size > a.pg.vaSize-g {
		return placement{}, &noRoomError{fmt.Errorf("%s is more than the %s of address space an arena reserves", formatBytes(size), formatBytes(a.pg.vaSize))}
	}
	ar, err := a.newArenaLocked(s)
	if err != nil {
		return placement{}, err
	}
	u := ar.unmapped
	return placement{u, u.addr, u.addr + roundUp(size, g), u.addr + u.size}, nil
}

// idleRangesLocked lists the whole pages inside mapped free arena blocks,
// leaving out [exLo, exHi).
func (a *Allocator) idleRangesLocked(exLo, exHi uint64) (out []idleRange, pages uint64) {
	g := a.pg.gran
	a.pools[poolLarge].walk(func(b *block) {
		if b.seg.arena == nil {
			return
		}
		lo, hi := roundUp(b.addr, g), (b.addr+b.size)/g*g
		add := func(lo, hi uint64) {
			if lo < hi {
				out = append(out, idleRange{b, lo, hi})
				pages += (hi - lo) / g
			}
		}
		if hi <= exLo || lo >= exHi {
			add(lo, hi)
			return
		}
		add(lo, min(hi, exLo))
		add(max(lo, exHi), hi)
	})
	return out, pages
}

// syncStreamLocked waits for stream s once per operation.
func (a *Allocator) syncStreamLocked(s Stream) error {
	pg := a.pg
	if pg.sync == nil {
		return nil
	}
	for _, t := range pg.synced {
		if t == s {
			return nil
		}
	}
	t0 := time.Now()
	if err := pg.sync.SynchronizeStream(s); err != nil {
		return fmt.Errorf("alloc: waiting for stream %#x before unmapping its pages: %w", uint64(s), err)
	}
	a.st.streamSyncNanos += time.Since(t0).Nanoseconds()
	a.st.numStreamSyncs++
	pg.settleLocked(s, a.frees)
	pg.synced = append(pg.synced, s)
	return nil
}

// idleChunksLocked lists the chunks all of whose pages are idle, leaving
// out those that touch [exLo, exHi), and counts every idle page.
func (a *Allocator) idleChunksLocked(exLo, exHi uint64) (out []idleChunk, idlePages uint64) {
	g := a.pg.gran
	ranges, idlePages := a.idleRangesLocked(exLo, exHi)
	for _, r := range ranges {
		ar := r.b.seg.arena
		for at := r.lo; at < r.hi; {
			c := ar.at(at, g)
			if c == nil { // cannot happen: the pages of a mapped free block are mapped
				at += g
				continue
			}
			if c.addr >= r.lo && c.end() <= r.hi {
				out = append(out, idleChunk{c, r.b, a.settledLocked(r.b)})
			}
			at = c.end()
		}
	}
	return out, idlePages
}

// splitSettled parts idle chunks into those that can move to stream s
// without a wait (settled ones and, with sameStream, those of stream s,
// which move leaving a ghost) and the others, reusing cands' array for the
// first.
func splitSettled(cands []idleChunk, s Stream, sameStream bool) (ready, waiting []idleChunk) {
	ready = cands[:0]
	for _, c := range cands {
		if c.settled || sameStream && c.b.stream == s {
			ready = append(ready, c)
		} else {
			waiting = append(waiting, c)
		}
	}
	return ready, waiting
}

// pickChunks chooses idle chunks to move into a run that needs need more
// bytes mapped and has room for room bytes: each time the smallest chunk
// that covers what is still needed or, when none does, the largest; among
// equals one of stream s (no other stream to wait for), then the highest.
// It returns the picks and their total size, which may pass need.
func pickChunks(cands []idleChunk, need, room uint64, s Stream) ([]idleChunk, uint64) {
	var picks []idleChunk
	var moved uint64
	for moved < need && len(cands) > 0 {
		rest := need - moved
		best := -1
		for i, c := range cands {
			if moved+c.c.size > room {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := cands[best]
			cc, bc := c.c.size >= rest, b.c.size >= rest
			switch {
			case cc != bc:
				if cc {
					best = i
				}
			case c.c.size != b.c.size:
				if cc == (c.c.size < b.c.size) {
					best = i
				}
			case (c.b.stream == s) != (b.b.stream == s):
				if c.b.stream == s {
					best = i
				}
			case c.c.addr > b.c.addr:
				best = i
			}
		}
		if best < 0 {
			break
		}
		picks = append(picks, cands[best])
		moved += cands[best].c.size
		cands[best] = cands[len(cands)-1]
		cands = cands[:len(cands)-1]
	}
	return picks, moved
}

// unmapChunksLocked unmaps idle chunks, one MemUnmap each, after waiting
// for the streams that used them, and returns them (still allocated,
// still counted as reserved). With moveTo set, the chunks are about to be
// mapped for stream *moveTo, and unsettled ones of that stream stay mapped
// where they are, as ghosts (ghostLocked), when deferred unmaps are on.
// The blocks are updated for the chunks actually unmapped, also when it
// fails part way.
func (a *Allocator) unmapChunksLocked(picks []idleChunk, moveTo *Stream) ([]*chunk, error) {
	g := a.pg.gran
	// Highest first: unmapping the top of a free block leaves the block's
	// struct in place for the part below, where the next pick may lie.
	sort.Slice(picks, func(i, j int) bool { return picks[i].c.addr > picks[j].c.addr })
	var out []*chunk
	for _, p := range picks {
		if !p.settled && moveTo != nil && a.pg.deferUnmap && p.b.stream == *moveTo {
			a.ghostLocked(p.b, p.c)
			out = append(out, p.c)
			continue
		}
		if !p.settled {
			if err := a.syncStreamLocked(p.b.stream); err != nil {
				return out, err
			}
		}
		c, ar := p.c, p.b.seg.arena
		t0 := time.Now()
		err := a.pg.vm.MemUnmap(c.addr, c.size)
		a.st.deviceTime(t0)
		if err != nil {
			return out, fmt.Errorf("alloc: unmapping %s at %#x: %w", formatBytes(c.size), c.addr, err)
		}
		a.st.numMemUnmap++
		ar.setPages(c, nil, g)
		ar.mapped -= c.size
		a.markUnmappedLocked(p.b, c.addr, c.end())
		out = append(out, c)
	}
	return out, nil
}

// markUnmappedLocked turns pages [lo, hi) of mapped free block b into an
// unmapped block.
func (a *Allocator) markUnmappedLocked(b *block, lo, hi uint64) {
	a.attachFreeLocked(a.carveLocked(b, lo, hi, stateFree, true))
}

// carveLocked cuts [lo, hi) out of mapped free block b, gives that piece
// state and unmapped, files the pieces around it and returns the piece, in
// no container. Cut first, set the kind, then attach: a piece must never
// meet a detached neighbour of its own kind.
func (a *Allocator) carveLocked(b *block, lo, hi uint64, state blockState, unmapped bool) *block {
	a.detachFreeLocked(b)
	mid := b
	if lo > b.addr {
		mid = a.splitBlock(b, lo)
	}
	var right *block
	if hi < mid.addr+mid.size {
		right = a.splitBlock(mid, hi)
	}
	mid.state, mid.unmapped = state, unmapped
	if mid != b {
		a.attachFreeLocked(b)
	}
	if right != nil {
		a.attachFreeLocked(right)
	}
	return mid
}

// ghostLocked takes chunk c, whose pages are idle in free block b, out of
// the page table and turns its range into a retiring block with a ghost;
// c stays mapped there until unmapGhostsLocked unmaps it.
func (a *Allocator) ghostLocked(b *block, c *chunk) {
	ar := b.seg.arena
	ar.setPages(c, nil, a.pg.gran)
	ar.mapped -= c.size
	mid := a.carveLocked(b, c.addr, c.end(), stateRetiring, false)
	a.pg.ghosts = append(a.pg.ghosts, ghost{b: mid, c: c})
	c.ghosts++
}

// unmapGhostsLocked unmaps the old mappings (of chunk only, when it is
// not nil) whose stream is done with them; with wait, it waits for the
// streams of the others first. Their ranges stay retiring blocks until
// freeGhostsLocked, so that the blocks of the address space do not change
// under a placement in progress.
func (a *Allocator) unmapGhostsLocked(only *chunk, wait bool) error {
	for i := range a.pg.ghosts {
		gh := &a.pg.ghosts[i]
		if gh.unmapped || only != nil && gh.c != only {
			continue
		}
		if !a.settledLocked(gh.b) {
			if !wait {
				continue
			}
			if err := a.syncStreamLocked(gh.b.stream); err != nil {
				return err
			}
		}
		b := gh.b
		t0 := time.Now()
		err := a.pg.vm.MemUnmap(b.addr, b.size)
		a.st.deviceTime(t0)
		if err != nil {
			return fmt.Errorf("alloc: unmapping the old address %#x+%d of a moved chunk: %w", b.addr, b.size, err)
		}
		a.st.numMemUnmap++
		gh.unmapped = true
		gh.c.ghosts--
	}
	return nil
}

// freeGhostsLocked unmaps the old mappings that are done with (with wait,
// all of them) and makes the ranges of every unmapped one unmapped free
// blocks, merged with their neighbours. Not while a placement is held.
func (a *Allocator) freeGhostsLocked(wait bool) error {
	pg := a.pg
	if len(pg.ghosts) == 0 {
		return nil
	}
	err := a.unmapGhostsLocked(nil, wait)
	n := 0
	for _, gh := range pg.ghosts {
		if !gh.unmapped {
			pg.ghosts[n] = gh
			n++
			continue
		}
		gh.b.state, gh.b.unmapped = stateFree, true
		a.attachFreeLocked(gh.b)
	}
	clear(pg.ghosts[n:])
	pg.ghosts = pg.ghosts[:n]
	return err
}

// releaseChunksLocked returns unmapped chunks to the device, unmapping
// their ghosts first (after a wait for their stream if need be): the
// memory is not free while any mapping of it stays.
func (a *Allocator) releaseChunksLocked(cs []*chunk) error {
	for i, c := range cs {
		if c.ghosts > 0 {
			if err := a.unmapGhostsLocked(c, true); err != nil {
				return fmt.Errorf("alloc: releasing %s of physical memory (%d more chunks not released): %w", formatBytes(c.size), len(cs)-i-1, err)
			}
		}
		t0 := time.Now()
		err := a.pg.vm.MemRelease(c.h)
		a.st.deviceTime(t0)
		if err != nil {
			return fmt.Errorf("alloc: releasing %s of physical memory (%d more chunks not released): %w", formatBytes(c.size), len(cs)-i-1, err)
		}
		a.st.numDeviceFree++
		a.st.dec(statReservedBytes, poolLarge, int64(c.size))
	}
	return nil
}

// mapPlacementLocked maps the pages of p and returns the mapped free block
// that now starts at p.start (in the pool's index). It moves whole idle
// chunks from elsewhere first and creates physical memory only for the
// rest, up to pg.chunk bytes ahead of need where the cap and the room
// allow, in chunks of at most pg.maxChunk. When the device runs out, new
// chunks are bounded by what it has left (deviceFullLocked), growth stops
// ahead of need and what is still needed is asked for in those smaller
// chunks. Growing past the cap or a full device is a *noRoomError and
// then whatever could be mapped stays mapped. Device calls: one MemUnmap
// and one MemMap per chunk moved, one MemCreate and one MemMap per new
// chunk, one MemSetAccess for the whole run.
func (a *Allocator) mapPlacementLocked(p placement) (*block, error) {
	pg := a.pg
	g := pg.gran
	need := p.mapEnd - p.u.addr
	if need == 0 {
		return p.u.prev, nil // the request fits the mapped free block before u
	}
	pg.synced = pg.synced[:0]
	lo, room := p.u.addr, p.u.size
	defer a.recordMarkersLocked() // pagedTryLocked polled them before placing
	cands, idle := a.idleChunksLocked(p.start/g*g, roundUp(p.runEnd, g))
	var picks []idleChunk
	var moved uint64
	if !a.growFreelyLocked(need) {
		// Settled chunks first: they move without a wait. The others only
		// when creating what is still needed would pass the wait slack.
		ready, waiting := splitSettled(cands, p.u.stream, pg.deferUnmap)
		picks, moved = pickChunks(ready, need, room, p.u.stream)
		if moved < need && len(waiting) > 0 && !a.createRatherThanWaitLocked(need, need-moved) {
			more, m := pickChunks(waiting, need-moved, room-moved, p.u.stream)
			picks, moved = append(picks, more...), moved+m
		}
	}
	var short, create uint64
	if moved < need {
		short = need - moved
		r := a.reservedLocked()
		if r+short > a.capBytes {
			what := "the cap"
			if a.capBytes == a.total {
				what = "the device's total memory"
			}
			return nil, &noRoomError{fmt.Errorf("mapping %s more would pass %s of %s (%s reserved; %d idle pages, of which %s in idle chunks could move)",
				formatBytes(short), what, formatBytes(a.capBytes), formatBytes(r), idle, formatBytes(moved))}
		}
		// Grow ahead by pg.chunk; in the fine regime by no more than 1/64
		// of what the large pool holds, so that a small job's reserve
		// stays close to its live bytes.
		ahead := pg.chunk
		if pg.fine {
			ahead = min(pg.chunk, roundUp(uint64(a.st.pool[poolLarge][statReservedBytes].Current)/64, g))
		}
		create = min(max(short, ahead), room-moved, (a.capBytes-r)/g*g)
	}
	hand, err := a.unmapChunksLocked(picks, &p.u.stream)
	if err != nil {
		return nil, errors.Join(err, a.releaseChunksLocked(hand))
	}
	var growErr error
	bound := ^uint64(0) // by the job's size (sizeShare); pg.maxChunk may shrink in the loop
	if sizeShare > 0 && pg.fine {
		peak := uint64(a.st.pool[poolLarge][statReservedBytes].Peak)
		bound = max((peak/sizeShare+g/2)/g*g, g)
	}
	for created := uint64(0); created < create; {
		n := min(create-created, pg.maxChunk, bound)
		t0 := time.Now()
		h, err := pg.vm.MemCreate(n)
		a.st.deviceTime(t0)
		if err != nil && errors.Is(err, ErrDeviceOutOfMemory) {
			a.deviceFullLocked()
			if created >= short {
				break // what is needed is there; the rest was only ahead of need
			}
			// Grow by no more than the need now; the device may still
			// have room for that, in smaller chunks.
			create = short
			if m := min(short-created, pg.maxChunk, bound); m < n {
				n = m
				t0 = time.Now()
				h, err = pg.vm.MemCreate(n)
				a.st.deviceTime(t0)
			}
		}
		if err != nil {
			if errors.Is(err, ErrDeviceOutOfMemory) {
				growErr = &noRoomError{fmt.Errorf("device mem create of %s: %w", formatBytes(n), err)}
			} else {
				growErr = fmt.Errorf("alloc: device mem create of %d bytes: %w", n, err)
			}
			break
		}
		a.st.numDeviceAlloc++
		a.st.inc(statReservedBytes, poolLarge, int64(n))
		hand = append(hand, &chunk{h: h, size: n})
		created += n
	}
	// Map the chunks in hand from the bottom of u up, then give access to
	// the whole run at once.
	ar := p.u.seg.arena
	at := lo
	var mapErr error
	for i, c := range hand {
		t0 := time.Now()
		err := pg.vm.MemMap(at, c.size, c.h)
		a.st.deviceTime(t0)
		if err != nil {
			mapErr = errors.Join(fmt.Errorf("alloc: mapping %s at %#x: %w", formatBytes(c.size), at, err), a.releaseChunksLocked(hand[i:]))
			break
		}
		a.st.numMemMap++
		c.addr = at
		ar.setPages(c, c, g)
		ar.mapped += c.size
		at += c.size
	}
	if at > lo {
		t0 := time.Now()
		err := pg.vm.MemSetAccess(lo, at-lo)
		a.st.deviceTime(t0)
		if err != nil {
			// Pages without access must not be handed out: take them back.
			return nil, errors.Join(fmt.Errorf("alloc: setting access to %#x+%d: %w", lo, at-lo, err), mapErr, a.unmapFreshLocked(ar, lo, at))
		}
		a.markMappedLocked(p.u, at)
	}
	if mapErr != nil {
		return nil, mapErr
	}
	if growErr != nil {
		return nil, growErr
	}
	if at > lo {
		return p.u, nil // merged with its mapped free neighbours: starts at p.start
	}
	return nil, fmt.Errorf("alloc: page-mapped placement at %#x mapped nothing (internal error)", p.start)
}

// growFreelyLocked reports whether need more mapped bytes may be created
// outright, without moving idle chunks: in the coarse regime, while the
// large pool's reserve stays within coarseGrowSlack of the most it has had
// active, counting this request.
func (a *Allocator) growFreelyLocked(need uint64) bool {
	return !a.pg.fine && coarseGrowSlack > 0 && a.reserveWithinLocked(need, need, coarseGrowSlack)
}

// reserveWithinLocked reports whether creating add more bytes keeps the
// large pool's reserve within slack of its peak of active bytes, counting
// a request of need bytes on top of what is active now.
func (a *Allocator) reserveWithinLocked(need, add uint64, slack float64) bool {
	res := a.st.pool[poolLarge][statReservedBytes].Current
	act := a.st.pool[poolLarge][statActiveBytes]
	peak := max(act.Peak, act.Current+int64(need))
	return float64(res+int64(add)) <= (1+slack)*float64(peak)
}

// markMappedLocked records that pages [u.addr, at) of unmapped block u are
// now mapped: that part becomes a mapped free block, merged with mapped
// free neighbours.
func (a *Allocator) markMappedLocked(u *block, at uint64) {
	a.detachFreeLocked(u)
	var right *block
	if at < u.addr+u.size {
		right = a.splitBlock(u, at)
	}
	u.unmapped = false
	if right != nil {
		a.attachFreeLocked(right)
	}
	a.attachFreeLocked(u)
}

// unmapFreshLocked undoes the mapping of the chunks in [lo, hi) that were
// mapped but never made accessible, and releases them.
func (a *Allocator) unmapFreshLocked(ar *arena, lo, hi uint64) error {
	g := a.pg.gran
	var cs []*chunk
	var errs []error
	for at := lo; at < hi; {
		c := ar.at(at, g)
		if c == nil {
			at += g
			continue
		}
		at = c.end()
		t0 := time.Now()
		err := a.pg.vm.MemUnmap(c.addr, c.size)
		a.st.deviceTime(t0)
		if err != nil {
			errs = append(errs, fmt.Errorf("alloc: unmapping %#x+%d (its physical memory is lost until Close): %w", c.addr, c.size, err))
			continue
		}
		a.st.numMemUnmap++
		ar.setPages(c, nil, g)
		ar.mapped -= c.size
		cs = append(cs, c)
	}
	errs = append(errs, a.releaseChunksLocked(cs))
	return errors.Join(errs...)
}

// pagedGrowLocked serves a large request that no mapped free block fits:
// place it, map the pages it needs, and when that fails for lack of room,
// wait for pending frees, search again, release the small pool's cached
// segments and try again before reporting out of memory.
func (a *Allocator) pagedGrowLocked(size, req uint64, s Stream) (*block, error) {
	b, err := a.pagedTryLocked(size, s)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, errNoRoom) {
		return nil, err
	}
	a.st.numAllocRetries++
	if err := a.synchronizeEventsLocked(); err != nil {
		return nil, err
	}
	if b := a.takeFreeLocked(poolLarge, size, s); b != nil {
		return b, nil
	}
	if _, rerr := a.releaseCachedLocked(); rerr != nil {
		return nil, rerr
	}
	if b, err = a.pagedTryLocked(size, s); err == nil {
		return b, nil
	}
	if !errors.Is(err, errNoRoom) {
		return nil, err
	}
	a.st.numOOMs++
	return nil, a.oomErrorLocked(req, size, roundUp(size, a.pg.gran), s, err)
}

// pagedTryLocked is one attempt of pagedGrowLocked. The block it returns
// is out of the free index, ready for allocFoundLocked.
func (a *Allocator) pagedTryLocked(size uint64, s Stream) (*block, error) {
	// Unmap the old mappings that are done with before placing: that
	// merges address space, which a placement must not see change.
	a.pollMarkersLocked()
	if err := a.freeGhostsLocked(false); err != nil {
		return nil, err
	}
	p, err := a.placeLocked(size, s)
	if err != nil {
		return nil, err
	}
	b, err := a.mapPlacementLocked(p)
	if err != nil {
		return nil, err
	}
	if b == nil || b.state != stateFree || b.unmapped || b.addr != p.start || b.size < size {
		return nil, fmt.Errorf("alloc: page-mapped placement at %#x for %d bytes found no fitting block (internal error)", p.start, size)
	}
	a.pools[poolLarge].remove(b)
	return b, nil
}

// releaseHorizon is how many windows of page_release_window allocations
// the release policy remembers: idle pages are kept as long as the peak of
// any of them needs them. 16 windows of 4096 are about 45 steps of GPT-2
// training with variable sequence lengths (some 1,450 allocations a step),
// long enough for the longest shapes to come back before their pages are
// released: with two windows, 55 such steps on the H200 released and
// recreated 682 chunks (docs/alloc.md).
const releaseHorizon = 16

// notePeak records the large pool's active bytes after an allocation.
func (pg *pagedState) notePeak(active int64) {
	pg.winPeak[pg.winIdx] = max(pg.winPeak[pg.winIdx], active)
}

// pagedTickLocked, called before each allocation, follows the large pool's
// active bytes over windows of allocations and, at the end of each window,
// releases the idle pages that the last releaseHorizon windows did not
// need (see doc.go).
func (a *Allocator) pagedTickLocked() error {
	pg := a.pg
	if pg.window == 0 || a.seq-pg.winStart < pg.window {
		return nil
	}
	act := a.st.pool[poolLarge][statActiveBytes].Current
	pg.notePeak(act)
	peak := act
	for _, p := range pg.winPeak {
		peak = max(peak, p)
	}
	pg.winIdx = (pg.winIdx + 1) % releaseHorizon
	pg.winPeak[pg.winIdx], pg.winStart = act, a.seq
	// Keep enough idle pages to grow back to the peak, plus the slack. In
	// the fine regime only settled pages go: a release never waits for a
	// stream, and the others are settled by the next window, markers
	// recorded now. In the coarse regime unsettled ones go too, after a
	// wait: on the KV-cache trace keeping them took the reserve from 1.036
	// to 1.041 × live and the driver calls from 225 to 232, past
	// expandable segments' 230, to save one wait a run (TestPagedReplayWaits
	// and the H100 race of 2026-12-07; docs/alloc.md).
	keep := uint64(peak-act) + uint64(pg.slack*float64(peak))
	defer a.recordMarkersLocked()
	_, err := a.releaseIdleLocked(keep, minTrimPages, pg.fine)
	return err
}

// releaseIdleLocked releases idle chunks, highest addresses first, as long
// as keep bytes of idle pages stay, when at least minPages pages can go;
// it returns the bytes released. With settledOnly it releases only settled
// chunks, which need no wait for their stream. Idle pages in a chunk that
// is partly in use stay: the driver cannot unmap part of a mapping.
func (a *Allocator) releaseIdleLocked(keep, minPages uint64, settledOnly bool) (uint64, error) {
	pg := a.pg
	a.pollMarkersLocked()
	pg.synced = pg.synced[:0]
	if err := a.freeGhostsLocked(false); err != nil {
		return 0, err
	}
	g := pg.gran
	cands, idle := a.idleChunksLocked(0, 0)
	keepPages := (keep + g - 1) / g
	if idle <= keepPages {
		return 0, nil
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].c.addr > cands[j].c.addr })
	var picks []idleChunk
	var pages uint64
	for _, c := range cands {
		if settledOnly && !c.settled {
			continue
		}
		if n := c.c.size / g; idle-pages >= keepPages+n {
			picks = append(picks, c)
			pages += n
		}
	}
	if pages == 0 || pages < minPages {
		return 0, nil
	}
	hand, err := a.unmapChunksLocked(picks, nil)
	var released uint64
	for _, c := range hand {
		released += c.size
	}
	if rerr := a.releaseChunksLocked(hand); rerr != nil {
		return 0, errors.Join(err, rerr)
	}
	a.st.numPageTrims++
	return released, err
}

// closePagedLocked unmaps and releases every page and frees the arenas'
// address space; nothing may be live.
func (a *Allocator) closePagedLocked() error {
	a.pg.synced = a.pg.synced[:0]
	if err := a.freeGhostsLocked(true); err != nil {
		return err
	}
	a.dropMarkersLocked()
	if _, err := a.releaseIdleLocked(0, 1, false); err != nil {
		return err
	}
	for _, ar := range a.pg.arenas {
		if ar.mapped != 0 {
			return fmt.Errorf("alloc: arena %#x still maps %d bytes", ar.seg.addr, ar.mapped)
		}
		if err := a.pg.vm.AddressFree(ar.seg.addr, ar.seg.size); err != nil {
			return fmt.Errorf("alloc: freeing the address range %#x: %w", ar.seg.addr, err)
		}
		a.recycle(ar.seg.head)
		i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr >= ar.seg.addr })
		a.segs = append(a.segs[:i], a.segs[i+1:]...)
		a.st.dec(statSegment, poolLarge, 1)
	}
	a.pg.arenas = nil
	return nil
}

// settledAtLocked returns the free counter up to which stream s's frees
// are settled.
func (pg *pagedState) settledAtLocked(s Stream) uint64 {
	for _, t := range pg.settled {
		if t.s == s {
			return t.at
		}
	}
	return 0
}

// settleLocked records that stream s's frees up to counter at are settled.
func (pg *pagedState) settleLocked(s Stream, at uint64) {
	for i, t := range pg.settled {
		if t.s == s {
			pg.settled[i].at = max(t.at, at)
			return
		}
	}
	pg.settled = append(pg.settled, streamTag{s, at})
}

// settledLocked reports whether the pages of free block b may be unmapped
// without waiting for its stream: no pages were ever used, a completed
// marker or a wait came after b's last free, or the backend needs no
// waits at all.
func (a *Allocator) settledLocked(b *block) bool {
	return a.pg.sync == nil || b.freed == 0 || b.freed <= a.pg.settledAtLocked(b.stream)
}

// pollMarkersLocked asks each pending marker, without blocking, whether
// it has completed, and settles its stream's frees up to it if so. A
// marker the driver cannot answer for is dropped: the pages stay
// unsettled, and moving them waits for the stream as without markers.
func (a *Allocator) pollMarkersLocked() {
	pg := a.pg
	n := 0
	for _, m := range pg.markers {
		done, err := a.dev.EventQuery(m.ev)
		switch {
		case err != nil:
			_ = a.dev.EventDestroy(m.ev)
		case done:
			pg.settleLocked(m.s, m.at)
			a.eventPool = append(a.eventPool, m.ev)
		default:
			pg.markers[n] = m
			n++
		}
	}
	clear(pg.markers[n:])
	pg.markers = pg.markers[:n]
}

// recordMarkersLocked records a marker on each arena's stream that has
// frees since its newest marker, unless maxMarkers are pending there. It
// needs a backend that waits for streams (pg.sync); without one every page
// is settled. A marker that cannot be recorded is skipped.
func (a *Allocator) recordMarkersLocked() {
	pg := a.pg
	if pg.sync == nil {
		return
	}
	for _, ar := range pg.arenas {
		s := ar.seg.stream
		newest, pending := pg.settledAtLocked(s), 0
		for _, m := range pg.markers {
			if m.s == s {
				newest, pending = max(newest, m.at), pending+1
			}
		}
		if newest >= a.frees || pending >= maxMarkers {
			continue
		}
		ev, err := a.getEventLocked()
		if err != nil {
			continue
		}
		if err := a.dev.EventRecord(ev, s); err != nil {
			a.eventPool = append(a.eventPool, ev)
			continue
		}
		pg.markers = append(pg.markers, marker{s, ev, a.frees})
	}
}

// dropMarkersLocked returns the pending markers' events to the pool, to
// be destroyed with it (Close; destroying an event still pending is
// allowed, and the release that follows waits for every unsettled
// stream).
func (a *Allocator) dropMarkersLocked() {
	for _, m := range a.pg.markers {
		a.eventPool = append(a.eventPool, m.ev)
	}
	a.pg.markers = nil
}

// createRatherThanWaitLocked reports whether a growth may create short
// bytes instead of moving idle chunks that are not settled, which would
// wait for their stream: the reserve stays within waitSlack of the large
// pool's active peak (counting a request of need bytes) and under the cap.
// Waiting stalls the program until the GPU catches up with it; a little
// more memory for a while does not, and the pages are moved or released
// once settled.
func (a *Allocator) createRatherThanWaitLocked(need, short uint64) bool {
	return a.reservedLocked()+short <= a.capBytes && a.reserveWithinLocked(need, short, waitSlack)
}
