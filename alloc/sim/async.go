package sim

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/vramhq/vram/alloc"
)

// Asynchronous copies (alloc.AsyncCopier). A copy queued on a stream runs
// when the stream's work completes: at once while events are not held, or,
// with HoldEvents, when CompleteStream or CompleteEvents completes the
// stream. Until then the host buffer is not read (host to device) or not
// written (device to host), exactly the window in which a real DMA engine
// may still be using it. A test that reuses a staging buffer too early sees
// the wrong bytes arrive.
//
// Like the driver, the host side must be pinned memory (from HostAlloc): a
// Go heap slice is refused. A copy whose device range is no longer valid
// when it runs (the memory was freed meanwhile) is an asynchronous error: it
// is reported, and kept, by AsyncError and the next EventQuery, as the
// driver's sticky errors are.

// queuedOp is an asynchronous copy waiting for its stream to run.
type queuedOp struct {
	stream alloc.Stream
	seq    uint64       // order among all queued copies
	run    func() error // called with d.mu held
}

var _ alloc.AsyncCopier = (*Device)(nil)

// CopyHtoDAsync implements alloc.AsyncCopier.
func (d *Device) CopyHtoDAsync(dst uint64, src []byte, s alloc.Stream) error {
	return d.copyAsync(KindCopyHtoDAsync, "host to device", dst, src, s, writeSpans)
}

// CopyDtoHAsync implements alloc.AsyncCopier.
func (d *Device) CopyDtoHAsync(dst []byte, src uint64, s alloc.Stream) error {
	return d.copyAsync(KindCopyDtoHAsync, "device to host", src, dst, s, readSpans)
}

// copyAsync is both directions of an asynchronous copy between the device
// range at addr and the pinned host buffer host, dir naming the direction
// in errors. It checks the buffer and the range when the copy is queued,
// and queues move (writeSpans to the device, readSpans to the host) with a
// second look at the range when the stream runs it, since the memory may
// have been freed meanwhile.
func (d *Device) copyAsync(k Kind, dir string, addr uint64, host []byte, s alloc.Stream, move func([]span, uint64, []byte)) (err error) {
	n := uint64(len(host))
	c, err := d.enter(k, n, addr)
	defer d.leave(c, &err)
	if err != nil || n == 0 {
		return err
	}
	if err := d.checkPinnedLocked("copy "+dir+" async", host); err != nil {
		return err
	}
	if _, err := d.resolveLocked(addr, n); err != nil {
		return fmt.Errorf("copy %s async: %w", dir, err)
	}
	return d.queueLocked(s, func() error {
		spans, err := d.resolveLocked(addr, n)
		if err != nil {
			return fmt.Errorf("sim: asynchronous copy %s on stream %d: %w", dir, s, err)
		}
		move(spans, 0, host)
		return nil
	})
}

// queueLocked runs op now when nothing holds its stream back, or queues it.
func (d *Device) queueLocked(s alloc.Stream, op func() error) error {
	if !d.holdEvents && !d.queuedOnLocked(s) {
		return op()
	}
	d.opSeq++
	d.ops = append(d.ops, queuedOp{stream: s, seq: d.opSeq, run: op})
	if d.copyLag > 0 {
		d.catchUpLocked(s)
	}
	return nil
}

// LagCopies makes every stream, while events are held, behave like a DMA
// engine that runs k copies behind the host: when a copy is queued on a
// stream that already has k copies queued, the stream runs its oldest one,
// and the events recorded on the stream before its oldest copy still
// queued complete. The rest waits for CompleteEvents or CompleteStream, as
// without a lag. So a test can check that a pipeline reuses a staging
// buffer exactly when the event after its copy has completed, and not
// before. k <= 0 (the default) turns the lag off.
func (d *Device) LagCopies(k int) {
	d.mu.Lock()
	d.copyLag = max(k, 0)
	d.mu.Unlock()
}

// catchUpLocked runs the oldest copies queued on s until at most copyLag
// are left, then completes the events that precede the oldest one left.
func (d *Device) catchUpLocked(s alloc.Stream) {
	queued := 0
	for _, op := range d.ops {
		if op.stream == s {
			queued++
		}
	}
	if queued <= d.copyLag {
		return // the stream did not move
	}
	for ; queued > d.copyLag; queued-- {
		i := slices.IndexFunc(d.ops, func(op queuedOp) bool { return op.stream == s })
		op := d.ops[i]
		d.ops = slices.Delete(d.ops, i, i+1)
		if err := op.run(); err != nil && d.asyncErr == nil {
			d.asyncErr = err
		}
	}
	i := slices.IndexFunc(d.ops, func(op queuedOp) bool { return op.stream == s })
	if i < 0 {
		return
	}
	next := d.ops[i].seq
	for _, e := range d.events {
		if e.pending && e.stream == s && e.pos < next {
			e.pending = false
		}
	}
}

func (d *Device) queuedOnLocked(s alloc.Stream) bool {
	for _, op := range d.ops {
		if op.stream == s {
			return true
		}
	}
	return false
}

// runOpsLocked runs, in order, the queued copies of stream s (all streams
// when all is set).
func (d *Device) runOpsLocked(s alloc.Stream, all bool) {
	kept := d.ops[:0]
	for _, op := range d.ops {
		if !all && op.stream != s {
			kept = append(kept, op)
			continue
		}
		if err := op.run(); err != nil && d.asyncErr == nil {
			d.asyncErr = err
		}
	}
	clear(d.ops[len(kept):])
	d.ops = kept
}

// checkPinnedLocked refuses host memory that HostAlloc did not hand out.
func (d *Device) checkPinnedLocked(op string, b []byte) error {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	for p, n := range d.host {
		base := uintptr(unsafe.Pointer(p))
		if lo >= base && hi <= base+uintptr(n) {
			return nil
		}
	}
	return fmt.Errorf("sim: %s of %d bytes: host memory is not from HostAlloc (pageable memory cannot be copied asynchronously): %w",
		op, len(b), ErrInvalidValue)
}

// QueuedCopies returns the number of asynchronous copies waiting for their
// stream.
func (d *Device) QueuedCopies() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.ops)
}

// AsyncError returns the first error of an asynchronous copy that ran (the
// device range was invalid by then), or nil.
func (d *Device) AsyncError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asyncErr
}
