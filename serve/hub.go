package serve

// The event hub: live events from the sampling loop to any number of
// subscribers (the HTTP layer's /events streams).

import (
	"sync"
	"sync/atomic"

	"github.com/vramhq/vram/serve/api"
)

// subscriberBuffer is how many events a subscriber may fall behind before
// it loses events. A state event is published at every sample; the HTTP
// layer reads them as they come and coalesces, so 64 is a long stall.
const subscriberBuffer = 64

// hub fans events out to subscribers without ever blocking the publisher:
// each subscriber has a bounded channel, and an event that does not fit is
// dropped for that subscriber alone (and counted).
type hub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	closed  bool
	dropped atomic.Int64 // events lost by slow subscribers, all together
}

type subscriber struct {
	ch chan api.Event
}

func newHub() *hub { return &hub{subs: map[*subscriber]struct{}{}} }

// subscribe returns the subscriber's channel and the function that ends the
// subscription and closes the channel (it may be called more than once).
// After close, the channel is returned closed.
func (h *hub) subscribe() (<-chan api.Event, func()) {
	s := &subscriber{ch: make(chan api.Event, subscriberBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	h.subs[s] = struct{}{}
	return s.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			close(s.ch)
		}
	}
}

// publish hands ev to every subscriber that has room for it.
func (h *hub) publish(ev api.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			h.dropped.Add(1)
		}
	}
}

// count is the number of subscribers.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// close ends every subscription; later subscriptions get a closed channel.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}
