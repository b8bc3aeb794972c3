package cuda

import (
	"time"
	"unsafe"
)

// Stream is a CUstream handle. The zero Stream is the legacy default stream.
type Stream uintptr

// String formats s for error messages.
func (s Stream) String() string {
	if s == 0 {
		return "stream 0"
	}
	return "stream " + hex(uint64(s))
}

// StreamFlags are the flags of cuStreamCreate.
type StreamFlags uint32

const (
	// StreamDefault creates a blocking stream: work on it is ordered with
	// the legacy default stream (CU_STREAM_DEFAULT).
	StreamDefault StreamFlags = 0x0
	// StreamNonBlocking creates a stream whose work may run concurrently with
	// the legacy default stream (CU_STREAM_NON_BLOCKING).
	StreamNonBlocking StreamFlags = 0x1
)

// StreamCreate creates a stream (cuStreamCreate).
func (c *Context) StreamCreate(flags StreamFlags) (Stream, error) {
	var s Stream
	if r, err := c.call(c.fns().cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags)); err != nil || r != success {
		return 0, fail(err, r, "cuStreamCreate", hex(uint64(flags)))
	}
	return s, nil
}

// StreamDestroy destroys s (cuStreamDestroy_v2). Work already queued on it
// still completes.
func (c *Context) StreamDestroy(s Stream) error {
	if r, err := c.call(c.fns().cuStreamDestroy, uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuStreamDestroy_v2", s.String())
	}
	return nil
}

// StreamSynchronize waits until all work queued on s has completed.
func (c *Context) StreamSynchronize(s Stream) error {
	if r, err := c.call(c.fns().cuStreamSynchronize, uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuStreamSynchronize", s.String())
	}
	return nil
}

// StreamQuery reports whether all work queued on s has completed, without
// waiting (cuStreamQuery).
func (c *Context) StreamQuery(s Stream) (done bool, err error) {
	r, err := c.call(c.fns().cuStreamQuery, uintptr(s))
	switch {
	case err != nil:
		return false, err
	case r == success:
		return true, nil
	case r == ErrorNotReady:
		return false, nil
	}
	return false, newError(r, "cuStreamQuery", s.String())
}

// Event is a CUevent handle.
type Event uintptr

// EventFlags are the flags of cuEventCreate.
type EventFlags uint32

const (
	// EventDefault creates an event that records timing (CU_EVENT_DEFAULT).
	EventDefault EventFlags = 0x0
	// EventBlockingSync makes EventSynchronize sleep instead of spin
	// (CU_EVENT_BLOCKING_SYNC).
	EventBlockingSync EventFlags = 0x1
	// EventDisableTiming creates an event without timing, the cheapest
	// fence; EventElapsedTime refuses it (CU_EVENT_DISABLE_TIMING).
	EventDisableTiming EventFlags = 0x2
)

// EventCreate creates an event (cuEventCreate).
func (c *Context) EventCreate(flags EventFlags) (Event, error) {
	var e Event
	if r, err := c.call(c.fns().cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags)); err != nil || r != success {
		return 0, fail(err, r, "cuEventCreate", hex(uint64(flags)))
	}
	return e, nil
}

// EventRecord captures in e the work queued on s so far (cuEventRecord).
func (c *Context) EventRecord(e Event, s Stream) error {
	if r, err := c.call(c.fns().cuEventRecord, uintptr(e), uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuEventRecord", hex(uint64(e)), s.String())
	}
	return nil
}

// EventQuery reports whether all work captured by e has completed, without
// waiting (cuEventQuery). An event never recorded counts as completed.
func (c *Context) EventQuery(e Event) (done bool, err error) {
	r, err := c.call(c.fns().cuEventQuery, uintptr(e))
	switch {
	case err != nil:
		return false, err
	case r == success:
		return true, nil
	case r == ErrorNotReady:
		return false, nil
	}
	return false, newError(r, "cuEventQuery", hex(uint64(e)))
}

// EventSynchronize waits until the work captured by e has completed.
func (c *Context) EventSynchronize(e Event) error {
	if r, err := c.call(c.fns().cuEventSynchronize, uintptr(e)); err != nil || r != success {
		return fail(err, r, "cuEventSynchronize", hex(uint64(e)))
	}
	return nil
}

// EventDestroy destroys e (cuEventDestroy_v2).
func (c *Context) EventDestroy(e Event) error {
	if r, err := c.call(c.fns().cuEventDestroy, uintptr(e)); err != nil || r != success {
		return fail(err, r, "cuEventDestroy_v2", hex(uint64(e)))
	}
	return nil
}

// EventElapsedTime returns the time between two completed events recorded
// with timing enabled (resolution about half a microsecond).
func (c *Context) EventElapsedTime(start, end Event) (time.Duration, error) {
	var ms float32
	if r, err := c.call(c.fns().cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)); err != nil || r != success {
		return 0, fail(err, r, c.fns().elapsedTimeName, hex(uint64(start)), hex(uint64(end)))
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
