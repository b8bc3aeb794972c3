package alloc

// Buffers and scopes: a checked API over Malloc and Free. See doc.go.

import (
	"fmt"
	"runtime"
	"sync"
)

// Buffer is device memory with bounds and lifetime checks: every method
// fails with ErrFreed once the allocation is freed, instead of touching
// memory that may belong to someone else by then. A Buffer from Alloc owns
// its allocation; one from Slice is a view that shares its owner's.
//
// A Buffer that becomes unreachable without Free is a leak: the garbage
// collector's cleanup returns its memory to the allocator and Leaked
// reports it.
type Buffer struct {
	a      *Allocator
	ptr    uint64 // device address of this buffer (or view)
	n      uint64 // length in bytes
	seq    uint64 // allocation number of the owner
	base   uint64 // owner's address
	stream Stream
	owner  *Buffer // nil for an owner; keeps the owner reachable from views
	scope  *Scope
	clean  runtime.Cleanup
	ext    *external // memory the allocator does not own (Wrap); nil otherwise
}

// leakArg is what a Buffer's cleanup needs; it must not point at the Buffer.
type leakArg struct {
	a        *Allocator
	ptr, seq uint64
}

// Alloc allocates a Buffer of size bytes for use on stream s. Its Len is
// size; its memory is not initialised.
func (a *Allocator) Alloc(size uint64, s Stream) (*Buffer, error) {
	ptr, seq, err := a.malloc(size, s)
	if err != nil {
		return nil, err
	}
	return a.newBuffer(ptr, seq, size, s), nil
}

func (a *Allocator) newBuffer(ptr, seq, size uint64, s Stream) *Buffer {
	b := &Buffer{a: a, ptr: ptr, n: size, seq: seq, base: ptr, stream: s}
	if ptr != 0 {
		b.clean = runtime.AddCleanup(b, func(l leakArg) { l.a.reclaimLeak(l.ptr, l.seq) }, leakArg{a, ptr, seq})
	}
	return b
}

// Ptr returns the buffer's device address (0 for an empty buffer). The
// address is only meaningful while the buffer is live.
func (b *Buffer) Ptr() uint64 { return b.ptr }

// Len returns the buffer's length in bytes.
func (b *Buffer) Len() uint64 { return b.n }

// Stream returns the stream the memory was allocated on.
func (b *Buffer) Stream() Stream { return b.stream }

// root returns the Buffer that owns the allocation.
func (b *Buffer) root() *Buffer {
	if b.owner != nil {
		return b.owner
	}
	return b
}

// check reports ErrFreed when the allocation is gone.
func (b *Buffer) check(op string) error {
	if b.n == 0 {
		return nil
	}
	if b.ext != nil {
		return b.ext.check(op, b.ptr, false)
	}
	if !b.a.isLive(b.base, b.seq) {
		return fmt.Errorf("alloc: %s on buffer %#x: %w", op, b.ptr, ErrFreed)
	}
	return nil
}

// Slice returns a view of n bytes from offset off: no copy, the same
// memory. The view is valid while its owner is live.
func (b *Buffer) Slice(off, n uint64) (*Buffer, error) {
	if off > b.n || n > b.n-off {
		return nil, fmt.Errorf("alloc: slice [%d:%d] of a %d-byte buffer: %w", off, off+n, b.n, ErrOutOfRange)
	}
	if err := b.check("slice"); err != nil {
		return nil, err
	}
	return &Buffer{a: b.a, ptr: b.ptr + off, n: n, seq: b.seq, base: b.base, stream: b.stream, owner: b.root(), ext: b.ext}, nil
}

// CopyFromHost copies src to the start of the buffer.
func (b *Buffer) CopyFromHost(src []byte) error {
	if uint64(len(src)) > b.n {
		return fmt.Errorf("alloc: copy of %d bytes into a %d-byte buffer: %w", len(src), b.n, ErrOutOfRange)
	}
	if len(src) == 0 {
		return nil
	}
	if err := b.checkWrite("copy from host"); err != nil {
		return err
	}
	return wrapDev("copy from host", b.a.dev.CopyHtoD(b.ptr, src))
}

// CopyToHost copies the first len(dst) bytes of the buffer to dst.
func (b *Buffer) CopyToHost(dst []byte) error {
	if uint64(len(dst)) > b.n {
		return fmt.Errorf("alloc: copy of %d bytes out of a %d-byte buffer: %w", len(dst), b.n, ErrOutOfRange)
	}
	if len(dst) == 0 {
		return nil
	}
	if err := b.check("copy to host"); err != nil {
		return err
	}
	return wrapDev("copy to host", b.a.dev.CopyDtoH(dst, b.ptr))
}

// CopyFrom copies all of src, which must be no longer than b and come from
// the same allocator, to the start of b.
func (b *Buffer) CopyFrom(src *Buffer) error {
	if src.a != b.a {
		return fmt.Errorf("alloc: copy between buffers of different allocators")
	}
	if src.n > b.n {
		return fmt.Errorf("alloc: copy of %d bytes into a %d-byte buffer: %w", src.n, b.n, ErrOutOfRange)
	}
	if src.n == 0 {
		return nil
	}
	if err := src.check("copy from"); err != nil {
		return err
	}
	if err := b.checkWrite("copy to"); err != nil {
		return err
	}
	return wrapDev("device copy", b.a.dev.CopyDtoD(b.ptr, src.ptr, src.n))
}

// Memset sets every byte of the buffer to v.
func (b *Buffer) Memset(v byte) error {
	if b.n == 0 {
		return nil
	}
	if err := b.checkWrite("memset"); err != nil {
		return err
	}
	return wrapDev("memset", b.a.dev.Memset(b.ptr, v, b.n))
}

// RecordStream marks the buffer's memory as used on stream s (see
// Allocator.RecordStream).
func (b *Buffer) RecordStream(s Stream) error {
	if b.n == 0 {
		return nil
	}
	if b.ext != nil {
		return b.ext.check("record stream", b.ptr, false)
	}
	a := b.a
	a.mu.Lock()
	defer a.mu.Unlock()
	blk := a.live.get(b.base)
	if blk == nil || blk.seq != b.seq {
		return fmt.Errorf("alloc: record stream on buffer %#x: %w", b.ptr, ErrFreed)
	}
	a.recordStreamLocked(blk, s)
	return nil
}

// Free returns the buffer's memory to the allocator. Freeing a view is an
// error (free its owner); freeing twice gives ErrDoubleFree.
func (b *Buffer) Free() error {
	if b.owner != nil {
		return fmt.Errorf("alloc: free of a view of buffer %#x: free the buffer it was sliced from", b.owner.ptr)
	}
	if b.ext != nil {
		return b.ext.free(b.ptr)
	}
	if b.n == 0 {
		return nil
	}
	if _, err := b.a.freeChecked(b.ptr, b.seq); err != nil {
		return fmt.Errorf("alloc: free buffer %#x: %w", b.ptr, err)
	}
	b.clean.Stop()
	if b.scope != nil {
		b.scope.forget(b.ptr, b.seq)
	}
	return nil
}

// checkWrite is check for an operation that writes to the buffer.
func (b *Buffer) checkWrite(op string) error {
	if b.ext != nil && b.n != 0 {
		return b.ext.check(op, b.ptr, true)
	}
	return b.check(op)
}

func wrapDev(op string, err error) error {
	if err != nil {
		return fmt.Errorf("alloc: %s: %w", op, err)
	}
	return nil
}

// Scope groups allocations so they can be freed together: everything
// allocated through a Scope and not freed by then is freed by Close. A
// Scope is safe for concurrent use.
type Scope struct {
	a      *Allocator
	mu     sync.Mutex
	live   map[uint64]uint64 // ptr → allocation number
	closed bool
}

// NewScope returns an empty scope.
func (a *Allocator) NewScope() *Scope {
	return &Scope{a: a, live: make(map[uint64]uint64)}
}

// Malloc allocates like Allocator.Malloc and records the pointer in the
// scope. Free it with Scope.Free, Allocator.Free or not at all (Close).
func (sc *Scope) Malloc(size uint64, s Stream) (uint64, error) {
	ptr, seq, err := sc.a.malloc(size, s)
	if err != nil || ptr == 0 {
		return ptr, err
	}
	if err := sc.add(ptr, seq); err != nil {
		return 0, err
	}
	return ptr, nil
}

// Alloc allocates a Buffer like Allocator.Alloc and records it in the scope.
func (sc *Scope) Alloc(size uint64, s Stream) (*Buffer, error) {
	ptr, seq, err := sc.a.malloc(size, s)
	if err != nil {
		return nil, err
	}
	b := sc.a.newBuffer(ptr, seq, size, s)
	if ptr == 0 {
		return b, nil
	}
	if err := sc.add(ptr, seq); err != nil {
		return nil, err
	}
	b.scope = sc
	return b, nil
}

// add records an allocation, or frees it again if the scope is closed.
func (sc *Scope) add(ptr, seq uint64) error {
	sc.mu.Lock()
	if !sc.closed {
		sc.live[ptr] = seq
		sc.mu.Unlock()
		return nil
	}
	sc.mu.Unlock()
	_, _ = sc.a.freeChecked(ptr, seq)
	return fmt.Errorf("alloc: scope: %w", ErrClosed)
}

func (sc *Scope) forget(ptr, seq uint64) {
	sc.mu.Lock()
	if sc.live[ptr] == seq {
		delete(sc.live, ptr)
	}
	sc.mu.Unlock()
}

// Free frees one allocation of the scope before Close.
func (sc *Scope) Free(ptr uint64) error {
	if ptr == 0 {
		return nil
	}
	sc.mu.Lock()
	seq, ok := sc.live[ptr]
	delete(sc.live, ptr)
	sc.mu.Unlock()
	if !ok {
		return fmt.Errorf("alloc: scope free %#x: not allocated in this scope: %w", ptr, ErrUnknownPointer)
	}
	if _, err := sc.a.freeChecked(ptr, seq); err != nil {
		return fmt.Errorf("alloc: scope free %#x: %w", ptr, err)
	}
	return nil
}

// Close frees every allocation of the scope that is still live and
// returns the number of bytes (as requested) it freed. Allocations freed
// earlier, by any path, are skipped. Later allocations through the scope
// fail with ErrClosed; Close itself may be called again and frees nothing.
func (sc *Scope) Close() (freed uint64, err error) {
	sc.mu.Lock()
	live := sc.live
	sc.live = map[uint64]uint64{}
	sc.closed = true
	sc.mu.Unlock()
	for ptr, seq := range live {
		n, ferr := sc.a.freeChecked(ptr, seq)
		if ferr == ErrDoubleFree {
			continue // freed already, not through the scope
		}
		if ferr != nil && err == nil {
			err = fmt.Errorf("alloc: scope close: %w", ferr)
		}
		freed += n
	}
	return freed, err
}
