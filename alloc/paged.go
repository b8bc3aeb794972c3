package alloc

// The page-mapped mode (page_mapped:true): large-pool memory is physical
// pages mapped into reserved address ranges, and pages move to where they
// are needed. See doc.go ("Page-mapped mode") for an overview; this file
// holds the arenas, placement, stealing, the release policy and the
// teardown.

import (
	"errors"
	"fmt"
	"sort"
)

// Defaults of the release policy.
const (
	defaultPageSlack  = 0.03 // page_release_slack
	defaultPageWindow = 4096 // page_release_window, allocations
	arenaVAFactor     = 4    // an arena reserves this many times the device's memory
	minTrimPages      = 4    // a trim releases at least this many pages, or nothing
)

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
	vm     VirtualMemory
	sync   streamSynchronizer // nil when the backend has none
	gran   uint64             // page size, from VirtualMemory.Granularity
	vaSize uint64             // address space per arena
	arenas []*arena           // in creation order
	slack  float64
	window uint64 // allocations per release window; 0: no automatic release

	winStart uint64   // allocation number at the start of the current window
	winPeak  [2]int64 // large-pool active bytes peak: this window, the previous one
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
	pages    []physPage // page i is [seg.addr+i*gran, +gran); past the end: unmapped
	mapped   uint64     // bytes of mapped pages
	unmapped *block     // head of the unmapped free blocks
}

// physPage is the physical memory mapped at one page, if any.
type physPage struct {
	h  PhysHandle
	ok bool
}

// idleRange is a run [lo, hi) of whole pages inside one mapped free block:
// memory no block uses, which can be moved or released.
type idleRange struct {
	b      *block
	lo, hi uint64
}

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
	pg := &pagedState{vm: vm, gran: g, slack: a.cfg.PageReleaseSlack, window: defaultPageWindow}
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
	a.pg = pg
	return nil
}

func (ar *arena) end() uint64 { return ar.seg.addr + ar.seg.size }

// page returns the page-table entry of the page at addr, growing the table.
func (ar *arena) page(addr, g uint64) *physPage {
	i := int((addr - ar.seg.addr) / g)
	if i >= len(ar.pages) {
		ar.pages = append(ar.pages, make([]physPage, i+1-len(ar.pages))...)
	}
	return &ar.pages[i]
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
	if err := pg.sync.SynchronizeStream(s); err != nil {
		return fmt.Errorf("alloc: waiting for stream %#x before unmapping its pages: %w", uint64(s), err)
	}
	a.st.numStreamSyncs++
	pg.synced = append(pg.synced, s)
	return nil
}

// unmapLocked unmaps up to want pages from the idle ranges, from the top
// of each range down, in the order given, and returns their handles (still
// allocated, still counted as reserved). The blocks are updated for the
// pages actually unmapped, also when it fails part way.
func (a *Allocator) unmapLocked(ranges []idleRange, want uint64) ([]PhysHandle, error) {
	g := a.pg.gran
	var hs []PhysHandle
	for _, r := range ranges {
		if uint64(len(hs)) >= want {
			break
		}
		n := min((r.hi-r.lo)/g, want-uint64(len(hs)))
		lo := r.hi - n*g
		if err := a.syncStreamLocked(r.b.stream); err != nil {
			return hs, err
		}
		ar := r.b.seg.arena
		top := r.hi // pages [top, r.hi) are unmapped
		var err error
		for top > lo {
			p := ar.page(top-g, g)
			if err = a.pg.vm.MemUnmap(top-g, g); err != nil {
				err = fmt.Errorf("alloc: unmapping page %#x: %w", top-g, err)
				break
			}
			a.st.numMemUnmap++
			hs = append(hs, p.h)
			*p = physPage{}
			ar.mapped -= g
			top -= g
		}
		if top < r.hi {
			a.markUnmappedLocked(r.b, top, r.hi)
		}
		if err != nil {
			return hs, err
		}
	}
	return hs, nil
}

// markUnmappedLocked turns pages [lo, hi) of mapped free block b into an
// unmapped block.
func (a *Allocator) markUnmappedLocked(b *block, lo, hi uint64) {
	// Cut first, set the kinds, then attach: a piece must never meet a
	// detached neighbour of its own kind.
	a.detachFreeLocked(b)
	mid := b
	if lo > b.addr {
		mid = a.splitBlock(b, lo)
	}
	var right *block
	if hi < mid.addr+mid.size {
		right = a.splitBlock(mid, hi)
	}
	mid.unmapped = true
	if mid != b {
		a.attachFreeLocked(b)
	}
	if right != nil {
		a.attachFreeLocked(right)
	}
	a.attachFreeLocked(mid)
}

// releaseHandlesLocked returns unmapped physical pages to the device.
func (a *Allocator) releaseHandlesLocked(hs []PhysHandle) error {
	for i, h := range hs {
		if err := a.pg.vm.MemRelease(h); err != nil {
			return fmt.Errorf("alloc: releasing a physical page (%d more not released): %w", len(hs)-i-1, err)
		}
		a.st.numDeviceFree++
		a.st.dec(statReservedBytes, poolLarge, int64(a.pg.gran))
	}
	return nil
}

// mapPlacementLocked maps the pages of p and returns the mapped free block
// that now starts at p.start (in the pool's index). It maps idle pages
// taken from elsewhere first and creates physical memory only for the
// rest; growing past the cap or a full device is a *noRoomError and then
// whatever pages could be mapped stay mapped.
func (a *Allocator) mapPlacementLocked(p placement) (*block, error) {
	pg := a.pg
	g := pg.gran
	need := (p.mapEnd - p.u.addr) / g
	pg.synced = pg.synced[:0]
	var hs []PhysHandle
	var growErr error
	if need > 0 {
		ranges, idle := a.idleRangesLocked(p.start/g*g, roundUp(p.runEnd, g))
		if create := need - min(need, idle); create > 0 {
			if r := a.reservedLocked(); r+create*g > a.capBytes {
				what := "the cap"
				if a.capBytes == a.total {
					what = "the device's total memory"
				}
				return nil, &noRoomError{fmt.Errorf("mapping %d new pages of %s would pass %s of %s (%s reserved, %d idle pages remapped first)",
					create, formatBytes(g), what, formatBytes(a.capBytes), formatBytes(r), idle)}
			}
		}
		// Steal from the same stream first (one wait), then from the
		// highest addresses, so that arenas stay dense at the bottom.
		s := p.u.stream
		sort.SliceStable(ranges, func(i, j int) bool {
			si, sj := ranges[i].b.stream == s, ranges[j].b.stream == s
			if si != sj {
				return si
			}
			return ranges[i].hi > ranges[j].hi
		})
		var err error
		hs, err = a.unmapLocked(ranges, need)
		if err != nil {
			return nil, errors.Join(err, a.releaseHandlesLocked(hs))
		}
		for uint64(len(hs)) < need {
			h, err := pg.vm.MemCreate(g)
			if err != nil {
				if errors.Is(err, ErrDeviceOutOfMemory) {
					growErr = &noRoomError{fmt.Errorf("device mem create of %s: %w", formatBytes(g), err)}
				} else {
					growErr = fmt.Errorf("alloc: device mem create of %d bytes: %w", g, err)
				}
				break
			}
			a.st.numDeviceAlloc++
			a.st.inc(statReservedBytes, poolLarge, int64(g))
			hs = append(hs, h)
		}
	}
	// Map the handles in hand at the bottom of u, then give access to the
	// whole run at once.
	ar := p.u.seg.arena
	at := p.u.addr
	var mapErr error
	for i, h := range hs {
		if err := pg.vm.MemMap(at, g, h); err != nil {
			mapErr = errors.Join(fmt.Errorf("alloc: mapping a page at %#x: %w", at, err), a.releaseHandlesLocked(hs[i:]))
			break
		}
		a.st.numMemMap++
		*ar.page(at, g) = physPage{h, true}
		ar.mapped += g
		at += g
	}
	if at > p.u.addr {
		if err := pg.vm.MemSetAccess(p.u.addr, at-p.u.addr); err != nil {
			// Pages without access must not be handed out: take them back.
			return nil, errors.Join(fmt.Errorf("alloc: setting access to %#x+%d: %w", p.u.addr, at-p.u.addr, err), mapErr, a.unmapFreshLocked(ar, p.u.addr, at))
		}
		a.markMappedLocked(p.u, at)
	}
	if mapErr != nil {
		return nil, mapErr
	}
	if growErr != nil {
		return nil, growErr
	}
	if at > p.u.addr {
		return p.u, nil // merged with its mapped free neighbours: starts at p.start
	}
	return p.u.prev, nil // the request fits the mapped free block before u
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

// unmapFreshLocked undoes the mapping of pages [lo, hi) that were mapped
// but never made accessible, and releases them.
func (a *Allocator) unmapFreshLocked(ar *arena, lo, hi uint64) error {
	g := a.pg.gran
	var hs []PhysHandle
	var errs []error
	for at := lo; at < hi; at += g {
		p := ar.page(at, g)
		if err := a.pg.vm.MemUnmap(at, g); err != nil {
			errs = append(errs, fmt.Errorf("alloc: unmapping page %#x (its physical memory is lost until Close): %w", at, err))
			continue
		}
		a.st.numMemUnmap++
		hs = append(hs, p.h)
		*p = physPage{}
		ar.mapped -= g
	}
	errs = append(errs, a.releaseHandlesLocked(hs))
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

// notePeak records the large pool's active bytes after an allocation.
func (pg *pagedState) notePeak(active int64) { pg.winPeak[0] = max(pg.winPeak[0], active) }

// pagedTickLocked, called before each allocation, follows the large pool's active bytes over windows of
// allocations and, at the end of each window, releases the idle pages
// that the last two windows did not need (see doc.go).
func (a *Allocator) pagedTickLocked() error {
	pg := a.pg
	if pg.window == 0 || a.seq-pg.winStart < pg.window {
		return nil
	}
	act := a.st.s[statActiveBytes][poolLarge+1].Current
	pg.winPeak[0] = max(pg.winPeak[0], act)
	peak := max(pg.winPeak[0], pg.winPeak[1])
	pg.winPeak[1], pg.winPeak[0], pg.winStart = pg.winPeak[0], act, a.seq
	// Keep enough idle pages to grow back to the peak, plus the slack.
	keep := uint64(peak-act) + uint64(pg.slack*float64(peak))
	_, err := a.releaseIdleLocked(keep, minTrimPages)
	return err
}

// releaseIdleLocked releases idle pages beyond keep bytes, highest
// addresses first, when at least minPages can go; it returns the bytes
// released.
func (a *Allocator) releaseIdleLocked(keep uint64, minPages uint64) (uint64, error) {
	pg := a.pg
	ranges, idle := a.idleRangesLocked(0, 0)
	keepPages := (keep + pg.gran - 1) / pg.gran
	if idle <= keepPages || idle-keepPages < minPages {
		return 0, nil
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].hi > ranges[j].hi })
	pg.synced = pg.synced[:0]
	hs, err := a.unmapLocked(ranges, idle-keepPages)
	released := uint64(len(hs)) * pg.gran
	if rerr := a.releaseHandlesLocked(hs); rerr != nil {
		return 0, errors.Join(err, rerr)
	}
	a.st.numPageTrims++
	return released, err
}

// closePagedLocked unmaps and releases every page and frees the arenas'
// address space; nothing may be live.
func (a *Allocator) closePagedLocked() error {
	if _, err := a.releaseIdleLocked(0, 1); err != nil {
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
