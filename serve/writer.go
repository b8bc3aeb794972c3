package serve

// The history writer: one goroutine that owns the writes to the SQLite
// store, so that a slow disk delays history, never a sample.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vramhq/vram/serve/store"
)

// writeQueue is how many writes may wait. A tick is written every
// history_interval (10 s by default) in a few milliseconds, so the queue
// fills only when the disk stalls for minutes.
const writeQueue = 256

// writeOp is one write: exactly one field is set. barrier is closed once
// every write queued before it is done.
type writeOp struct {
	tick    *store.Tick
	action  *store.Action
	alert   *store.Alert
	barrier chan struct{}
}

// writer serialises the daemon's writes to the store on one goroutine.
// Ticks are dropped (and counted) when the queue is full; audit records
// and alerts wait for room, because the audit trail must be complete.
type writer struct {
	st  *store.Store
	log *slog.Logger
	ops chan writeOp

	mu     sync.RWMutex // guards closed against sends
	closed bool
	done   chan struct{}

	ticks, dropped, failed atomic.Int64
	lastTick               atomic.Int64 // Unix ms of the newest tick written
	// failing is set by a failed write and cleared by the next tick that
	// is written: the State's warnings show it, so a history file that
	// has gone bad (a full disk, a damaged page) is visible on the
	// dashboard and in the API, not only in the log and the counter.
	failing atomic.Pointer[writeFailure]
}

// writeFailure is the first of a run of failed history writes.
type writeFailure struct {
	err   string
	since time.Time
}

// warning describes a run of failed writes, or is empty.
func (w *writer) warning() string {
	f := w.failing.Load()
	if f == nil {
		return ""
	}
	return fmt.Sprintf("history: writes to %s failing since %s: %s", w.st.Path(), f.since.UTC().Format(time.RFC3339), f.err)
}

func newWriter(st *store.Store, log *slog.Logger) *writer {
	w := &writer{st: st, log: log, ops: make(chan writeOp, writeQueue), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *writer) run() {
	defer close(w.done)
	ctx := context.Background()
	for op := range w.ops {
		var err error
		switch {
		case op.tick != nil:
			start := time.Now()
			err = w.st.WriteTick(ctx, *op.tick)
			if err == nil {
				w.ticks.Add(1)
				w.lastTick.Store(op.tick.Time.UnixMilli())
				w.failing.Store(nil)
				if took := time.Since(start); took > 2*time.Second {
					w.log.Warn("history write was slow", "took", took.Round(time.Millisecond), "devices", len(op.tick.Devices), "processes", len(op.tick.Processes))
				}
			}
		case op.action != nil:
			err = w.st.RecordAction(ctx, *op.action)
		case op.alert != nil:
			err = w.st.RecordAlert(ctx, *op.alert)
		case op.barrier != nil:
			close(op.barrier)
		}
		if err != nil {
			w.failed.Add(1)
			w.log.Error("history write failed", "err", err)
			if w.failing.Load() == nil {
				w.failing.Store(&writeFailure{err: err.Error(), since: time.Now()})
			}
		}
	}
}

// tick queues a tick; false when the queue is full (the tick is dropped) or
// the writer is closed.
func (w *writer) tick(t store.Tick) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	select {
	case w.ops <- writeOp{tick: &t}:
		return true
	default:
		if w.dropped.Add(1) == 1 || w.dropped.Load()%100 == 0 {
			w.log.Warn("history writes are behind: tick dropped", "dropped", w.dropped.Load())
		}
		return false
	}
}

// record queues an audit entry or an alert, waiting for room.
func (w *writer) record(op writeOp) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.log.Error("history closed: record not written", "action", op.action, "alert", op.alert)
		return
	}
	w.ops <- op
}

// sync waits until every write queued so far is done (or ctx ends, or the
// writer is closed).
func (w *writer) sync(ctx context.Context) error {
	b := make(chan struct{})
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return nil
	}
	select {
	case w.ops <- writeOp{barrier: b}:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case <-b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close writes what is queued and stops the goroutine; it waits until
// every queued write is done or ctx ends.
func (w *writer) close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.ops)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
