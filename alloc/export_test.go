package alloc

// Export guts for testing.

import (
	"errors"
	"fmt"
)

var (
	PoolOf      = poolOf
	SegmentSize = segmentSize
	FormatBytes = formatBytes
)

const (
	PoolSmall = poolSmall
	PoolLarge = poolLarge
)

func (a *Allocator) RoundSize(n uint64) uint64 { return a.roundSize(n) }

// SegmentCount returns the number of segments and how many of them could
// be released (no live or pending block, not preallocated).
func (a *Allocator) SegmentCount() (total, releasable int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, seg := range a.segs {
		if seg.releasable() {
			releasable++
		}
	}
	return len(a.segs), releasable
}

// BlockSize returns the rounded size of the live allocation at ptr.
func (a *Allocator) BlockSize(ptr uint64) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b := a.live.get(ptr); b != nil {
		return b.size
	}
	return 0
}

// CheckInvariants checks every invariant listed in doc.go and recounts the
// statistics from the blocks the slow way.
func (a *Allocator) CheckInvariants() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var recount [numStatKinds][3]int64
	add := func(kind, pool int, n int64) {
		recount[kind][0] += n
		recount[kind][pool+1] += n
	}
	var oversizeAllocs, oversizeSegs int64
	freeBlocks := map[*block]bool{}
	allocated := 0
	for i, seg := range a.segs {
		if i > 0 && a.segs[i-1].addr+a.segs[i-1].size > seg.addr {
			fail("segments %#x and %#x overlap or are out of order", a.segs[i-1].addr, seg.addr)
		}
		add(statSegment, seg.pool, 1)
		if seg.arena != nil {
			add(statReservedBytes, seg.pool, int64(a.countMappedLocked(seg.arena)))
		} else {
			add(statReservedBytes, seg.pool, int64(seg.size))
		}
		if seg.size >= a.maxSplit {
			oversizeSegs++
		}
		if seg.head == nil || seg.head.prev != nil {
			fail("segment %#x: bad head", seg.addr)
			continue
		}
		end := seg.addr
		for b := seg.head; b != nil; b = b.next {
			if b.seg != seg {
				fail("block %#x: wrong segment", b.addr)
			}
			if b.addr != end {
				fail("segment %#x: block at %#x, expected %#x (gap or overlap)", seg.addr, b.addr, end)
			}
			if b.size == 0 || b.size%minBlockSize != 0 {
				fail("block %#x: size %d", b.addr, b.size)
			}
			if b.stream != seg.stream {
				fail("block %#x: stream %d in a segment of stream %d", b.addr, b.stream, seg.stream)
			}
			if b.next != nil && b.next.prev != b {
				fail("block %#x: broken links", b.addr)
			}
			if b.next != nil && b.state == stateFree && b.next.state == stateFree && b.unmapped == b.next.unmapped {
				fail("blocks %#x and %#x are both free and adjacent", b.addr, b.next.addr)
			}
			end = b.addr + b.size
			switch b.state {
			case stateAllocated:
				allocated++
				if a.live.get(b.addr) != b {
					fail("allocated block %#x not in the live map", b.addr)
				}
				add(statAllocation, seg.pool, 1)
				add(statAllocatedBytes, seg.pool, int64(b.size))
				add(statActive, seg.pool, 1)
				add(statActiveBytes, seg.pool, int64(b.size))
				add(statRequestedBytes, seg.pool, int64(b.requested))
				if b.requested > b.size || b.requested == 0 {
					fail("block %#x: requested %d of %d", b.addr, b.requested, b.size)
				}
				if b.size >= a.maxSplit {
					oversizeAllocs++
				}
			case statePending:
				if b.eventCount <= 0 {
					fail("pending block %#x has no events", b.addr)
				}
				add(statActive, seg.pool, 1)
				add(statActiveBytes, seg.pool, int64(b.size))
				add(statRequestedBytes, seg.pool, int64(b.requested))
			case stateRetiring:
				// A moved chunk's old mapping: address space only, its
				// memory is counted where the chunk is now.
				if seg.arena == nil {
					fail("retiring block %#x outside an arena", b.addr)
				}
			case stateFree:
				if b.unmapped {
					break // an arena's address space with no page: not in a pool
				}
				freeBlocks[b] = true
				if b.isSplit() {
					add(statInactiveSplit, seg.pool, 1)
					add(statInactiveSplitBytes, seg.pool, int64(b.size))
				}
			}
		}
		if end != seg.addr+seg.size {
			fail("segment %#x: blocks end at %#x, segment at %#x", seg.addr, end, seg.addr+seg.size)
		}
	}
	if allocated != a.live.len() {
		fail("live map has %d entries, %d blocks are allocated", a.live.len(), allocated)
	}
	inIndex := 0
	for p := range a.pools {
		for _, x := range a.pools[p].idx {
			n := 0
			for c := 0; c < numClasses; c++ {
				bit := x.words[c>>6]>>(c&63)&1 == 1
				if bit != (x.heads[c] != nil) {
					fail("pool %d stream %d class %d: bitmap says %v", p, x.stream, c, bit)
				}
				if (x.words[c>>6] != 0) != (x.summary>>(c>>6)&1 == 1) {
					fail("pool %d stream %d: summary bit of word %d wrong", p, x.stream, c>>6)
				}
				var prev *block
				for b := x.heads[c]; b != nil; b = b.right {
					n++
					if b.left != prev {
						fail("class list links broken at %#x", b.addr)
					}
					prev = b
					if !freeBlocks[b] {
						fail("pool %d: block %#x in the index is not a free block of a segment", p, b.addr)
					}
					if classOf(b.size) != c || b.stream != x.stream || b.seg == nil || b.seg.pool != p {
						fail("block %#x (size %d, stream %d) filed in pool %d stream %d class %d", b.addr, b.size, b.stream, p, x.stream, c)
					}
				}
			}
			if n != x.n {
				fail("pool %d stream %d: index has %d blocks, count says %d", p, x.stream, n, x.n)
			}
			inIndex += n
		}
	}
	if inIndex != len(freeBlocks) {
		fail("%d free blocks, %d in the indexes", len(freeBlocks), inIndex)
	}
	for k := range recount {
		for i := range recount[k] {
			st := a.st.get(k, i)
			if st.Current != recount[k][i] {
				fail("stat %s[%d].current = %d, recount %d", statNames[k], i, st.Current, recount[k][i])
			}
			if st.Peak < st.Current || st.Allocated-st.Freed != st.Current && st.Allocated != 0 {
				// After ResetAccumulatedStats the identity no longer holds;
				// tests that reset do not call this.
				fail("stat %s[%d] inconsistent: %+v", statNames[k], i, st)
			}
		}
	}
	if a.st.oversizeAllocations.Current != oversizeAllocs {
		fail("oversize_allocations %d, recount %d", a.st.oversizeAllocations.Current, oversizeAllocs)
	}
	if a.st.oversizeSegments.Current != oversizeSegs {
		fail("oversize_segments %d, recount %d", a.st.oversizeSegments.Current, oversizeSegs)
	}
	if r := uint64(recount[statReservedBytes][0]); r > a.capBytes {
		fail("reserved %d passes the cap %d", r, a.capBytes)
	}
	pending := 0
	for _, q := range a.queues {
		pending += len(q.q) - q.head
	}
	if pending != a.pendingEvents {
		fail("%d queued events, count says %d", pending, a.pendingEvents)
	}
	if a.pg != nil {
		a.checkPagedLocked(fail)
	}
	return errors.Join(errs...)
}

var ClassOf = classOf

const NumClasses = numClasses

// RecordMarkers records the page-mapped mode's stream markers now, as a
// growth or a release window does after its work.
func (a *Allocator) RecordMarkers() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recordMarkersLocked()
}
