package alert

// Delivering alerts: the log and webhooks. See doc.go for an overview.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
)

// PayloadSchema is the value of the schema key of every webhook payload. A
// change that removes or renames a key bumps it.
const PayloadSchema = "vram.alert/v2"

// Payload is the JSON body of every webhook request: the alerts that were
// queued for the webhook when the request was built, oldest first.
type Payload struct {
	Schema string      `json:"schema"`
	Host   string      `json:"host"`
	Alerts []api.Alert `json:"alerts"`
}

const (
	// DefaultQueueSize is how many alerts wait per webhook by default.
	DefaultQueueSize = 1024
	// MaxRetryAfter bounds the wait a Retry-After header can ask for.
	MaxRetryAfter = 10 * time.Minute
)

// NotifierOptions are a Notifier's settings; the zero value is usable.
type NotifierOptions struct {
	Logger *slog.Logger // nil: slog.Default()
	// Client sends the webhook requests. nil: a client that does not follow
	// redirects (custom headers may carry secrets; a webhook's URL should be
	// its final address). Each attempt's timeout comes from the webhook.
	Client    *http.Client
	QueueSize int    // alerts waiting per webhook (0: DefaultQueueSize)
	Hostname  string // the payload's host ("": os.Hostname())
	// Hooks for tests. Now reads the clock (for Retry-After dates); Sleep
	// waits between attempts and returns early with ctx's error; Jitter
	// returns a number in [0, 1).
	Now    func() time.Time
	Sleep  func(ctx context.Context, d time.Duration) error
	Jitter func() float64
}

// Stats are a Notifier's counters since it was made, for metrics. Alerts are
// counted once per webhook they were meant for.
type Stats struct {
	Sent    uint64 // alerts delivered (a 2xx answer)
	Failed  uint64 // alerts given up on: attempts spent, an answer not worth retrying, or Close's deadline
	Retried uint64 // attempts after the first
	Dropped uint64 // alerts pushed out of a full queue, or still queued when Close gave up
}

// Notifier logs alerts and posts them to webhooks. Notify never blocks: each
// webhook has its own bounded queue and its own worker goroutine, so a slow
// or failing webhook delays only itself. Its methods are safe for concurrent
// use.
type Notifier struct {
	log    *slog.Logger
	client *http.Client
	host   string
	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
	jitter func() float64
	hooks  []*hook

	mu      sync.RWMutex // guards closed against Notify
	closed  bool
	closing chan struct{} // closed by Close: workers drain and return
	ctx     context.Context
	cancel  context.CancelFunc // ends in-flight requests and waits
	wg      sync.WaitGroup

	sent, failed, retried, dropped atomic.Uint64
}

// hook is one webhook, its queue and its worker.
type hook struct {
	cfg  Webhook
	name string // the URL without its path, for logs
	size int

	mu   sync.Mutex
	ring []api.Alert // the queue: n alerts from head, wrapping; allocated at first use
	head int
	n    int
	wake chan struct{} // capacity 1: work was queued
}

// NewNotifier returns a Notifier for cfg's webhooks and starts one worker per
// webhook. Close stops them.
func NewNotifier(cfg Config, opts NotifierOptions) *Notifier {
	n := &Notifier{
		log:     opts.Logger,
		client:  opts.Client,
		host:    opts.Hostname,
		now:     opts.Now,
		sleep:   opts.Sleep,
		jitter:  opts.Jitter,
		closing: make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.client == nil {
		n.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if n.host == "" {
		n.host, _ = os.Hostname()
	}
	if n.now == nil {
		n.now = time.Now
	}
	if n.sleep == nil {
		n.sleep = sleep
	}
	if n.jitter == nil {
		n.jitter = rand.Float64
	}
	size := opts.QueueSize
	if size <= 0 {
		size = DefaultQueueSize
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for _, w := range cfg.Webhooks {
		h := &hook{cfg: withDefaults(w), name: redact(w.URL), size: size, wake: make(chan struct{}, 1)}
		n.hooks = append(n.hooks, h)
		n.wg.Add(1)
		go n.run(h)
	}
	return n
}

// withDefaults fills the fields of a Webhook built in code that Decode would
// have filled.
func withDefaults(w Webhook) Webhook {
	if w.Timeout <= 0 {
		w.Timeout = DefaultTimeout
	}
	if w.MaxAttempts <= 0 {
		w.MaxAttempts = DefaultMaxAttempts
	}
	if w.Backoff <= 0 {
		w.Backoff = DefaultBackoff
	}
	if w.MaxBackoff <= 0 {
		w.MaxBackoff = max(DefaultMaxBackoff, w.Backoff)
	}
	return w
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Notify logs each alert and queues it for every webhook. It never blocks on
// the network: when a webhook's queue is full, its oldest alert is dropped
// (and counted). After Close, alerts are only logged.
func (n *Notifier) Notify(alerts ...api.Alert) {
	for _, a := range alerts {
		n.logAlert(a)
	}
	if len(alerts) == 0 || len(n.hooks) == 0 {
		return
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.dropped.Add(uint64(len(alerts) * len(n.hooks)))
		return
	}
	for _, h := range n.hooks {
		n.dropped.Add(uint64(h.push(alerts)))
	}
}

func (n *Notifier) logAlert(a api.Alert) {
	level := slog.LevelInfo // resolved
	if a.State == StateFiring {
		level = slog.LevelWarn
		if a.Severity == SeverityCritical {
			level = slog.LevelError
		}
	}
	attrs := []slog.Attr{slog.String("rule", a.Rule), slog.String("severity", a.Severity)}
	if a.GPU != "" {
		attrs = append(attrs, slog.String("gpu", a.GPU))
	}
	if a.PID != 0 {
		attrs = append(attrs, slog.Uint64("pid", uint64(a.PID)))
	}
	attrs = append(attrs, slog.String("message", a.Message))
	n.log.LogAttrs(context.Background(), level, "alert "+a.State, attrs...)
}

// push queues alerts, dropping the oldest beyond the queue's size, and
// returns how many were dropped. The queue is a ring: a push costs the same
// whether or not it is full.
func (h *hook) push(alerts []api.Alert) int {
	h.mu.Lock()
	if h.ring == nil {
		h.ring = make([]api.Alert, h.size)
	}
	drop := 0
	for _, a := range alerts {
		if h.n == len(h.ring) {
			h.ring[h.head] = api.Alert{}
			h.head = (h.head + 1) % len(h.ring)
			h.n--
			drop++
		}
		h.ring[(h.head+h.n)%len(h.ring)] = a
		h.n++
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default: // already woken
	}
	return drop
}

// take empties the queue and returns what it held, oldest first.
func (h *hook) take() []api.Alert {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return nil
	}
	out := make([]api.Alert, h.n)
	for i := range out {
		j := (h.head + i) % len(h.ring)
		out[i], h.ring[j] = h.ring[j], api.Alert{}
	}
	h.head, h.n = 0, 0
	return out
}

func (h *hook) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// run is a webhook's worker: it posts what is queued, as one batch, until
// Close, then what is left.
func (n *Notifier) run(h *hook) {
	defer n.wg.Done()
	for {
		if batch := h.take(); len(batch) > 0 {
			n.deliver(h, batch)
			continue
		}
		select {
		case <-h.wake:
		case <-n.closing:
			if h.len() == 0 {
				return
			}
		case <-n.ctx.Done():
			return
		}
	}
}

// deliver posts one batch, retrying as the package documentation says.
func (n *Notifier) deliver(h *hook, batch []api.Alert) {
	count := uint64(len(batch))
	if n.ctx.Err() != nil {
		n.dropped.Add(count)
		return
	}
	body, err := json.Marshal(Payload{Schema: PayloadSchema, Host: n.host, Alerts: batch})
	if err != nil { // api.Alert holds strings, numbers and times only
		n.failed.Add(count)
		n.log.Error("webhook: cannot encode the alerts", "webhook", h.name, "err", err)
		return
	}
	for attempt := 1; ; attempt++ {
		wait, err := n.post(h, body)
		if err == nil {
			n.sent.Add(count)
			n.log.Debug("webhook: delivered", "webhook", h.name, "alerts", count, "attempt", attempt)
			return
		}
		var final *permanentError
		switch {
		case n.ctx.Err() != nil:
			n.failed.Add(count)
			n.log.Error("webhook: alerts not delivered before shutdown", "webhook", h.name, "alerts", count, "attempts", attempt, "err", err)
			return
		case errors.As(err, &final):
			n.failed.Add(count)
			n.log.Error("webhook: alerts refused, not retried", "webhook", h.name, "alerts", count, "attempts", attempt, "err", err)
			return
		case attempt >= h.cfg.MaxAttempts:
			n.failed.Add(count)
			n.log.Error("webhook: alerts not delivered, giving up", "webhook", h.name, "alerts", count, "attempts", attempt, "err", err)
			return
		}
		delay := n.backoff(h.cfg, attempt)
		if wait > 0 {
			delay = max(delay, min(wait, MaxRetryAfter))
		}
		n.log.Warn("webhook: attempt failed, will retry", "webhook", h.name, "alerts", count, "attempt", attempt, "retry_in", delay, "err", err)
		n.retried.Add(1)
		if err := n.sleep(n.ctx, delay); err != nil {
			n.failed.Add(count)
			n.log.Error("webhook: alerts not delivered before shutdown", "webhook", h.name, "alerts", count, "attempts", attempt, "err", err)
			return
		}
	}
}

// backoff is the delay after the given failed attempt (1 for the first):
// Backoff doubled attempt-1 times, at most MaxBackoff, then a uniformly random
// point in its upper half, so that daemons that failed together do not retry
// together.
func (n *Notifier) backoff(w Webhook, attempt int) time.Duration {
	d := w.Backoff
	for i := 1; i < attempt && d < w.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, w.MaxBackoff)
	j := n.jitter()
	if j < 0 || j >= 1 {
		j = 0
	}
	return d/2 + time.Duration(j*float64(d/2))
}

// permanentError is an answer that retrying will not change (a 4xx other
// than 429, a redirect).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// post makes one attempt. It returns nil on a 2xx answer; otherwise the error
// and, for a 429 or 503 with Retry-After, how long the server asked to wait.
func (n *Notifier) post(h *hook, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(n.ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, &permanentError{fmt.Errorf("building the request: %v", err)}
	}
	for k, v := range h.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "vram-alert")
	resp, err := n.client.Do(req)
	if err != nil {
		if ctx.Err() != nil && n.ctx.Err() == nil {
			return 0, fmt.Errorf("no answer within %s", h.cfg.Timeout)
		}
		return 0, scrub(err, h)
	}
	defer resp.Body.Close()
	// Read a little of the body for the log, and drain a bounded amount so
	// the connection can be reused.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return 0, nil
	}
	err = fmt.Errorf("%s", resp.Status)
	if s := strings.TrimSpace(string(snippet)); s != "" {
		err = fmt.Errorf("%s: %s", resp.Status, gpu.Printable(s))
	}
	switch {
	case code == http.StatusTooManyRequests || code >= 500:
		return retryAfter(resp.Header.Get("Retry-After"), n.now()), err
	case code >= 300 && code < 400:
		return 0, &permanentError{fmt.Errorf("%s: redirected to %s; set the webhook's url to the final address", resp.Status, redact(resp.Header.Get("Location")))}
	}
	return 0, &permanentError{err}
}

// scrub removes the webhook's URL from a client error (net/http quotes it,
// and its path may be a secret).
func scrub(err error, h *hook) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, h.name, ue.Err)
	}
	return errors.New(strings.ReplaceAll(err.Error(), h.cfg.URL, h.name))
}

// retryAfter reads a Retry-After value: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Stats returns the counters.
func (n *Notifier) Stats() Stats {
	return Stats{Sent: n.sent.Load(), Failed: n.failed.Load(), Retried: n.retried.Load(), Dropped: n.dropped.Load()}
}

// Close stops taking alerts for the webhooks and lets the workers deliver
// what is queued, retries included, until ctx ends; then it cancels what is
// in flight, counts what is still queued as dropped, and returns ctx's error.
// Later calls return nil at once.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.closing)
	n.mu.Unlock()

	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		n.cancel()
		<-done
		err = fmt.Errorf("alert: webhooks not drained: %w", ctx.Err())
	}
	n.cancel()
	for _, h := range n.hooks {
		n.dropped.Add(uint64(len(h.take())))
	}
	return err
}
