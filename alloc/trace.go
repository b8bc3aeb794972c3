package alloc

// The event trace: an opt-in ring buffer of allocations and frees, written
// in RMM's CSV log format. See doc.go for an overview.

import (
	"fmt"
	"io"
	"time"

	"github.com/vramhq/vram/trace/rmm"
)

type traceAction uint8

const (
	traceAlloc traceAction = iota
	traceAllocFailure
	traceFree
)

// traceEvent is one entry of the ring; t is nanoseconds since New.
type traceEvent struct {
	t      int64
	ptr    uint64
	size   uint64
	stream Stream
	action traceAction
}

// traceRing keeps the last len(ev) events. Guarded by the allocator's mutex.
type traceRing struct {
	ev    []traceEvent
	next  int    // where the next event goes
	total uint64 // events ever recorded
}

func newTraceRing(n int) *traceRing { return &traceRing{ev: make([]traceEvent, n)} }

func (a *Allocator) traceLocked(act traceAction, ptr, size uint64, s Stream) {
	r := a.trace
	r.ev[r.next] = traceEvent{t: int64(time.Since(a.traceOrigin)), ptr: ptr, size: size, stream: s, action: act}
	r.next++
	if r.next == len(r.ev) {
		r.next = 0
	}
	r.total++
}

// eventsLocked returns the kept events, oldest first.
func (r *traceRing) eventsLocked() []traceEvent {
	if r.total < uint64(len(r.ev)) {
		return append([]traceEvent(nil), r.ev[:r.next]...)
	}
	out := make([]traceEvent, 0, len(r.ev))
	out = append(out, r.ev[r.next:]...)
	return append(out, r.ev[:r.next]...)
}

// WriteTraceCSV writes the kept trace events (the last trace_events of
// them) as an RMM log: header Thread,Time,Action,Pointer,Size,Stream,
// actions allocate, allocate failure and free, times relative to the first
// event written. Sizes are the sizes requested; Thread is always 0 (Go has
// no stable thread identity to report). It fails when the allocator was
// created without trace_events.
func (a *Allocator) WriteTraceCSV(w io.Writer) error {
	a.mu.Lock()
	if a.trace == nil {
		a.mu.Unlock()
		return fmt.Errorf("alloc: trace: no events are recorded (set trace_events in the configuration)")
	}
	events := a.trace.eventsLocked()
	a.mu.Unlock()
	cw := rmm.NewWriter(w)
	var t0 int64
	if len(events) > 0 {
		t0 = events[0].t
	}
	actions := [...]rmm.Action{traceAlloc: rmm.Allocate, traceAllocFailure: rmm.AllocateFailure, traceFree: rmm.Free}
	for _, e := range events {
		rec := rmm.Record{
			Time:    time.Duration(e.t - t0),
			Action:  actions[e.action],
			Pointer: e.ptr,
			Size:    e.size,
			Stream:  uint64(e.stream),
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("alloc: writing trace: %w", err)
		}
	}
	if err := cw.Flush(); err != nil {
		return fmt.Errorf("alloc: writing trace: %w", err)
	}
	return nil
}

// TraceEvent is one kept event of the trace (trace_events).
type TraceEvent struct {
	Time   time.Time
	Action string // "alloc", "alloc_failure" or "free"
	Ptr    uint64 // 0 for a failure
	Size   uint64 // the size requested
	Stream Stream
}

// TraceEvents returns the kept trace events, oldest first. It fails when
// the allocator was created without trace_events.
func (a *Allocator) TraceEvents() ([]TraceEvent, error) {
	a.mu.Lock()
	if a.trace == nil {
		a.mu.Unlock()
		return nil, fmt.Errorf("alloc: trace: no events are recorded (set trace_events in the configuration)")
	}
	events := a.trace.eventsLocked()
	a.mu.Unlock()
	names := [...]string{traceAlloc: "alloc", traceAllocFailure: "alloc_failure", traceFree: "free"}
	out := make([]TraceEvent, len(events))
	for i, e := range events {
		out[i] = TraceEvent{Time: a.traceOrigin.Add(time.Duration(e.t)), Action: names[e.action], Ptr: e.ptr, Size: e.size, Stream: e.stream}
	}
	return out, nil
}
