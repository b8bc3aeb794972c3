package alloc

// The pinned host-memory pool. See doc.go for an overview of the device pool.

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// minPinnedSize is the smallest size class of the pinned pool.
const minPinnedSize = 4 << 10

// PinnedPool caches page-locked host memory, whose allocation (cuMemHostAlloc)
// is slow and synchronising. Sizes are rounded up to a power of two (at
// least 4 KiB) and each size class keeps a free list; Put returns a buffer to
// its class and EmptyCache gives all cached buffers back to the backend.
// It is simple on purpose: no splitting, no streams (callers must not Put a
// buffer that an asynchronous copy still uses; Buffer's asynchronous copies
// put their staging buffers back only after the copy's event completed).
// Safe for concurrent use.
type PinnedPool struct {
	h      HostMemory
	mu     sync.Mutex
	free   map[uint64][][]byte // size class → cached buffers (full capacity)
	out    map[*byte]uint64    // first byte of each handed-out buffer → class
	cached uint64              // bytes in free
	inUse  uint64              // bytes handed out
}

// NewPinnedPool returns a pool over h.
func NewPinnedPool(h HostMemory) *PinnedPool {
	return &PinnedPool{h: h, free: map[uint64][][]byte{}, out: map[*byte]uint64{}}
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
		p.inUse += class
		p.out[&b[0]] = class
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
	p.out[&b[0]] = class
	p.inUse += class
	p.mu.Unlock()
	return b[:n], nil
}

// Put returns a buffer obtained from Get (any reslice of it that keeps its
// first byte). Putting a buffer the pool did not hand out is an error.
func (p *PinnedPool) Put(b []byte) error {
	if cap(b) == 0 {
		return fmt.Errorf("alloc: pinned put of an empty buffer: %w", ErrUnknownPointer)
	}
	first := &b[:1][0]
	p.mu.Lock()
	defer p.mu.Unlock()
	class, ok := p.out[first]
	if !ok {
		return fmt.Errorf("alloc: pinned put: buffer was not handed out by this pool (or was put twice): %w", ErrUnknownPointer)
	}
	delete(p.out, first)
	p.free[class] = append(p.free[class], b[:class:class])
	p.cached += class
	p.inUse -= class
	return nil
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

// Usage reports the bytes handed out and the bytes cached.
func (p *PinnedPool) Usage() (inUse, cached uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse, p.cached
}
