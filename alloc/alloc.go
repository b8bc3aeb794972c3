package alloc

// The allocator's core: blocks, segments, the allocation and free walks,
// growth, release and stream events. See doc.go for an overview.

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Size policy (PyTorch's defaults; see doc.go).
const (
	minBlockSize   = 512      // every request is rounded up to a multiple of this
	smallSize      = 1 << 20  // requests up to this size use the small pool
	smallBuffer    = 2 << 20  // segment size of the small pool
	largeBuffer    = 20 << 20 // segment size for large requests under minLargeAlloc
	minLargeAlloc  = 10 << 20 // requests from here on get a segment of their own size
	roundLarge     = 2 << 20  // such segments are rounded up to this
	maxRequestSize = 1 << 60  // anything larger fails at once: no device has an exabyte
)

// Pool indexes; a pool's statistics live at index pool+1 (0 is "all").
const (
	poolSmall = 0
	poolLarge = 1
)

type blockState uint8

const (
	stateFree      blockState = iota // in its pool's free index, reusable
	stateAllocated                   // handed out, in the live map
	statePending                     // freed, waiting on events of other streams
	stateRetiring                    // page-mapped: a moved chunk's old address, unmapped when its stream is done with it (paged.go)
)

func (s blockState) String() string {
	switch s {
	case stateFree:
		return "inactive"
	case stateAllocated:
		return "active_allocated"
	case statePending:
		return "active_pending_free"
	case stateRetiring:
		return "retiring"
	}
	return "unknown"
}

// block is a contiguous part of a segment. All fields are guarded by the
// allocator's mutex.
type block struct {
	addr, size uint64
	requested  uint64 // size the caller asked for (allocated and pending blocks)
	stream     Stream
	seg        *segment
	prev, next *block // neighbours in the segment, in address order
	left       *block // neighbours in the free index's class list while free
	right      *block
	state      blockState
	unmapped   bool     // a free arena block with no page mapped (paged.go)
	eventCount int32    // outstanding events (pending blocks)
	uses       []Stream // streams other than stream that used the block
	seq        uint64   // allocation number, unique per allocation
	freed      uint64   // free blocks: Allocator.frees when its pages were last freed (0: never used)
	stack      *callStack
}

func (b *block) isSplit() bool { return b.prev != nil || b.next != nil }

// segment is one region obtained from Device.Malloc.
type segment struct {
	addr, size uint64
	pool       int
	stream     Stream
	head       *block // first block, lowest address
	lastUse    uint64 // allocation number of the last alloc or free in it (LRU)
	prealloc   bool   // from prealloc_bytes: kept until Close
	arena      *arena // the page-mapped arena this segment is, or nil
}

// pendingEvent is an event recorded on a stream that used a freed block.
type pendingEvent struct {
	ev Event
	b  *block
}

// eventQueue holds one stream's events in the order they were recorded;
// they complete in that order, so polling stops at the first one not done.
type eventQueue struct {
	stream Stream
	q      []pendingEvent
	head   int
}

// Allocator is a caching device-memory allocator over one Device. Create it
// with New. All methods are safe for concurrent use.
type Allocator struct {
	mu sync.Mutex

	// Set at New, read-only afterwards.
	dev         Device
	cfg         Config
	total       uint64 // device total memory at New
	maxSplit    uint64 // math.MaxUint64 when unlimited
	samplePer   uint64 // record one call stack in samplePer when sampled
	roundDivs   bool   // some roundup_power2_divisions entry is above 1
	traceOrigin time.Time

	// Guarded by mu.
	pools         [2]freePool
	live          ptrMap     // allocated blocks by address
	segs          []*segment // by address
	spare         []*block   // recycled block structs
	seq           uint64     // allocation counter
	frees         uint64     // free counter: orders block.freed and the page-mapped mode's stream markers
	pendingEvents int
	queues        []*eventQueue
	eventPool     []Event
	st            statsState
	trace         *traceRing
	leaks         []leakRecord
	siteCache     map[uintptr]Frame
	closed        bool
	pg            *pagedState // page-mapped mode, nil when off
	capBytes      uint64      // effective cap on reserved bytes (SetCap changes it)
	gcLimit       uint64      // garbage_collection_threshold × cap, 0 if off

	sampleTick atomic.Uint64 // allocations seen by sampled call-site recording

	async asyncState // asynchronous copies and their staging buffers (async.go); own mutex
}

// New returns an allocator over dev. It reads the device's total memory
// once (for max_fraction and out-of-memory reports) and, when
// cfg.PreallocBytes is set, reserves that much at once.
func New(dev Device, cfg Config) (*Allocator, error) {
	if dev == nil {
		return nil, errors.New("alloc: nil device")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alloc: config: %w", err)
	}
	_, total, err := dev.MemInfo()
	if err != nil {
		return nil, fmt.Errorf("alloc: reading device memory info: %w", err)
	}
	a := &Allocator{
		dev:       dev,
		cfg:       cfg,
		total:     total,
		maxSplit:  math.MaxUint64,
		siteCache: make(map[uintptr]Frame),
	}
	if cfg.MaxSplitSize != 0 {
		a.maxSplit = cfg.MaxSplitSize
	}
	for _, div := range cfg.RoundupPower2Divisions {
		a.roundDivs = a.roundDivs || div > 1
	}
	a.setCapLocked(cfg.MaxBytes, cfg.MaxFraction)
	rate := cfg.SampleRate
	if rate == 0 {
		rate = 0.01
	}
	a.samplePer = uint64(math.Round(1 / rate))
	if a.samplePer == 0 {
		a.samplePer = 1
	}
	if cfg.TraceEvents > 0 {
		a.trace = newTraceRing(cfg.TraceEvents)
	}
	a.traceOrigin = time.Now()
	if cfg.PageMapped {
		if err := a.initPagedLocked(); err != nil {
			return nil, fmt.Errorf("alloc: %w", err)
		}
	}
	if cfg.PreallocBytes > 0 {
		size := roundUp(cfg.PreallocBytes, roundLarge)
		seg, err := a.newSegmentLocked(size, poolLarge, 0)
		if err != nil {
			return nil, fmt.Errorf("alloc: prealloc_bytes %d: %w", cfg.PreallocBytes, err)
		}
		seg.prealloc = true
		a.pools[poolLarge].insert(seg.head)
	}
	return a, nil
}

// Config returns the configuration the allocator was created with.
func (a *Allocator) Config() Config { return a.cfg }

// Cap returns the most bytes the allocator may reserve.
func (a *Allocator) Cap() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.capBytes
}

// SetCap replaces the caps of the configuration (max_bytes, max_fraction)
// from now on: the allocator may then reserve at most the smaller of
// maxBytes and maxFraction × the device's total memory (0 for either: no
// cap of that kind). This is what torch.cuda.set_per_process_memory_fraction
// does to PyTorch's allocator. A lower cap does not release memory at
// once: growth past it fails (after the cache is released, as at any cap),
// and EmptyCache gives cached memory back. It fails on a fraction outside
// [0, 1].
func (a *Allocator) SetCap(maxBytes uint64, maxFraction float64) error {
	if !(maxFraction >= 0 && maxFraction <= 1) {
		return fmt.Errorf("alloc: cap: fraction %v is not in [0, 1]", maxFraction)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setCapLocked(maxBytes, maxFraction)
	if a.pg != nil {
		a.setPagedRegimeLocked(a.wantFineLocked())
	}
	return nil
}

// setCapLocked sets capBytes and gcLimit from the two caps.
func (a *Allocator) setCapLocked(maxBytes uint64, maxFraction float64) {
	a.capBytes = a.total
	if maxBytes != 0 && maxBytes < a.capBytes {
		a.capBytes = maxBytes
	}
	if maxFraction != 0 {
		if f := uint64(maxFraction * float64(a.total)); f < a.capBytes {
			a.capBytes = f
		}
	}
	a.gcLimit = 0
	if t := a.cfg.GarbageCollectionThreshold; t > 0 {
		a.gcLimit = uint64(t * float64(a.capBytes))
	}
}

func roundUp(n, m uint64) uint64 { return (n + m - 1) / m * m }

// roundSize is the size of the block that serves a request of n bytes
// (0 < n ≤ maxRequestSize).
func (a *Allocator) roundSize(n uint64) uint64 {
	if !a.roundDivs {
		// The default: a multiple of 512, at least 512. One add and one
		// mask; no load from the configuration.
		return max(n+minBlockSize-1, minBlockSize) &^ (minBlockSize - 1)
	}
	if n < minBlockSize {
		return minBlockSize
	}
	idx := 0
	if n >= 2<<20 {
		idx = min(63-clz64(n)-20, numRoundupIntervals-1)
	}
	if div := uint64(a.cfg.RoundupPower2Divisions[idx]); div > 1 && n > minBlockSize*div {
		return roundupPower2Division(n, div)
	}
	return roundUp(n, minBlockSize)
}

func clz64(n uint64) int { return bits.LeadingZeros64(n) }

// roundupPower2Division rounds n up to the next of div equal steps between
// the powers of two around it (div is a power of two).
func roundupPower2Division(n, div uint64) uint64 {
	if n&(n-1) == 0 {
		return n
	}
	floor := uint64(1) << (63 - clz64(n))
	step := floor / div
	if step == 0 {
		return floor << 1
	}
	return roundUp(n, step)
}

func poolOf(size uint64) int {
	if size <= smallSize {
		return poolSmall
	}
	return poolLarge
}

// segmentSize is how much to ask the device for when no cached block fits
// a rounded request of size bytes.
func segmentSize(size uint64) uint64 {
	switch {
	case size <= smallSize:
		return smallBuffer
	case size < minLargeAlloc:
		return largeBuffer
	default:
		return roundUp(size, roundLarge)
	}
}

// Malloc returns the device address of a block of at least size bytes for
// use on stream s. A size of 0 returns address 0 and no error; Free(0) does
// nothing. When memory cannot be found it returns an *OutOfMemoryError
// (errors.Is(err, ErrOutOfMemory) holds).
func (a *Allocator) Malloc(size uint64, s Stream) (uint64, error) {
	ptr, _, err := a.malloc(size, s)
	return ptr, err
}

// malloc is Malloc returning the allocation number too. Call it directly
// from every exported entry point so that the call-stack depth is the same.
func (a *Allocator) malloc(size uint64, s Stream) (ptr, seq uint64, err error) {
	if size == 0 {
		return 0, 0, nil
	}
	var stack *callStack
	if a.cfg.RecordCallSites != CallSitesOff {
		stack = a.captureStack()
	}
	a.mu.Lock()
	b, err := a.mallocLocked(size, s, stack)
	if err != nil {
		if a.trace != nil {
			a.traceLocked(traceAllocFailure, 0, size, s)
		}
		a.mu.Unlock()
		return 0, 0, err
	}
	ptr, seq = b.addr, b.seq
	if a.trace != nil {
		a.traceLocked(traceAlloc, ptr, size, s)
	}
	a.mu.Unlock()
	return ptr, seq, nil
}

func (a *Allocator) mallocLocked(req uint64, s Stream, stack *callStack) (*block, error) {
	if a.closed {
		return nil, ErrClosed
	}
	if a.pendingEvents > 0 {
		if err := a.processEventsLocked(); err != nil {
			return nil, err
		}
	}
	if req > maxRequestSize {
		a.st.numOOMs++
		return nil, a.oomErrorLocked(req, req, req, s, fmt.Errorf("request larger than %d bytes", uint64(maxRequestSize)))
	}
	if a.pg != nil {
		if err := a.pagedTickLocked(); err != nil {
			return nil, err
		}
	}
	size := a.roundSize(req)
	p := poolOf(size)
	b := a.takeFreeLocked(p, size, s)
	if b == nil {
		var err error
		if a.pg != nil && p == poolLarge {
			b, err = a.pagedGrowLocked(size, req, s)
		} else {
			b, err = a.growLocked(p, size, req, s)
		}
		if err != nil {
			return nil, err
		}
	}
	a.allocFoundLocked(b, size, req, stack)
	if a.pg != nil {
		a.pg.notePeak(a.st.pool[poolLarge][statActiveBytes].Current)
	}
	return b, nil
}

// takeFreeLocked removes and returns the best-fitting free block of pool p
// on stream s, or nil.
func (a *Allocator) takeFreeLocked(p int, size uint64, s Stream) *block {
	b := a.pools[p].best(s, size)
	if b == nil {
		return nil
	}
	if size < a.maxSplit && b.size >= a.maxSplit {
		return nil // keep oversize blocks for oversize requests
	}
	if size >= a.maxSplit && b.size >= size+largeBuffer {
		return nil // too much waste for a block that will not be split
	}
	a.pools[p].remove(b)
	return b
}

func (a *Allocator) shouldSplit(b *block, size uint64) bool {
	rest := b.size - size
	if b.seg.pool == poolSmall || b.seg.arena != nil {
		return rest >= minBlockSize
	}
	return size < a.maxSplit && rest > smallSize
}

func (a *Allocator) newBlock() *block {
	if n := len(a.spare); n > 0 {
		b := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return b
	}
	return new(block)
}

func (a *Allocator) recycle(b *block) {
	uses := b.uses[:0]
	*b = block{uses: uses}
	a.spare = append(a.spare, b)
}

// allocFoundLocked hands out b (not in any free index) for a request of req bytes
// rounded to size, splitting off the rest when worth it.
func (a *Allocator) allocFoundLocked(b *block, size, req uint64, stack *callStack) {
	p := b.seg.pool
	if b.isSplit() {
		a.st.dec(statInactiveSplit, p, 1)
		a.st.dec(statInactiveSplitBytes, p, int64(b.size))
	}
	if a.shouldSplit(b, size) {
		r := a.newBlock()
		r.addr, r.size, r.stream, r.seg, r.freed = b.addr+size, b.size-size, b.stream, b.seg, b.freed
		r.prev, r.next = b, b.next
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		b.size = size
		r.state = stateFree
		a.pools[p].insert(r)
		a.st.inc(statInactiveSplit, p, 1)
		a.st.inc(statInactiveSplitBytes, p, int64(r.size))
	}
	a.seq++
	b.state = stateAllocated
	b.requested = req
	b.seq = a.seq
	b.stack = stack
	b.seg.lastUse = a.seq
	a.live.put(b)
	a.st.allocated(p, int64(b.size), int64(req))
	if b.size >= a.maxSplit {
		a.st.oversizeAllocations.increase(1)
	}
}

// Free returns the block at ptr to the allocator. A pointer that is not
// the start of a live allocation gives an error wrapping ErrDoubleFree,
// ErrInteriorPointer or ErrUnknownPointer, and changes nothing.
func (a *Allocator) Free(ptr uint64) error {
	if ptr == 0 {
		return nil
	}
	a.mu.Lock()
	b := a.live.take(ptr)
	if b == nil {
		err := a.badPointerLocked(ptr)
		a.mu.Unlock()
		return fmt.Errorf("alloc: free %#x: %w", ptr, err)
	}
	if a.trace != nil {
		a.traceLocked(traceFree, ptr, b.requested, b.stream)
	}
	err := a.retireLocked(b)
	a.mu.Unlock()
	return err
}

// freeChecked frees ptr only if it is still the allocation numbered seq
// (Buffers and Scopes use it so that a stale handle never frees memory
// that has since been handed to someone else).
func (a *Allocator) freeChecked(ptr, seq uint64) (requested uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.live.get(ptr)
	if b == nil || b.seq != seq {
		return 0, ErrDoubleFree
	}
	if a.trace != nil {
		a.traceLocked(traceFree, ptr, b.requested, b.stream)
	}
	requested = b.requested
	return requested, a.freeLocked(b)
}

// isLive reports whether ptr is still the allocation numbered seq.
func (a *Allocator) isLive(ptr, seq uint64) bool {
	a.mu.Lock()
	b := a.live.get(ptr)
	ok := b != nil && b.seq == seq
	a.mu.Unlock()
	return ok
}

// badPointerLocked explains why ptr is not a live allocation.
func (a *Allocator) badPointerLocked(ptr uint64) error {
	seg := a.segmentAtLocked(ptr)
	if seg == nil {
		return ErrUnknownPointer
	}
	for b := seg.head; b != nil; b = b.next {
		if ptr >= b.addr && ptr < b.addr+b.size {
			if b.state == stateAllocated {
				return fmt.Errorf("%w (allocation at %#x, %d bytes)", ErrInteriorPointer, b.addr, b.size)
			}
			return ErrDoubleFree
		}
	}
	return ErrUnknownPointer
}

// segmentAtLocked returns the segment containing addr, or nil.
func (a *Allocator) segmentAtLocked(addr uint64) *segment {
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr+a.segs[i].size > addr })
	if i < len(a.segs) && a.segs[i].addr <= addr {
		return a.segs[i]
	}
	return nil
}

// freeLocked ends the allocation b: the block becomes pending when other
// streams used it, free otherwise.
func (a *Allocator) freeLocked(b *block) error {
	a.live.del(b.addr)
	return a.retireLocked(b)
}

// retireLocked is freeLocked for a block already taken out of the live
// table.
func (a *Allocator) retireLocked(b *block) error {
	p := b.seg.pool
	a.st.dec(statAllocation, p, 1)
	a.st.dec(statAllocatedBytes, p, int64(b.size))
	if b.size >= a.maxSplit {
		a.st.oversizeAllocations.decrease(1)
	}
	b.seg.lastUse = a.seq
	b.state = statePending
	if len(b.uses) > 0 {
		err := a.insertEventsLocked(b)
		if b.eventCount > 0 {
			return err
		}
	}
	return a.freeBlockLocked(b)
}

// freeBlockLocked returns a block that is no longer active to its pool,
// merging it with free neighbours.
func (a *Allocator) freeBlockLocked(b *block) error {
	p := b.seg.pool
	a.st.dec(statActive, p, 1)
	a.st.dec(statActiveBytes, p, int64(b.size))
	a.st.dec(statRequestedBytes, p, int64(b.requested))
	b.requested = 0
	b.uses = b.uses[:0]
	b.stack = nil
	var err error
	if a.cfg.PoisonOnFree {
		if e := a.dev.Memset(b.addr, PoisonByte, b.size); e != nil {
			err = fmt.Errorf("alloc: poisoning freed block %#x: %w", b.addr, e)
		}
	}
	b.state = stateFree
	a.frees++
	b.freed = a.frees // newer than any neighbour it merges with
	if prev := b.prev; prev != nil && prev.state == stateFree && !prev.unmapped {
		a.pools[p].remove(prev)
		a.st.dec(statInactiveSplit, p, 1)
		a.st.dec(statInactiveSplitBytes, p, int64(prev.size))
		b.addr = prev.addr
		b.size += prev.size
		b.prev = prev.prev
		if b.prev != nil {
			b.prev.next = b
		} else {
			b.seg.head = b
		}
		a.recycle(prev)
	}
	if next := b.next; next != nil && next.state == stateFree && !next.unmapped {
		a.pools[p].remove(next)
		a.st.dec(statInactiveSplit, p, 1)
		a.st.dec(statInactiveSplitBytes, p, int64(next.size))
		b.size += next.size
		b.next = next.next
		if b.next != nil {
			b.next.prev = b
		}
		a.recycle(next)
	}
	if b.isSplit() {
		a.st.inc(statInactiveSplit, p, 1)
		a.st.inc(statInactiveSplitBytes, p, int64(b.size))
	}
	a.pools[p].insert(b)
	return err
}

// errNoRoom marks growth that failed for lack of room (cap or device).
var errNoRoom = errors.New("no room")

type noRoomError struct{ err error }

func (e *noRoomError) Error() string { return e.err.Error() }
func (e *noRoomError) Unwrap() []error {
	return []error{errNoRoom, e.err}
}

// growLocked obtains a block for a request that no cached block fits:
// release by threshold, grow, and on failure release everything cached,
// search again, grow again, and finally report out of memory.
func (a *Allocator) growLocked(p int, size, req uint64, s Stream) (*block, error) {
	want := segmentSize(size)
	if a.gcLimit > 0 {
		if r := a.reservedLocked(); r+want > a.gcLimit {
			if _, err := a.releaseLRULocked(r + want - a.gcLimit); err != nil {
				return nil, err
			}
		}
	}
	seg, err := a.newSegmentLocked(want, p, s)
	if err == nil {
		return seg.head, nil
	}
	if !errors.Is(err, errNoRoom) {
		return nil, err
	}
	// Wait for blocks pending on other streams and search again: one of
	// them may fit (pytorch/pytorch#189504), which saves a release and a
	// device allocation. Only then release the cache and grow again.
	a.st.numAllocRetries++
	if err := a.synchronizeEventsLocked(); err != nil {
		return nil, err
	}
	if b := a.takeFreeLocked(p, size, s); b != nil {
		return b, nil
	}
	if _, rerr := a.releaseCachedLocked(); rerr != nil {
		return nil, rerr
	}
	if a.pg != nil {
		if _, rerr := a.releaseIdleLocked(0, 1, false); rerr != nil {
			return nil, rerr
		}
	}
	seg, err = a.newSegmentLocked(want, p, s)
	if err == nil {
		return seg.head, nil
	}
	if !errors.Is(err, errNoRoom) {
		return nil, err
	}
	a.st.numOOMs++
	return nil, a.oomErrorLocked(req, size, want, s, err)
}

func (a *Allocator) reservedLocked() uint64 {
	return uint64(a.st.all[statReservedBytes].Current)
}

// newSegmentLocked asks the device for size bytes and returns the new
// segment, whose one block is neither allocated nor in a pool yet.
func (a *Allocator) newSegmentLocked(size uint64, p int, s Stream) (*segment, error) {
	if r := a.reservedLocked(); r+size > a.capBytes || r+size < r {
		what := "the cap"
		if a.capBytes == a.total {
			what = "the device's total memory"
		}
		return nil, &noRoomError{fmt.Errorf("growing by %s would pass %s of %s (%s reserved)",
			formatBytes(size), what, formatBytes(a.capBytes), formatBytes(r))}
	}
	t0 := time.Now()
	addr, err := a.dev.Malloc(size)
	a.st.deviceTime(t0)
	if err != nil {
		if errors.Is(err, ErrDeviceOutOfMemory) {
			return nil, &noRoomError{fmt.Errorf("device malloc of %s: %w", formatBytes(size), err)}
		}
		return nil, fmt.Errorf("alloc: device malloc of %d bytes: %w", size, err)
	}
	a.st.numDeviceAlloc++
	seg := &segment{addr: addr, size: size, pool: p, stream: s, lastUse: a.seq}
	b := a.newBlock()
	b.addr, b.size, b.stream, b.seg, b.state = addr, size, s, seg, stateFree
	seg.head = b
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr > addr })
	a.segs = append(a.segs, nil)
	copy(a.segs[i+1:], a.segs[i:])
	a.segs[i] = seg
	a.st.inc(statSegment, p, 1)
	a.st.inc(statReservedBytes, p, int64(size))
	if size >= a.maxSplit {
		a.st.oversizeSegments.increase(1)
	}
	return seg, nil
}

// releasable reports whether seg holds one free block and may be returned.
func (seg *segment) releasable() bool {
	return !seg.prealloc && seg.arena == nil && seg.head.next == nil && seg.head.state == stateFree
}

// releaseSegmentLocked returns a releasable segment to the device. On a
// device error nothing changes.
func (a *Allocator) releaseSegmentLocked(seg *segment) error {
	t0 := time.Now()
	err := a.dev.Free(seg.addr)
	a.st.deviceTime(t0)
	if err != nil {
		return fmt.Errorf("alloc: device free of %#x (%d bytes): %w", seg.addr, seg.size, err)
	}
	a.st.numDeviceFree++
	a.pools[seg.pool].remove(seg.head)
	a.recycle(seg.head)
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr >= seg.addr })
	a.segs = append(a.segs[:i], a.segs[i+1:]...)
	a.st.dec(statSegment, seg.pool, 1)
	a.st.dec(statReservedBytes, seg.pool, int64(seg.size))
	if seg.size >= a.maxSplit {
		a.st.oversizeSegments.decrease(1)
	}
	return nil
}

// releaseCachedLocked waits for outstanding events and releases every
// releasable segment.
func (a *Allocator) releaseCachedLocked() (uint64, error) {
	if err := a.synchronizeEventsLocked(); err != nil {
		return 0, err
	}
	var victims []*segment
	for _, seg := range a.segs {
		if seg.releasable() {
			victims = append(victims, seg)
		}
	}
	var released uint64
	for _, seg := range victims {
		if err := a.releaseSegmentLocked(seg); err != nil {
			return released, err
		}
		released += seg.size
	}
	return released, nil
}

// releaseLRULocked releases releasable segments, least recently used
// first, until at least need bytes are released or none is left.
func (a *Allocator) releaseLRULocked(need uint64) (uint64, error) {
	var victims []*segment
	for _, seg := range a.segs {
		if seg.releasable() {
			victims = append(victims, seg)
		}
	}
	sort.Slice(victims, func(i, j int) bool { return victims[i].lastUse < victims[j].lastUse })
	var released uint64
	for _, seg := range victims {
		if released >= need {
			break
		}
		if err := a.releaseSegmentLocked(seg); err != nil {
			return released, err
		}
		released += seg.size
	}
	return released, nil
}

// EmptyCache waits for outstanding stream events and returns every cached
// segment that holds no live block to the device. It reports the bytes
// released. Memory in segments that still hold a live block stays
// reserved (Stats: inactive_split_bytes).
func (a *Allocator) EmptyCache() (released uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	released, err = a.releaseCachedLocked()
	if err == nil && a.pg != nil {
		var n uint64
		n, err = a.releaseIdleLocked(0, 1, false)
		released += n
	}
	return released, err
}

// Close releases all device memory, preallocated segments included. It
// fails, changing nothing, while allocations are live. Afterwards every
// allocation fails with ErrClosed.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if n := a.live.len(); n > 0 {
		return fmt.Errorf("alloc: close: %d allocations are still live", n)
	}
	if err := a.closeAsync(); err != nil {
		return fmt.Errorf("alloc: close: %w", err)
	}
	if err := a.synchronizeEventsLocked(); err != nil {
		return fmt.Errorf("alloc: close: %w", err)
	}
	if a.pg != nil {
		if err := a.closePagedLocked(); err != nil {
			return fmt.Errorf("alloc: close: %w", err)
		}
	}
	for _, seg := range append([]*segment(nil), a.segs...) {
		seg.prealloc = false
		if !seg.releasable() {
			continue
		}
		if err := a.releaseSegmentLocked(seg); err != nil {
			return fmt.Errorf("alloc: close: %w", err)
		}
	}
	for _, ev := range a.eventPool {
		if err := a.dev.EventDestroy(ev); err != nil {
			return fmt.Errorf("alloc: close: %w", err)
		}
	}
	a.eventPool = nil
	a.live.reset()
	a.closed = true
	return nil
}

// RecordStream marks the allocation at ptr as used on stream s. When it is
// freed, the allocator records an event on s and reuses the block only
// after the event completes, so work queued on s can still read or write
// it. Use on the allocation's own stream needs no record.
func (a *Allocator) RecordStream(ptr uint64, s Stream) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.live.get(ptr)
	if b == nil {
		return fmt.Errorf("alloc: record stream %#x: %w", ptr, a.badPointerLocked(ptr))
	}
	a.recordStreamLocked(b, s)
	return nil
}

func (a *Allocator) recordStreamLocked(b *block, s Stream) {
	if s == b.stream {
		return
	}
	for _, u := range b.uses {
		if u == s {
			return
		}
	}
	b.uses = append(b.uses, s)
}

// insertEventsLocked records an event on every stream in b.uses. If the
// device fails, the block is quarantined (never reused) rather than risk
// handing out memory another stream may still use.
func (a *Allocator) insertEventsLocked(b *block) error {
	for _, s := range b.uses {
		ev, err := a.getEventLocked()
		if err == nil {
			if err = a.dev.EventRecord(ev, s); err != nil {
				a.eventPool = append(a.eventPool, ev)
			}
		}
		if err != nil {
			b.eventCount++ // never completes: the block stays pending
			return fmt.Errorf("alloc: recording an event on stream %#x for freed block %#x (the block will not be reused): %w", uint64(s), b.addr, err)
		}
		q := a.queueLocked(s)
		q.q = append(q.q, pendingEvent{ev, b})
		b.eventCount++
		a.pendingEvents++
	}
	return nil
}

func (a *Allocator) getEventLocked() (Event, error) {
	if n := len(a.eventPool); n > 0 {
		ev := a.eventPool[n-1]
		a.eventPool = a.eventPool[:n-1]
		return ev, nil
	}
	return a.dev.EventCreate()
}

func (a *Allocator) queueLocked(s Stream) *eventQueue {
	for _, q := range a.queues {
		if q.stream == s {
			return q
		}
	}
	q := &eventQueue{stream: s}
	a.queues = append(a.queues, q)
	return q
}

// processEventsLocked polls each stream's events in order and frees the
// blocks whose last event completed.
func (a *Allocator) processEventsLocked() error {
	for _, q := range a.queues {
		for q.head < len(q.q) {
			e := q.q[q.head]
			done, err := a.dev.EventQuery(e.ev)
			if err != nil {
				return fmt.Errorf("alloc: polling stream %#x event: %w", uint64(q.stream), err)
			}
			if !done {
				break
			}
			if err := a.completeEventLocked(q); err != nil {
				return err
			}
		}
		q.compact()
	}
	return nil
}

func (q *eventQueue) compact() {
	if q.head == len(q.q) {
		clear(q.q)
		q.q, q.head = q.q[:0], 0
	}
}

// completeEventLocked retires the event at the head of q.
func (a *Allocator) completeEventLocked(q *eventQueue) error {
	e := q.q[q.head]
	q.q[q.head] = pendingEvent{}
	q.head++
	a.pendingEvents--
	a.eventPool = append(a.eventPool, e.ev)
	e.b.eventCount--
	if e.b.eventCount == 0 {
		return a.freeBlockLocked(e.b)
	}
	return nil
}

// eventSynchronizer is implemented by backends that can block until an
// event completes (cuEventSynchronize); others are polled.
type eventSynchronizer interface {
	EventSynchronize(ev Event) error
}

// synchronizeEventsLocked waits for every outstanding event.
func (a *Allocator) synchronizeEventsLocked() error {
	if a.pendingEvents == 0 {
		return nil
	}
	a.st.numSyncAllStreams++
	syncer, _ := a.dev.(eventSynchronizer)
	for _, q := range a.queues {
		for q.head < len(q.q) {
			ev := q.q[q.head].ev
			if syncer != nil {
				if err := syncer.EventSynchronize(ev); err != nil {
					return fmt.Errorf("alloc: waiting for stream %#x event: %w", uint64(q.stream), err)
				}
			} else {
				for wait := time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
					done, err := a.dev.EventQuery(ev)
					if err != nil {
						return fmt.Errorf("alloc: waiting for stream %#x event: %w", uint64(q.stream), err)
					}
					if done {
						break
					}
					time.Sleep(wait)
				}
			}
			if err := a.completeEventLocked(q); err != nil {
				return err
			}
		}
		q.compact()
	}
	return nil
}
