package alloc

// Buffers over memory the allocator does not own (an imported DLPack
// tensor, memory of another framework). See Allocator.Wrap.

import (
	"errors"
	"fmt"
	"sync"
)

// ErrReadOnly: a write (copy into, memset) to a read-only Buffer.
var ErrReadOnly = errors.New("buffer is read-only")

// external is what the Buffers over one wrapped region (its owner and
// every view) share: the release function, called once, and the flags.
type external struct {
	mu       sync.Mutex
	released bool
	release  func() error
	readOnly bool
}

// WrapOptions say how Wrap treats the memory.
type WrapOptions struct {
	// ReadOnly makes every write through the Buffer (and its views) fail
	// with ErrReadOnly.
	ReadOnly bool
	// Release is called by the first Free of the Buffer (never by a view,
	// never twice); nil releases nothing.
	Release func() error
}

// Wrap returns a Buffer over n bytes of device memory at ptr that the
// allocator did not allocate: its copies and memsets go through the
// allocator's device, its Free calls opt.Release exactly once (a second
// Free gives ErrDoubleFree) and every use after Free gives ErrFreed. The
// allocator keeps no record of the memory: it counts in no statistic and
// EmptyCache and Close leave it alone. RecordStream on it does nothing.
func (a *Allocator) Wrap(ptr, n uint64, s Stream, opt WrapOptions) *Buffer {
	return &Buffer{a: a, ptr: ptr, n: n, base: ptr, stream: s,
		ext: &external{release: opt.Release, readOnly: opt.ReadOnly}}
}

// ReadOnly reports whether writes to the buffer are refused (a wrapped
// read-only region, see Wrap).
func (b *Buffer) ReadOnly() bool { return b.ext != nil && b.ext.readOnly }

// Owner returns the Buffer that owns b's allocation: b itself, or the
// buffer b was sliced from.
func (b *Buffer) Owner() *Buffer { return b.root() }

func (e *external) check(op string, ptr uint64, write bool) error {
	e.mu.Lock()
	released := e.released
	e.mu.Unlock()
	if released {
		return fmt.Errorf("alloc: %s on buffer %#x: %w", op, ptr, ErrFreed)
	}
	if write && e.readOnly {
		return fmt.Errorf("alloc: %s on buffer %#x: %w", op, ptr, ErrReadOnly)
	}
	return nil
}

func (e *external) free(ptr uint64) error {
	e.mu.Lock()
	if e.released {
		e.mu.Unlock()
		return fmt.Errorf("alloc: free buffer %#x: %w", ptr, ErrDoubleFree)
	}
	e.released = true
	e.mu.Unlock()
	if e.release != nil {
		if err := e.release(); err != nil {
			return fmt.Errorf("alloc: free buffer %#x: release: %w", ptr, err)
		}
	}
	return nil
}
