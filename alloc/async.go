package alloc

// Asynchronous host↔device copies through the pinned-host pool, and the
// stream-ordered free. See doc.go ("Asynchronous copies").
//
// A copy takes one of two paths.
//
// Zero-copy. When the host slice lies inside a buffer handed out by the
// allocator's PinnedPool, the DMA engine can read or write it directly: one
// CopyHtoDAsync or CopyDtoHAsync of the whole length, one event after it.
// The pool buffer is marked busy until that event has completed, so a Put
// meanwhile is deferred and Get cannot hand the memory out under the DMA.
//
// Staged. Any other host memory (the Go heap, pageable) cannot be the
// target of an asynchronous DMA, so it goes through pinned staging buffers
// of stagingChunk bytes taken from the pool, each with its own event
// recorded after its copy. A buffer goes back to the pool only once its
// event has completed.
//
//   - To the device, the caller's goroutine copies chunk k into a staging
//     buffer while the DMA engine moves chunk k-1: before taking a buffer
//     for a chunk it asks (without blocking) whether the oldest chunk of the
//     same copy is done, and reuses that buffer if so; otherwise it takes
//     another one from the pool. So a copy whose DMA keeps up holds two or
//     three buffers however large it is, and a copy queued behind other
//     work on a busy stream never blocks: it takes as many buffers as it
//     needs. Only when the pool cannot get more pinned memory does it wait
//     for its own oldest chunk.
//   - To the host, every chunk must be queued when CopyToHostAsync is called
//     (work queued on the stream later may overwrite the device memory), so
//     the copy takes one staging buffer per chunk. Wait waits for each
//     chunk's event in turn, copies that chunk out while the DMA engine
//     fills the next ones, and returns its buffer to the pool at once.
//
// The host side of a staged copy is bounded by the host's memcpy rate, not
// by the link: that is the price of pageable memory, which the zero-copy
// path avoids.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// ErrNoAsyncCopy is wrapped by the error of CopyFromHostAsync and
// CopyToHostAsync on a backend that does not implement AsyncCopier and
// HostMemory.
var ErrNoAsyncCopy = errors.New("the device backend has no asynchronous copies")

const (
	// stagingChunk is the size of a staging buffer and of the DMA of one
	// chunk: at 55 GB/s a 4 MiB copy takes about 76 µs, far above the few
	// microseconds of issuing it and recording its event, while the first
	// chunk's host copy, which nothing overlaps, stays short. All staging
	// buffers of copies of 4 MiB or more are of this one size class, so
	// they are reused across copies of any length.
	stagingChunk = 4 << 20
	// copyPiece is the largest single memmove of a staging copy. The Go
	// runtime's memmove uses non-temporal stores from 1 MiB on (amd64). On
	// the H200 host of 2026-12-02, staging copies made in 16 MiB pieces ran
	// at 5.0 GB/s to the device and 5.4 GB/s from it, where the driver's own
	// synchronous copies of pageable memory (staged through its pinned
	// buffers) reached 7.0 and 13.6 GB/s. Pieces of 512 KiB keep memmove on
	// its ordinary cached path; TestGPUAsyncBandwidth measures both ways of
	// copying on the GPU host.
	copyPiece = 512 << 10
)

// hostCopy copies src into dst, which have the same length, in pieces of
// at most copyPiece bytes.
func hostCopy(dst, src []byte) {
	for len(src) > copyPiece {
		copy(dst[:copyPiece], src[:copyPiece])
		dst, src = dst[copyPiece:], src[copyPiece:]
	}
	copy(dst, src)
}

// asyncState is the allocator's part in asynchronous copies. It has its own
// mutex, never held while taking the allocator's; the pinned pool's mutex
// may be taken while holding it.
type asyncState struct {
	mu        sync.Mutex
	pool      *PinnedPool
	events    []Event                   // created, idle
	inflight  map[*transferRes]struct{} // copies with chunks not yet released
	completed uint64
	abandoned uint64
	zeroCopy  uint64
}

// copyChunk is one queued copy of a transfer and the event recorded after it.
type copyChunk struct {
	buf []byte // pinned staging buffer; nil on the zero-copy path
	off uint64 // where the chunk starts in the caller's host slice
	ev  Event
}

// transferRes is what a Transfer holds from the device: its chunks, with
// their staging buffers and events, and on the zero-copy path the caller's
// pool buffer. It does not point at the Transfer, so a Transfer's cleanup
// can use it. chunks is guarded by asyncState.mu; while waiting is set it
// is changed only by the goroutine that set it.
type transferRes struct {
	a       *Allocator
	pool    *PinnedPool
	toHost  bool
	stream  Stream
	chunks  []copyChunk // queued and not yet released, in stream order
	pinned  *pinnedBuf  // zero-copy: the caller's pool buffer, busy until released
	lost    bool        // some pinned memory may still be used by the device: never reused
	failed  bool        // queueing failed: no Transfer; the reaper releases what was queued
	waiting bool        // Wait, the cleanup or Close is waiting for the events; the reaper leaves it alone
	dropped bool        // a copy to the host whose Transfer was dropped: not counted as completed
	done    bool        // released: staging buffers, events and the busy mark are back
}

// Transfer is an asynchronous copy between host memory and a Buffer,
// returned by Buffer.CopyFromHostAsync and Buffer.CopyToHostAsync.
//
// For a staged copy to the host (host memory not from the allocator's
// PinnedPool), Wait is what delivers the bytes: the device writes pinned
// staging buffers, and Wait copies them into the destination slice as each
// chunk completes. Until Wait returns nil the destination is not written
// at all, so reading it early shows its old contents rather than a torn
// copy. For a zero-copy copy to the host (the destination is pool memory)
// the device writes the destination itself; its bytes are complete once
// Wait returns nil or Ready reports true. A copy to the host whose Transfer
// is dropped without Wait is counted in TransferStats.Abandoned.
//
// For a copy from the host, Wait is optional: work queued later on the
// stream sees the copied bytes, and the staging buffers (or the busy mark
// of the caller's pool buffer) go back when the copy's events complete.
// Wait blocks until then.
//
// Wait may be called more than once and from any goroutine; later calls
// return the first call's result.
type Transfer struct {
	res   *transferRes
	dst   []byte
	once  sync.Once
	err   error
	clean runtime.Cleanup
}

// TransferStats counts asynchronous copies.
type TransferStats struct {
	InFlight  int    // copies whose staging buffers or pool buffer are still out
	Completed uint64 // copies that completed and gave their staging buffers back
	Abandoned uint64 // copies to the host dropped without Wait (a staged one's data never arrived)
	ZeroCopy  uint64 // copies queued directly from or to the caller's pool buffer, without staging
}

// Transfers reports the allocator's asynchronous copies.
func (a *Allocator) Transfers() TransferStats {
	s := &a.async
	s.mu.Lock()
	defer s.mu.Unlock()
	return TransferStats{InFlight: len(s.inflight), Completed: s.completed, Abandoned: s.abandoned, ZeroCopy: s.zeroCopy}
}

// PinnedPool returns the pinned-host pool that stages the allocator's
// asynchronous copies, creating it on first use. It fails, wrapping
// ErrNoAsyncCopy, when the backend has no pinned host memory. Host memory
// from this pool is copied by CopyFromHostAsync and CopyToHostAsync
// without staging.
func (a *Allocator) PinnedPool() (*PinnedPool, error) {
	s := &a.async
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.poolLocked()
}

func (a *Allocator) poolLocked() (*PinnedPool, error) {
	if a.async.pool != nil {
		return a.async.pool, nil
	}
	h, ok := a.dev.(HostMemory)
	if !ok {
		return nil, fmt.Errorf("%T does not implement alloc.HostMemory: %w", a.dev, ErrNoAsyncCopy)
	}
	a.async.pool = NewPinnedPool(h)
	return a.async.pool, nil
}

func (a *Allocator) asyncCopier() (AsyncCopier, error) {
	c, ok := a.dev.(AsyncCopier)
	if !ok {
		return nil, fmt.Errorf("%T does not implement alloc.AsyncCopier: %w", a.dev, ErrNoAsyncCopy)
	}
	return c, nil
}

// beginTransfer reaps finished copies and starts a transfer of host, on the
// zero-copy path when host is memory of the allocator's pool.
func (a *Allocator) beginTransfer(s Stream, toHost bool, host []byte) (*transferRes, error) {
	st := &a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := a.reapLocked(); err != nil {
		return nil, err
	}
	pool, err := a.poolLocked()
	if err != nil {
		return nil, err
	}
	return &transferRes{a: a, pool: pool, toHost: toHost, stream: s, pinned: pool.acquire(host)}, nil
}

// eventLocked returns an idle event, creating one if none is idle.
func (a *Allocator) eventLocked() (Event, error) {
	st := &a.async
	if n := len(st.events); n > 0 {
		ev := st.events[n-1]
		st.events = st.events[:n-1]
		return ev, nil
	}
	return a.dev.EventCreate()
}

// recordEvent records an idle event on s.
func (a *Allocator) recordEvent(s Stream) (Event, error) {
	st := &a.async
	st.mu.Lock()
	ev, err := a.eventLocked()
	st.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := a.dev.EventRecord(ev, s); err != nil {
		st.mu.Lock()
		st.events = append(st.events, ev)
		st.mu.Unlock()
		return 0, err
	}
	return ev, nil
}

// queue issues one copy of the transfer (from or to buf, nil on the
// zero-copy path) and records the chunk's event after it. Even when issue
// fails the chunk is kept until an event says the stream is past it. When
// no event can be recorded nothing says when the device is done with the
// chunk's memory, so it is never reused: the staging buffer is never put
// back, the caller's pool buffer stays busy.
func (r *transferRes) queue(buf []byte, off uint64, issue func() error) error {
	err := issue()
	ev, rerr := r.a.recordEvent(r.stream)
	if rerr != nil {
		r.lost = true
		n := uint64(len(buf))
		if buf == nil {
			n = r.pinned.class
		}
		if err != nil {
			return fmt.Errorf("%w (and recording an event after it failed, so its %d bytes of pinned memory are never reused: %v)", err, n, rerr)
		}
		return fmt.Errorf("recording an event after the copy: %w (its %d bytes of pinned memory are never reused)", rerr, n)
	}
	r.chunks = append(r.chunks, copyChunk{buf: buf, off: off, ev: ev})
	return err
}

// stagingBuffer returns a staging buffer of size bytes' class, resliced to
// want bytes, for the next chunk of a copy to the device: the buffer of the
// copy's oldest chunk when its event has completed, else a buffer from the
// pool, else (the pool could not get pinned memory) the oldest chunk's
// buffer once its event completes.
func (r *transferRes) stagingBuffer(size, want uint64) ([]byte, error) {
	a := r.a
	if len(r.chunks) > 0 {
		done, err := a.dev.EventQuery(r.chunks[0].ev)
		if err != nil {
			return nil, fmt.Errorf("querying a staging buffer's event: %w", err)
		}
		if done {
			return r.recycleOldest()[:want], nil
		}
	}
	buf, err := r.pool.Get(size)
	if err == nil {
		return buf[:want], nil
	}
	if len(r.chunks) == 0 {
		return nil, err
	}
	if werr := a.waitEvent(r.chunks[0].ev); werr != nil {
		return nil, fmt.Errorf("%w (and waiting for a staging buffer of the same copy failed: %v)", err, werr)
	}
	return r.recycleOldest()[:want], nil
}

// recycleOldest drops the oldest chunk, whose event has completed, and
// returns its staging buffer for the next chunk.
func (r *transferRes) recycleOldest() []byte {
	st := &r.a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	st.events = append(st.events, c.ev)
	return c.buf
}

// park hands a transfer whose chunks are queued to the in-flight set.
func (r *transferRes) park() {
	a := r.a
	st := &a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.pinned != nil && !r.failed {
		st.zeroCopy++
	}
	if len(r.chunks) == 0 {
		a.finishLocked(r, true)
		return
	}
	if st.inflight == nil {
		st.inflight = map[*transferRes]struct{}{}
	}
	st.inflight[r] = struct{}{}
}

// reapLocked gives back the staging buffers of the chunks of copies from
// the host (and of copies that failed to queue) whose events have
// completed.
func (a *Allocator) reapLocked() error {
	for r := range a.async.inflight {
		if r.waiting || (r.toHost && !r.failed) {
			continue
		}
		for len(r.chunks) > 0 {
			done, err := a.dev.EventQuery(r.chunks[0].ev)
			if err != nil {
				return fmt.Errorf("querying an asynchronous copy's event: %w", err)
			}
			if !done {
				break
			}
			a.releaseChunkLocked(r)
		}
		if len(r.chunks) == 0 {
			a.finishLocked(r, true)
		}
	}
	return nil
}

// releaseChunkLocked returns the oldest chunk's event and staging buffer;
// its event has completed.
func (a *Allocator) releaseChunkLocked(r *transferRes) {
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	a.async.events = append(a.async.events, c.ev)
	if c.buf != nil {
		_ = r.pool.Put(c.buf) // handed out by this pool: cannot fail
	}
}

// finishLocked ends a transfer. The staging buffers of its remaining
// chunks (none when ok) are left with the device: they are never reused.
// Their events are (recording an event again is always allowed).
func (a *Allocator) finishLocked(r *transferRes, ok bool) {
	if r.done {
		return
	}
	r.done = true
	st := &a.async
	delete(st.inflight, r)
	if !ok {
		r.lost = true
		for _, c := range r.chunks {
			st.events = append(st.events, c.ev)
		}
	}
	if r.pinned != nil && !r.lost {
		r.pool.release(r.pinned)
	}
	r.chunks = nil
	if ok && !r.failed && !r.dropped {
		st.completed++
	}
}

// waitEvent blocks until ev completes: cuEventSynchronize when the backend
// has it, polling otherwise.
func (a *Allocator) waitEvent(ev Event) error {
	if syncer, ok := a.dev.(eventSynchronizer); ok {
		return syncer.EventSynchronize(ev)
	}
	for wait := time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		done, err := a.dev.EventQuery(ev)
		if err != nil || done {
			return err
		}
		time.Sleep(wait)
	}
}

// CopyFromHostAsync copies src to the start of the buffer on stream s.
//
// When src lies inside a buffer from the allocator's PinnedPool, the copy
// is queued on s directly from src (zero-copy): src must not be changed
// until the copy is done (Transfer.Wait or Ready, or later work on s), and
// a PinnedPool.Put of its buffer meanwhile takes effect only then. Other
// host memory is staged: copied into pinned staging buffers from the pool,
// chunk by chunk, each chunk's DMA queued on s while the next is copied;
// when CopyFromHostAsync returns, src may be changed or reused at once.
//
// Either way, work queued on s afterwards sees the copied bytes, and pinned
// memory goes back to the pool only when the event recorded after its copy
// has completed. When s is not the buffer's stream, the buffer is marked as
// used on s (RecordStream), so freeing it cannot hand its memory out before
// the copy is done.
//
// It fails, wrapping ErrNoAsyncCopy, on a backend without AsyncCopier and
// HostMemory.
func (b *Buffer) CopyFromHostAsync(src []byte, s Stream) (*Transfer, error) {
	const op = "copy from host async"
	if uint64(len(src)) > b.n {
		return nil, fmt.Errorf("alloc: %s of %d bytes into a %d-byte buffer: %w", op, len(src), b.n, ErrOutOfRange)
	}
	if len(src) == 0 {
		return doneTransfer(), nil
	}
	if err := b.checkWrite(op); err != nil {
		return nil, err
	}
	return b.startAsync(op, src, s, false, func(r *transferRes, c AsyncCopier) error {
		if r.pinned != nil {
			return r.queue(nil, 0, func() error { return c.CopyHtoDAsync(b.ptr, src, s) })
		}
		n := uint64(len(src))
		size := min(n, stagingChunk)
		for off := uint64(0); off < n; off += stagingChunk {
			end := min(off+stagingChunk, n)
			buf, err := r.stagingBuffer(size, end-off)
			if err != nil {
				return err
			}
			hostCopy(buf, src[off:end])
			if err := r.queue(buf, off, func() error { return c.CopyHtoDAsync(b.ptr+off, buf, s) }); err != nil {
				return err
			}
		}
		return nil
	})
}

// CopyToHostAsync queues a copy of the first len(dst) bytes of the buffer
// on stream s, after the work already queued on s.
//
// When dst lies inside a buffer from the allocator's PinnedPool, the device
// writes dst directly (zero-copy); its bytes are complete once
// Transfer.Wait returns nil, and a PinnedPool.Put of its buffer meanwhile
// takes effect only when the copy is done. Other host memory is staged: the
// device writes pinned staging buffers, and the bytes reach dst only in
// Wait, which must be called; dst is not written before.
//
// When s is not the buffer's stream, the buffer is marked as used on s
// (RecordStream). It fails, wrapping ErrNoAsyncCopy, on a backend without
// AsyncCopier and HostMemory.
func (b *Buffer) CopyToHostAsync(dst []byte, s Stream) (*Transfer, error) {
	const op = "copy to host async"
	if uint64(len(dst)) > b.n {
		return nil, fmt.Errorf("alloc: %s of %d bytes out of a %d-byte buffer: %w", op, len(dst), b.n, ErrOutOfRange)
	}
	if len(dst) == 0 {
		return doneTransfer(), nil
	}
	if err := b.check(op); err != nil {
		return nil, err
	}
	return b.startAsync(op, dst, s, true, func(r *transferRes, c AsyncCopier) error {
		if r.pinned != nil {
			return r.queue(nil, 0, func() error { return c.CopyDtoHAsync(dst, b.ptr, s) })
		}
		n := uint64(len(dst))
		size := min(n, stagingChunk)
		for off := uint64(0); off < n; off += stagingChunk {
			end := min(off+stagingChunk, n)
			buf, err := r.pool.Get(size)
			if err != nil {
				return err
			}
			buf = buf[:end-off]
			if err := r.queue(buf, off, func() error { return c.CopyDtoHAsync(buf, b.ptr+off, s) }); err != nil {
				return err
			}
		}
		return nil
	})
}

func doneTransfer() *Transfer {
	t := &Transfer{}
	t.once.Do(func() {})
	return t
}

// startAsync starts a transfer of host and runs enqueue on it. If enqueue
// fails after queueing part of the copy, what it queued is released only
// after its events have completed, by the reaper.
func (b *Buffer) startAsync(op string, host []byte, s Stream, toHost bool, enqueue func(*transferRes, AsyncCopier) error) (*Transfer, error) {
	a := b.a
	if s != b.stream && b.ext == nil {
		if err := b.RecordStream(s); err != nil {
			return nil, err
		}
	}
	c, err := a.asyncCopier()
	if err != nil {
		return nil, fmt.Errorf("alloc: %s: %w", op, err)
	}
	r, err := a.beginTransfer(s, toHost, host)
	if err != nil {
		return nil, fmt.Errorf("alloc: %s on stream %#x: %w", op, uint64(s), err)
	}
	if err := enqueue(r, c); err != nil {
		r.failed = true
		r.park()
		return nil, fmt.Errorf("alloc: %s of %d bytes on stream %#x: %w", op, len(host), uint64(s), err)
	}
	r.park()
	t := &Transfer{res: r}
	if toHost {
		t.dst = host
		t.clean = runtime.AddCleanup(t, abandon, r)
	}
	return t, nil
}

// claim marks r as waited for by the caller, unless it is done or another
// goroutine already waits for it.
func (r *transferRes) claim() bool {
	st := &r.a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.done || r.waiting {
		return false
	}
	r.waiting = true
	return true
}

// drain waits for r's chunks in stream order; deliver, if set, receives
// each chunk once its event has completed, before its staging buffer goes
// back. On an error the remaining chunks' memory is never reused.
func (r *transferRes) drain(deliver func(copyChunk)) error {
	a := r.a
	st := &a.async
	for {
		st.mu.Lock()
		if len(r.chunks) == 0 {
			a.finishLocked(r, true)
			st.mu.Unlock()
			return nil
		}
		c := r.chunks[0]
		st.mu.Unlock()
		if err := a.waitEvent(c.ev); err != nil {
			st.mu.Lock()
			a.finishLocked(r, false)
			st.mu.Unlock()
			return err
		}
		if deliver != nil {
			deliver(c)
		}
		st.mu.Lock()
		a.releaseChunkLocked(r)
		st.mu.Unlock()
	}
}

// abandon is the cleanup of a copy to the host that was never waited for.
func abandon(r *transferRes) {
	if !r.claim() {
		return
	}
	st := &r.a.async
	st.mu.Lock()
	r.dropped = true
	st.mu.Unlock()
	_ = r.drain(nil) // on an error the memory stays with the device
	st.mu.Lock()
	st.abandoned++
	st.mu.Unlock()
}

// Ready reports, without blocking, whether the device side of the copy has
// completed. For a staged copy to the host, Wait still has to deliver the
// bytes.
func (t *Transfer) Ready() (bool, error) {
	r := t.res
	if r == nil {
		return true, nil
	}
	st := &r.a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.done || len(r.chunks) == 0 {
		return r.done, nil
	}
	done, err := r.a.dev.EventQuery(r.chunks[len(r.chunks)-1].ev)
	if err != nil {
		return false, fmt.Errorf("alloc: transfer ready: %w", err)
	}
	return done, nil
}

// Wait blocks until the copy has completed and returns its staging
// buffers to the pool; for a staged copy to the host it copies each chunk
// into the destination as soon as that chunk's event has completed.
func (t *Transfer) Wait() error {
	t.once.Do(func() { t.err = t.wait() })
	return t.err
}

func (t *Transfer) wait() error {
	r := t.res
	defer t.clean.Stop()
	if !r.claim() {
		return nil // a copy from the host the reaper finished
	}
	var deliver func(copyChunk)
	if r.toHost && r.pinned == nil {
		deliver = func(c copyChunk) { hostCopy(t.dst[c.off:c.off+uint64(len(c.buf))], c.buf) }
	}
	if err := r.drain(deliver); err != nil {
		return fmt.Errorf("alloc: waiting for an asynchronous copy on stream %#x: %w", uint64(r.stream), err)
	}
	return nil
}

// closeAsync waits for the copies from the host still in flight, returns
// their staging buffers, destroys the idle events and empties the pinned
// pool. Copies to the host not yet waited for keep their buffers and
// events: Wait them before Close.
func (a *Allocator) closeAsync() error {
	st := &a.async
	st.mu.Lock()
	var wait []*transferRes
	for r := range st.inflight {
		if !r.waiting && (!r.toHost || r.failed) {
			r.waiting = true
			wait = append(wait, r)
		}
	}
	st.mu.Unlock()
	for _, r := range wait {
		if err := r.drain(nil); err != nil {
			return fmt.Errorf("waiting for an asynchronous copy: %w", err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, ev := range st.events {
		if err := a.dev.EventDestroy(ev); err != nil {
			return err
		}
	}
	st.events = st.events[:0]
	if st.pool != nil {
		if _, err := st.pool.EmptyCache(); err != nil {
			return err
		}
	}
	return nil
}

// FreeAsync frees the buffer in stream order on s: its memory is handed out
// again only once the work queued on s so far has completed, so kernels and
// copies on s may still use it. On the buffer's own stream that is what
// Free does already (the allocator reuses a freed block only for work on
// the stream it was allocated on, which runs after the work queued before
// the free); on another stream it records the use (RecordStream) and frees,
// and the block waits for an event on s. For memory the allocator does not
// own (Wrap), it waits for s before calling the producer's deleter.
func (b *Buffer) FreeAsync(s Stream) error {
	if b.owner != nil {
		return fmt.Errorf("alloc: free async of a view of buffer %#x: free the buffer it was sliced from", b.owner.ptr)
	}
	if b.n == 0 {
		return nil
	}
	if b.ext != nil {
		if err := b.waitStream(s); err != nil {
			return fmt.Errorf("alloc: free async of buffer %#x: %w", b.ptr, err)
		}
		return b.Free()
	}
	if s != b.stream {
		if err := b.RecordStream(s); err != nil {
			return fmt.Errorf("alloc: free async: %w", err)
		}
	}
	return b.Free()
}

// waitStream records an event on s and waits for it.
func (b *Buffer) waitStream(s Stream) error {
	a := b.a
	st := &a.async
	st.mu.Lock()
	ev, err := a.eventLocked()
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if err = a.dev.EventRecord(ev, s); err == nil {
		err = a.waitEvent(ev)
	}
	st.mu.Lock()
	st.events = append(st.events, ev)
	st.mu.Unlock()
	return err
}
