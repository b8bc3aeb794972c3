package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// streamWriteTimeout bounds each write to an event stream: a client that
// stops reading is dropped instead of holding the handler.
const streamWriteTimeout = 10 * time.Second

// getEvents serves the live stream. One goroutine per stream: it
// subscribes before it reads the first State, so no event falls between
// the two, then loops over the subscription, a ping ticker and the state
// timer until the client, the Backend or Options.Done ends it.
//
// State coalescing: a "state" event is written at once when the last one
// is at least StatePeriod old; otherwise it is kept as pending (a newer one
// replacing it) and written when the period is over. Alerts and actions
// are never held back. A state event without its State (the daemon's:
// it builds a State only when asked) is written as the Backend's State
// at the time of writing: the newest.
func (h *handler) getEvents(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		return nil
	}
	if n := h.streams.Add(1); n > int64(h.o.MaxStreams) {
		h.streams.Add(-1)
		return errorf(http.StatusServiceUnavailable, "too many event streams open (%d); try again later", h.o.MaxStreams)
	}
	defer h.streams.Add(-1)

	events, cancel := h.b.Subscribe()
	defer cancel()

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w)}
	defer func() { _ = s.rc.SetWriteDeadline(time.Time{}) }() // the connection may be gone: nothing to do

	if err := s.write([]byte("retry: 2000\n\n")); err != nil {
		return h.streamEnd(r, err)
	}
	var last time.Time // when the last state event was written
	// sendState writes st, or the Backend's State when st is nil.
	sendState := func(st *State) error {
		if st == nil {
			latest, ok := h.b.State()
			if !ok {
				return nil
			}
			st = &latest
		}
		last = time.Now()
		return s.state(h.prepare(*st))
	}
	if err := sendState(nil); err != nil {
		return h.streamEnd(r, err)
	}

	ping := time.NewTicker(h.o.PingPeriod)
	defer ping.Stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		pending bool             // a state event is waiting for the period to end
		pendSt  *State           // its State (nil: the Backend's)
		fire    <-chan time.Time // timer.C while pending
	)
	for {
		var err error
		select {
		case <-r.Context().Done():
			return nil
		case <-h.o.Done:
			return nil
		case <-ping.C:
			err = s.write([]byte(": ping\n\n"))
		case <-fire:
			st := pendSt
			pending, pendSt, fire = false, nil, nil
			err = sendState(st)
		case ev, ok := <-events:
			if !ok {
				return nil // the Backend ended the subscription (shutting down)
			}
			switch {
			case ev.Kind == "state":
				if pending {
					pendSt = ev.State
					break
				}
				if wait := h.o.StatePeriod - time.Since(last); wait > 0 {
					pending, pendSt = true, ev.State
					timer.Reset(wait)
					fire = timer.C
					break
				}
				err = sendState(ev.State)
			case ev.Kind == "alert" && ev.Alert != nil:
				err = s.event("alert", ev.Alert)
			case ev.Kind == "action" && ev.Action != nil:
				err = s.event("action", ev.Action)
			default:
				h.log.Debug("api: event without the payload its kind names; skipped", "kind", ev.Kind)
			}
		}
		if err != nil {
			return h.streamEnd(r, err)
		}
	}
}

// streamEnd logs why a stream stopped on a write error. The status line
// is already out, so there is no error document to send: the stream just
// ends, and the client reconnects.
func (h *handler) streamEnd(r *http.Request, err error) error {
	if r.Context().Err() == nil {
		h.log.Debug("api: event stream ended", "remote", r.RemoteAddr, "err", err)
	}
	return nil
}

// stream writes server-sent events, each flushed at once, each write with
// its own deadline.
type stream struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	// states are the buffers state events are encoded into, kept from
	// one to the next: a State is megabytes of JSON, written once a
	// second. They take turns, since the cache (statecache.go) copies
	// from the last state what did not change.
	states [2][]byte
	n      int // state events written
	cache  stateCache
}

// event writes "event: name" and v as one data line (JSON never holds a
// raw newline).
func (s *stream) event(name string, v any) error {
	data, err := json.Marshal(v)
	return s.encoded(name, data, err)
}

// encoded is event with v encoded already; err is the encoder's.
func (s *stream) encoded(name string, data []byte, err error) error {
	if err != nil {
		return fmt.Errorf("encoding a %s event: %w", name, err)
	}
	s.buf.Reset()
	s.buf.WriteString("event: ")
	s.buf.WriteString(name)
	s.buf.WriteString("\ndata: ")
	s.buf.Write(data)
	s.buf.WriteString("\n\n")
	return s.write(s.buf.Bytes())
}

// state writes a state event, st encoded in place after the event's
// header.
func (s *stream) state(st State) error {
	const head = "event: state\ndata: "
	buf := &s.states[s.n%2]
	b, err := appendStateCached(append((*buf)[:0], head...), st, &s.cache)
	if err != nil {
		return fmt.Errorf("encoding a state event: %w", err)
	}
	*buf = append(b, "\n\n"...)
	s.n++
	return s.write(*buf)
}

func (s *stream) write(p []byte) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(p); err != nil {
		return err
	}
	return s.rc.Flush()
}
