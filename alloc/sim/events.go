package sim

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
)

type event struct {
	stream  alloc.Stream
	pending bool   // recorded and not yet completed
	pos     uint64 // the sequence number of the last copy queued when it was recorded
}

// NewStream returns a fresh stream handle for tests. The simulated device
// runs no work, so a stream only names where events were recorded.
func (d *Device) NewStream() alloc.Stream {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastStream++
	return d.lastStream
}

// EventCreate implements alloc.Device.
func (d *Device) EventCreate() (ev alloc.Event, err error) {
	c, err := d.enter(KindEventCreate, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, err
	}
	d.lastEvent++
	d.events[d.lastEvent] = &event{}
	return d.lastEvent, nil
}

// EventRecord implements alloc.Device. The event completes at once unless
// events are held (Config.HoldEvents, HoldEvents).
func (d *Device) EventRecord(ev alloc.Event, s alloc.Stream) (err error) {
	c, err := d.enter(KindEventRecord, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	e, ok := d.events[ev]
	if !ok {
		return fmt.Errorf("sim: event record: no such event %d: %w", ev, ErrInvalidValue)
	}
	e.stream, e.pending, e.pos = s, d.holdEvents || d.queuedOnLocked(s), d.opSeq
	return nil
}

// EventQuery implements alloc.Device. An event never recorded is complete,
// as in the driver.
func (d *Device) EventQuery(ev alloc.Event) (done bool, err error) {
	c, err := d.enter(KindEventQuery, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return false, err
	}
	e, ok := d.events[ev]
	if !ok {
		return false, fmt.Errorf("sim: event query: no such event %d: %w", ev, ErrInvalidValue)
	}
	if d.asyncErr != nil {
		return false, d.asyncErr
	}
	return !e.pending, nil
}

// EventDestroy implements alloc.Device.
func (d *Device) EventDestroy(ev alloc.Event) (err error) {
	c, err := d.enter(KindEventDestroy, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	if _, ok := d.events[ev]; !ok {
		return fmt.Errorf("sim: event destroy: no such event %d: %w", ev, ErrInvalidValue)
	}
	delete(d.events, ev)
	return nil
}

// HoldEvents sets whether events recorded from now on stay pending until
// CompleteEvents or CompleteStream. Turning it off completes nothing.
func (d *Device) HoldEvents(hold bool) {
	d.mu.Lock()
	d.holdEvents = hold
	d.mu.Unlock()
}

// CompleteEvents runs every queued asynchronous copy, completes every
// pending event and returns how many events there were.
func (d *Device) CompleteEvents() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runOpsLocked(0, true)
	n := 0
	for _, e := range d.events {
		if e.pending {
			e.pending = false
			n++
		}
	}
	return n
}

// CompleteStream runs the asynchronous copies queued on s, completes the
// pending events recorded on s and returns how many events there were, as if
// the work queued on s had finished.
func (d *Device) CompleteStream(s alloc.Stream) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runOpsLocked(s, false)
	n := 0
	for _, e := range d.events {
		if e.pending && e.stream == s {
			e.pending = false
			n++
		}
	}
	return n
}

// PendingEvents returns the number of events recorded and not yet complete.
func (d *Device) PendingEvents() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.events {
		if e.pending {
			n++
		}
	}
	return n
}

// LiveEvents returns the number of events created and not destroyed, so
// tests can catch leaked events.
func (d *Device) LiveEvents() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.events)
}
