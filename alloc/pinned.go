package alloc

// The pinned host-memory pool. See doc.go for an overview of the device pool.

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"
)

// minPinnedSize is the smallest size class of the pinned pool.
const minPinnedSize = 4 << 10

// PinnedPool caches page-locked host memory, whose allocation (cuMemHostAlloc)
// is slow and synchronising. Sizes are rounded up to a power of two (at
// least 4 KiB) and each size class keeps a free list; Put returns a buffer to
// its class and EmptyCache gives all cached buffers back to the backend.
// There is no splitting and no stream ordering of its own.
//
// A buffer of the allocator's pool (Allocator.PinnedPool) that is the source
// or destination of an asynchronous copy (Buffer.CopyFromHostAsync,
// CopyToHostAsync) is copied without staging, and the pool knows it is in
// use by the device: a Put while such a copy is in flight is accepted but
// takes effect only when the copy's event has completed, so Get cannot hand
// the memory out again while the DMA may still read or write it. The
// allocator's own staging buffers come from the same pool and go back only
// after their copy's event has completed too.
//
// Safe for concurrent use.
type PinnedPool struct {
	h      HostMemory
	mu     sync.Mutex
	free   map[uint64][][]byte // size class → cached buffers (full capacity)
	out    map[*byte]*pinnedBuf
	byAddr []*pinnedBuf // the buffers of out, sorted by address (for find)
	cached uint64       // bytes in free
	inUse  uint64       // bytes handed out (including Puts deferred by a copy)
}

// pinnedBuf is a buffer handed out by Get.
type pinnedBuf struct {
	b     []byte // full capacity
	class uint64
	busy  int  // asynchronous copies in flight that use it directly
	put   bool // Put while busy: it goes back to the free list when busy drops to 0
}

func (e *pinnedBuf) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(e.b))) }

// NewPinnedPool returns a pool over h.
func NewPinnedPool(h HostMemory) *PinnedPool {
	return &PinnedPool{h: h, free: map[uint64][][]byte{}, out: map[*byte]*pinnedBuf{}}
}

func pinnedClass(n uint64) uint64 {
	if n <= minPinnedSize {
		return minPinnedSize
	}
	return 1 << bits.Len64(n-1)
}

// Get returns a pinned buffer of length n (its capacity is the size class).
func (p *PinnedPool) Get(n uint64) ([]byte, error) {
	if n == 0 {
		return nil, errors.New("alloc: pinned get of 0 bytes")
	}
	if n > 1<<50 {
		return nil, fmt.Errorf("alloc: pinned get of %d bytes: too large", n)
	}
	class := pinnedClass(n)
	p.mu.Lock()
	if l := p.free[class]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[class] = l[:len(l)-1]
		p.cached -= class
		p.handOutLocked(b, class)
		p.mu.Unlock()
		return b[:n], nil
	}
	p.mu.Unlock()
	b, err := p.h.HostAlloc(class)
	if err != nil {
		return nil, fmt.Errorf("alloc: pinned host alloc of %d bytes: %w", class, err)
	}
	if uint64(len(b)) < class {
		_ = p.h.HostFree(b)
		return nil, fmt.Errorf("alloc: pinned host alloc of %d bytes returned %d", class, len(b))
	}
	b = b[:class:class]
	p.mu.Lock()
	p.handOutLocked(b, class)
	p.mu.Unlock()
	return b[:n], nil
}

func (p *PinnedPool) handOutLocked(b []byte, class uint64) {
	e := &pinnedBuf{b: b, class: class}
	p.out[&b[0]] = e
	i, _ := slices.BinarySearchFunc(p.byAddr, e.addr(), func(x *pinnedBuf, a uintptr) int { return cmpAddr(x.addr(), a) })
	p.byAddr = slices.Insert(p.byAddr, i, e)
	p.inUse += class
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Put returns a buffer obtained from Get (any reslice of it that keeps its
// first byte). Putting a buffer the pool did not hand out, or putting it
// twice, is an error. A buffer that an asynchronous copy still uses
// directly is taken back when that copy's event has completed.
func (p *PinnedPool) Put(b []byte) error {
	if cap(b) == 0 {
		return fmt.Errorf("alloc: pinned put of an empty buffer: %w", ErrUnknownPointer)
	}
	first := &b[:1][0]
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.out[first]
	if !ok || e.put {
		return fmt.Errorf("alloc: pinned put: buffer was not handed out by this pool (or was put twice): %w", ErrUnknownPointer)
	}
	if e.busy > 0 {
		e.put = true
		return nil
	}
	p.takeBackLocked(e)
	return nil
}

// takeBackLocked moves a handed-out buffer to its free list.
func (p *PinnedPool) takeBackLocked(e *pinnedBuf) {
	delete(p.out, &e.b[0])
	if i, ok := p.indexLocked(e.addr()); ok {
		p.byAddr = slices.Delete(p.byAddr, i, i+1)
	}
	p.free[e.class] = append(p.free[e.class], e.b)
	p.cached += e.class
	p.inUse -= e.class
}

func (p *PinnedPool) indexLocked(addr uintptr) (int, bool) {
	return slices.BinarySearchFunc(p.byAddr, addr, func(x *pinnedBuf, a uintptr) int { return cmpAddr(x.addr(), a) })
}

// acquire marks the handed-out buffer that holds all of b (a non-empty
// slice) as used by the device and returns it, or returns nil when b is not
// inside one buffer handed out by this pool and not yet put back. release
// undoes it.
func (p *PinnedPool) acquire(b []byte) *pinnedBuf {
	if len(b) == 0 {
		return nil
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.indexLocked(lo)
	if !ok {
		i-- // the last buffer starting below lo, if any
	}
	if i < 0 {
		return nil
	}
	e := p.byAddr[i]
	off, size := lo-e.addr(), uintptr(e.class)
	if e.put || off >= size || uintptr(len(b)) > size-off {
		return nil
	}
	e.busy++
	return e
}

// release ends one use of a buffer from acquire; a Put made meanwhile takes
// effect when the last use ends.
func (p *PinnedPool) release(e *pinnedBuf) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.busy--
	if e.busy == 0 && e.put {
		p.takeBackLocked(e)
	}
}

// EmptyCache frees every cached buffer and returns the bytes freed.
func (p *PinnedPool) EmptyCache() (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var freed uint64
	for class, l := range p.free {
		for len(l) > 0 {
			if err := p.h.HostFree(l[len(l)-1]); err != nil {
				p.free[class] = l
				return freed, fmt.Errorf("alloc: pinned host free: %w", err)
			}
			l = l[:len(l)-1]
			freed += class
			p.cached -= class
		}
		delete(p.free, class)
	}
	return freed, nil
}

// Usage reports the bytes handed out and the bytes cached. A buffer put
// back while an asynchronous copy still used it counts as handed out until
// the copy is done.
func (p *PinnedPool) Usage() (inUse, cached uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse, p.cached
}
