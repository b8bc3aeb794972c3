package alloc

// Asynchronous host↔device copies through the pinned-host pool, and the
// stream-ordered free. See doc.go ("Asynchronous copies").

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

// Staging buffers are filled and drained in chunks, so that the host-side
// copy of one chunk overlaps the DMA of the previous one. A transfer has at
// most maxChunks chunks of at least minChunk bytes.
const (
	minChunk  = 4 << 20
	maxChunks = 16
)

// asyncState is the allocator's part in asynchronous copies. It has its own
// mutex, never held while taking the allocator's.
type asyncState struct {
	mu        sync.Mutex
	pool      *PinnedPool
	events    []Event              // created, idle
	inflight  map[*transferRes]int // copies whose staging buffer is out
	completed uint64
	abandoned uint64
}

// transferRes is what a Transfer holds from the device: its staging buffer
// and events. It does not point at the Transfer, so a Transfer's cleanup can
// use it.
type transferRes struct {
	a       *Allocator
	toHost  bool
	stream  Stream
	pinned  []byte
	events  []Event  // toHost: one per chunk, recorded after it; else one, after the last
	chunks  []uint64 // end offset of each chunk (toHost)
	waiting bool     // Wait is blocking on the events; the reaper leaves it alone
	done    bool     // released: staging buffer and events are back
}

// Transfer is an asynchronous copy between host memory and a Buffer,
// returned by Buffer.CopyFromHostAsync and Buffer.CopyToHostAsync.
//
// For a copy to the host, Wait is what delivers the bytes: the device
// writes a pinned staging buffer, and Wait copies it into the destination
// slice once the copy has completed. Until Wait returns nil the destination
// is not written at all, so reading it early shows its old contents rather
// than a torn copy. A copy to the host whose Transfer is dropped without
// Wait is counted in TransferStats.Abandoned.
//
// For a copy from the host, Wait is optional: the source was staged before
// CopyFromHostAsync returned, work queued later on the stream sees the
// copied bytes, and the staging buffer goes back to the pool when the
// copy's event completes. Wait blocks until then.
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
	InFlight  int    // copies whose staging buffer is still out
	Completed uint64 // copies that completed and gave their staging buffer back
	Abandoned uint64 // copies to the host dropped without Wait (their data never arrived)
}

// Transfers reports the allocator's asynchronous copies.
func (a *Allocator) Transfers() TransferStats {
	s := &a.async
	s.mu.Lock()
	defer s.mu.Unlock()
	return TransferStats{InFlight: len(s.inflight), Completed: s.completed, Abandoned: s.abandoned}
}

// PinnedPool returns the pinned-host pool that stages the allocator's
// asynchronous copies, creating it on first use. It fails, wrapping
// ErrNoAsyncCopy, when the backend has no pinned host memory.
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

// chunkSize is the chunk length for an n-byte transfer.
func chunkSize(n uint64) uint64 {
	return max(minChunk, (n+maxChunks-1)/maxChunks)
}

// start takes a staging buffer of n bytes, after reaping finished copies.
func (a *Allocator) startTransfer(n uint64, s Stream, toHost bool) (*transferRes, error) {
	if _, err := a.asyncCopier(); err != nil {
		return nil, err
	}
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
	pinned, err := pool.Get(n)
	if err != nil {
		return nil, err
	}
	return &transferRes{a: a, toHost: toHost, stream: s, pinned: pinned}, nil
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

// record records a new event on the transfer's stream.
func (r *transferRes) record() error {
	st := &r.a.async
	st.mu.Lock()
	ev, err := r.a.eventLocked()
	st.mu.Unlock()
	if err != nil {
		return err
	}
	if err := r.a.dev.EventRecord(ev, r.stream); err != nil {
		st.mu.Lock()
		st.events = append(st.events, ev)
		st.mu.Unlock()
		return err
	}
	r.events = append(r.events, ev)
	return nil
}

// park hands a transfer whose copies are queued to the in-flight set. A
// transfer that could not record its final event is parked with no way to
// know when the device is done with its staging buffer: that buffer is
// leaked rather than reused.
func (r *transferRes) park() {
	st := &r.a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inflight == nil {
		st.inflight = map[*transferRes]int{}
	}
	st.inflight[r] = 0
}

// reapLocked gives back the staging buffers of copies from the host whose
// event has completed.
func (a *Allocator) reapLocked() error {
	for r := range a.async.inflight {
		if r.toHost || r.waiting || len(r.events) == 0 {
			continue
		}
		done, err := a.dev.EventQuery(r.events[len(r.events)-1])
		if err != nil {
			return fmt.Errorf("querying an asynchronous copy's event: %w", err)
		}
		if done {
			a.releaseLocked(r)
			a.async.completed++
		}
	}
	return nil
}

// releaseLocked returns a finished transfer's staging buffer and events.
func (a *Allocator) releaseLocked(r *transferRes) {
	if r.done {
		return
	}
	r.done = true
	st := &a.async
	delete(st.inflight, r)
	st.events = append(st.events, r.events...)
	r.events = nil
	if st.pool != nil {
		_ = st.pool.Put(r.pinned) // handed out by this pool: cannot fail
	}
	r.pinned = nil
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
// It copies src into a pinned staging buffer from the allocator's
// PinnedPool and queues the host-to-device copy on s, in chunks so the two
// overlap; when it returns, src may be changed or reused at once. Work
// queued on s afterwards sees the copied bytes; the staging buffer goes
// back to the pool when the copy's event has completed. When s is not the
// buffer's stream, the buffer is marked as used on s (RecordStream), so
// freeing it cannot hand its memory out before the copy is done.
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
	return b.startAsync(op, uint64(len(src)), s, false, func(r *transferRes, c AsyncCopier) error {
		n := uint64(len(src))
		chunk := chunkSize(n)
		for off := uint64(0); off < n; off += chunk {
			end := min(off+chunk, n)
			copy(r.pinned[off:end], src[off:end])
			if err := c.CopyHtoDAsync(b.ptr+off, r.pinned[off:end], s); err != nil {
				return err
			}
		}
		return r.record()
	}, nil)
}

// CopyToHostAsync queues a copy of the first len(dst) bytes of the buffer
// into a pinned staging buffer on stream s, after the work already queued
// on s. The bytes reach dst only in Transfer.Wait, which must be called;
// dst is not written before. When s is not the buffer's stream, the buffer
// is marked as used on s (RecordStream).
//
// It fails, wrapping ErrNoAsyncCopy, on a backend without AsyncCopier and
// HostMemory.
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
	return b.startAsync(op, uint64(len(dst)), s, true, func(r *transferRes, c AsyncCopier) error {
		n := uint64(len(dst))
		chunk := chunkSize(n)
		for off := uint64(0); off < n; off += chunk {
			end := min(off+chunk, n)
			if err := c.CopyDtoHAsync(r.pinned[off:end], b.ptr+off, s); err != nil {
				return err
			}
			if err := r.record(); err != nil {
				return err
			}
			r.chunks = append(r.chunks, end)
		}
		return nil
	}, dst)
}

func doneTransfer() *Transfer {
	t := &Transfer{}
	t.once.Do(func() {})
	return t
}

// startAsync runs enqueue with a fresh staging buffer and returns the
// Transfer. If enqueue fails after queueing part of the copy, the staging
// buffer is kept from the pool until the device is done with it.
func (b *Buffer) startAsync(op string, n uint64, s Stream, toHost bool, enqueue func(*transferRes, AsyncCopier) error, dst []byte) (*Transfer, error) {
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
	r, err := a.startTransfer(n, s, toHost)
	if err != nil {
		return nil, fmt.Errorf("alloc: %s on stream %#x: %w", op, uint64(s), err)
	}
	if err := enqueue(r, c); err != nil {
		// Part of the copy may be queued: give the buffer back only after an
		// event says the stream is past it (never, if none can be recorded).
		r.toHost = false // no Transfer: the reaper releases it
		if rerr := r.record(); rerr != nil {
			r.events = nil
			err = fmt.Errorf("%w (and recording an event failed, so its %d-byte staging buffer is not reused: %v)", err, len(r.pinned), rerr)
		}
		r.park()
		return nil, fmt.Errorf("alloc: %s of %d bytes on stream %#x: %w", op, n, uint64(s), err)
	}
	r.park()
	t := &Transfer{res: r, dst: dst}
	if toHost {
		t.clean = runtime.AddCleanup(t, abandon, r)
	}
	return t, nil
}

// abandon is the cleanup of a copy to the host that was never waited for.
func abandon(r *transferRes) {
	a := r.a
	st := &a.async
	st.mu.Lock()
	if r.done || r.waiting {
		st.mu.Unlock()
		return
	}
	r.waiting = true
	evs := r.events
	st.mu.Unlock()
	var err error
	for _, ev := range evs {
		if err = a.waitEvent(ev); err != nil {
			break
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.abandoned++
	if err != nil {
		delete(st.inflight, r) // the device may still write the staging buffer: leak it
		return
	}
	a.releaseLocked(r)
}

// Ready reports, without blocking, whether the device side of the copy has
// completed. For a copy to the host, Wait still has to deliver the bytes.
func (t *Transfer) Ready() (bool, error) {
	r := t.res
	if r == nil {
		return true, nil
	}
	st := &r.a.async
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.done || len(r.events) == 0 {
		return r.done, nil
	}
	done, err := r.a.dev.EventQuery(r.events[len(r.events)-1])
	if err != nil {
		return false, fmt.Errorf("alloc: transfer ready: %w", err)
	}
	return done, nil
}

// Wait blocks until the copy has completed, then (for a copy to the host)
// copies the staged bytes into the destination, and returns the staging
// buffer to the pool.
func (t *Transfer) Wait() error {
	t.once.Do(func() { t.err = t.wait() })
	return t.err
}

func (t *Transfer) wait() error {
	r := t.res
	a := r.a
	st := &a.async
	st.mu.Lock()
	if r.done {
		st.mu.Unlock()
		return nil // a copy from the host the reaper finished
	}
	r.waiting = true
	evs := r.events
	st.mu.Unlock()
	defer t.clean.Stop()

	var err error
	if r.toHost {
		start := uint64(0)
		for i, ev := range evs {
			if err = a.waitEvent(ev); err != nil {
				break
			}
			end := r.chunks[i]
			copy(t.dst[start:end], r.pinned[start:end])
			start = end
		}
	} else if len(evs) > 0 {
		err = a.waitEvent(evs[len(evs)-1])
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		// The device may still use the staging buffer: never reuse it.
		delete(st.inflight, r)
		r.done = true
		return fmt.Errorf("alloc: waiting for an asynchronous copy on stream %#x: %w", uint64(r.stream), err)
	}
	a.releaseLocked(r)
	st.completed++
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
		if !r.toHost && !r.waiting && len(r.events) > 0 {
			r.waiting = true
			wait = append(wait, r)
		}
	}
	st.mu.Unlock()
	for _, r := range wait {
		if err := a.waitEvent(r.events[len(r.events)-1]); err != nil {
			return fmt.Errorf("waiting for an asynchronous copy: %w", err)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, r := range wait {
		a.releaseLocked(r)
		st.completed++
	}
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
