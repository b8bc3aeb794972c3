package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/serve/api"
)

// syncBuffer is a log sink the workers and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixture is a Notifier with a captured log and recorded sleeps.
type fixture struct {
	*Notifier
	log    *syncBuffer
	mu     sync.Mutex
	sleeps []time.Duration
}

func (f *fixture) slept() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sleeps)
}

var now0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, hooks []Webhook, queue int) *fixture {
	t.Helper()
	f := &fixture{log: &syncBuffer{}}
	f.Notifier = NewNotifier(Config{Webhooks: hooks}, NotifierOptions{
		Logger:    slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		QueueSize: queue,
		Hostname:  "node-a",
		Now:       func() time.Time { return now0 },
		Jitter:    func() float64 { return 0 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			f.mu.Lock()
			f.sleeps = append(f.sleeps, d)
			f.mu.Unlock()
			return ctx.Err()
		},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.Close(ctx)
	})
	return f
}

func (f *fixture) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// hookServer answers each request with the next of codes (the last one
// repeats) and records the bodies.
type hookServer struct {
	*httptest.Server
	mu      sync.Mutex
	bodies  []Payload
	raw     [][]byte
	headers []http.Header
}

func newHookServer(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *hookServer {
	s := &hookServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p Payload
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("request body %q: %v", body, err)
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, p)
		s.raw = append(s.raw, body)
		s.headers = append(s.headers, r.Header.Clone())
		n := len(s.bodies)
		s.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func codes(cs ...int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(cs[min(n, len(cs))-1])
	}
}

func (s *hookServer) requests() []Payload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

func testAlert(i int) api.Alert {
	return api.Alert{Time: now0.Add(time.Duration(i) * time.Second), Rule: "leak", Severity: SeverityWarning, State: StateFiring,
		GPU: "GPU-0", PID: uint32(i), Message: fmt.Sprintf("alert %d", i)}
}

func webhook(url string) Webhook {
	return Webhook{URL: url, Timeout: 5 * time.Second, MaxAttempts: 5, Backoff: time.Second, MaxBackoff: 4 * time.Second}
}

func TestNotifierRetriesThenDelivers(t *testing.T) {
	srv := newHookServer(t, codes(500, 503, 200))
	w := webhook(srv.URL + "/vram")
	w.Headers = map[string]string{"X-Team": "ml", "Authorization": "Bearer abc"}
	f := newFixture(t, []Webhook{w}, 0)
	f.Notify(testAlert(1), testAlert(2))
	f.close(t)

	reqs := srv.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	p := reqs[2]
	if p.Schema != PayloadSchema || p.Host != "node-a" || len(p.Alerts) != 2 {
		t.Fatalf("payload = %+v", p)
	}
	jsondoc.Test(t, "Webhook payload", srv.raw[2])
	for i, a := range p.Alerts {
		if want := testAlert(i + 1); a != want {
			t.Errorf("alert %d = %+v, want %+v", i, a, want)
		}
	}
	h := srv.headers[0]
	if h.Get("Content-Type") != "application/json" || h.Get("X-Team") != "ml" || h.Get("Authorization") != "Bearer abc" {
		t.Errorf("headers = %v", h)
	}
	// Backoff 1s doubling, jitter 0: half of 1s, half of 2s.
	if got := f.slept(); !slices.Equal(got, []time.Duration{500 * time.Millisecond, time.Second}) {
		t.Errorf("slept %v", got)
	}
	if s := f.Stats(); s != (Stats{Sent: 2, Retried: 2}) {
		t.Errorf("stats = %+v", s)
	}
	if log := f.log.String(); !strings.Contains(log, "attempt failed, will retry") || !strings.Contains(log, "500 Internal Server Error") ||
		!strings.Contains(log, "delivered") || strings.Contains(log, "/vram") {
		t.Errorf("log:\n%s", log)
	}
}

func TestNotifierRetryAfter(t *testing.T) {
	srv := newHookServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", now0.Add(90*time.Second).Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		case 3:
			w.Header().Set("Retry-After", "0") // shorter than the backoff: the backoff wins
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	f := newFixture(t, []Webhook{webhook(srv.URL)}, 0)
	f.Notify(testAlert(1))
	f.close(t)
	if got := f.slept(); !slices.Equal(got, []time.Duration{7 * time.Second, 90 * time.Second, 2 * time.Second}) {
		t.Errorf("slept %v", got)
	}
	if s := f.Stats(); s != (Stats{Sent: 1, Retried: 3}) {
		t.Errorf("stats = %+v", s)
	}
}

func TestNotifierGivesUp(t *testing.T) {
	srv := newHookServer(t, codes(502))
	w := webhook(srv.URL)
	w.MaxAttempts = 3
	f := newFixture(t, []Webhook{w}, 0)
	f.Notify(testAlert(1), testAlert(2))
	f.close(t)
	if n := len(srv.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	if s := f.Stats(); s != (Stats{Failed: 2, Retried: 2}) {
		t.Errorf("stats = %+v", s)
	}
	if log := f.log.String(); !strings.Contains(log, "giving up") || !strings.Contains(log, "attempts=3") {
		t.Errorf("log:\n%s", log)
	}
}

func TestNotifierNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(int, http.ResponseWriter, *http.Request)
		log    string
	}{
		{"400", func(_ int, w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "bad payload\x1b[2J", http.StatusBadRequest)
		}, `400 Bad Request: bad payload\\x1b[2J`},
		{"404", codes(404), "404 Not Found"},
		{"redirect", func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/secret/path", http.StatusFound)
		}, "redirected to https://elsewhere.example/…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHookServer(t, tc.answer)
			f := newFixture(t, []Webhook{webhook(srv.URL)}, 0)
			f.Notify(testAlert(1))
			f.close(t)
			if n := len(srv.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if s := f.Stats(); s != (Stats{Failed: 1}) {
				t.Errorf("stats = %+v", s)
			}
			if log := f.log.String(); !strings.Contains(log, "refused, not retried") || !strings.Contains(log, tc.log) {
				t.Errorf("log:\n%s\nwant %q", log, tc.log)
			}
		})
	}
}

// hanging returns a handler that answers only when the client gives up (or
// the test ends), and a channel that receives each request's arrival.
func hanging(t *testing.T) (func(int, http.ResponseWriter, *http.Request), chan int) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	arrived := make(chan int, 100)
	return func(n int, w http.ResponseWriter, r *http.Request) {
		arrived <- n
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, arrived
}

func TestNotifierTimeout(t *testing.T) {
	answer, _ := hanging(t)
	srv := newHookServer(t, answer)
	w := webhook(srv.URL)
	w.Timeout, w.MaxAttempts = 50*time.Millisecond, 2
	f := newFixture(t, []Webhook{w}, 0)
	start := time.Now()
	f.Notify(testAlert(1))
	f.close(t)
	if n := len(srv.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if s := f.Stats(); s != (Stats{Failed: 1, Retried: 1}) {
		t.Errorf("stats = %+v", s)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s with two attempts of 50ms", d)
	}
	if log := f.log.String(); !strings.Contains(log, "no answer within 50ms") {
		t.Errorf("log:\n%s", log)
	}
}

// TestNotifierIndependentHooks: a webhook that hangs delays neither Notify
// nor another webhook; Close gives up at its deadline.
func TestNotifierIndependentHooks(t *testing.T) {
	answer, arrived := hanging(t)
	slow := newHookServer(t, answer)
	fast := newHookServer(t, codes(200))
	ws := webhook(slow.URL)
	ws.Timeout = time.Hour
	f := newFixture(t, []Webhook{ws, webhook(fast.URL)}, 0)

	f.Notify(testAlert(1))
	<-arrived // the slow hook's worker is stuck in its request
	start := time.Now()
	for i := range 10000 {
		f.Notify(testAlert(i + 2))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("10000 Notify calls took %s with a webhook hanging", d)
	}
	// The fast webhook keeps up as well as a queue of 1024 lets it: it gets
	// the newest alert, in order after the others it got.
	deadline := time.Now().Add(10 * time.Second)
	for fast.last(t) != 10001 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := fast.last(t); n != 10001 {
		t.Fatalf("the fast webhook's last alert is %d, want 10001", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := f.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "webhooks not drained") {
		t.Errorf("Close = %v, want the deadline's error", err)
	}
	// The slow hook: 1 in flight, failed; the other 10000 dropped (the
	// oldest 8976 pushed out of its queue, the last 1024 left at Close).
	// Every alert is counted once per webhook.
	s := f.Stats()
	if s.Sent != uint64(fast.count()) || s.Failed != 1 || s.Sent+s.Failed+s.Dropped != 2*10001 || s.Dropped < 10000 {
		t.Errorf("stats = %+v, fast webhook got %d", s, fast.count())
	}
	if n := len(slow.requests()); n != 1 {
		t.Errorf("the slow webhook got %d requests, want 1", n)
	}
}

// last returns the PID of the last alert received (testAlert's number), and
// checks that they arrive in order.
func (s *hookServer) last(t *testing.T) uint32 {
	t.Helper()
	var last uint32
	for _, p := range s.requests() {
		for _, a := range p.Alerts {
			if a.PID <= last {
				t.Fatalf("alert %d after %d", a.PID, last)
			}
			last = a.PID
		}
	}
	return last
}

func (s *hookServer) count() int {
	n := 0
	for _, p := range s.requests() {
		n += len(p.Alerts)
	}
	return n
}

// TestNotifierQueue: a full queue drops its oldest alerts, and what is
// queued while a request is in flight goes as one batch.
func TestNotifierQueue(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan int, 10)
	srv := newHookServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		arrived <- n
		if n == 1 {
			<-release
		}
	})
	f := newFixture(t, []Webhook{webhook(srv.URL)}, 3)
	f.Notify(testAlert(1))
	<-arrived
	f.Notify(testAlert(2), testAlert(3))
	f.Notify(testAlert(4), testAlert(5), testAlert(6))
	if s := f.Stats(); s.Dropped != 2 {
		t.Errorf("dropped %d, want 2", s.Dropped)
	}
	close(release)
	f.close(t)
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	var pids []uint32
	for _, a := range reqs[1].Alerts {
		pids = append(pids, a.PID)
	}
	if !slices.Equal(pids, []uint32{4, 5, 6}) {
		t.Errorf("second batch = %v, want the newest 4 5 6", pids)
	}
	if s := f.Stats(); s != (Stats{Sent: 4, Dropped: 2}) {
		t.Errorf("stats = %+v", s)
	}
}

func TestNotifierNetworkError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/services/T0/B0/secret-token"
	srv.Close() // nothing listens there now
	w := webhook(url)
	w.MaxAttempts = 3
	f := newFixture(t, []Webhook{w}, 0)
	f.Notify(testAlert(1))
	f.close(t)
	if s := f.Stats(); s != (Stats{Failed: 1, Retried: 2}) {
		t.Errorf("stats = %+v", s)
	}
	log := f.log.String()
	if !strings.Contains(log, "connection refused") || strings.Contains(log, "secret-token") {
		t.Errorf("log (must say why, must not show the URL's path):\n%s", log)
	}
}

func TestNotifierLogs(t *testing.T) {
	f := newFixture(t, nil, 0)
	f.Notify(
		api.Alert{Rule: "orphans", Severity: SeverityCritical, State: StateFiring, GPU: "GPU-1", PID: 9, Message: "orphan holds 3 GiB"},
		api.Alert{Rule: "full", Severity: SeverityWarning, State: StateFiring, GPU: "GPU-0", Message: "92% used"},
		api.Alert{Rule: "full", Severity: SeverityWarning, State: StateResolved, GPU: "GPU-0", Message: "under 90% again"},
	)
	lines := strings.Split(strings.TrimSpace(f.log.String()), "\n")
	want := []string{
		`level=ERROR msg="alert firing" rule=orphans severity=critical gpu=GPU-1 pid=9 message="orphan holds 3 GiB"`,
		`level=WARN msg="alert firing" rule=full severity=warning gpu=GPU-0 message="92% used"`,
		`level=INFO msg="alert resolved" rule=full severity=warning gpu=GPU-0 message="under 90% again"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", f.log.String())
	}
	for i, l := range lines {
		if _, rest, _ := strings.Cut(l, " "); rest != want[i] { // drop time=
			t.Errorf("line %d = %s\nwant   %s", i, rest, want[i])
		}
	}
}

func TestNotifyAfterClose(t *testing.T) {
	var n atomic.Int32
	srv := newHookServer(t, func(int, http.ResponseWriter, *http.Request) { n.Add(1) })
	f := newFixture(t, []Webhook{webhook(srv.URL), webhook(srv.URL)}, 0)
	f.close(t)
	f.Notify(testAlert(1))
	if err := f.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if n.Load() != 0 {
		t.Errorf("%d requests after Close", n.Load())
	}
	if s := f.Stats(); s != (Stats{Dropped: 2}) {
		t.Errorf("stats = %+v", s)
	}
	if !strings.Contains(f.log.String(), "alert firing") {
		t.Error("an alert notified after Close is not logged")
	}
}

func TestBackoff(t *testing.T) {
	w := Webhook{Backoff: time.Second, MaxBackoff: 5 * time.Second}
	for _, tc := range []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 0.5, 750 * time.Millisecond},
		{1, 0.999, 999500 * time.Microsecond},
		{2, 0, time.Second},
		{3, 0, 2 * time.Second},
		{4, 0, 2500 * time.Millisecond}, // 8s capped at 5s
		{60, 0.5, 3750 * time.Millisecond},
		{1, 7, 500 * time.Millisecond}, // a broken jitter source counts as 0
	} {
		n := &Notifier{jitter: func() float64 { return tc.jitter }}
		if got := n.backoff(w, tc.attempt); got != tc.want {
			t.Errorf("backoff(attempt %d, jitter %v) = %s, want %s", tc.attempt, tc.jitter, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"120", 2 * time.Minute},
		{" 3 ", 3 * time.Second},
		{"-1", 0},
		{"soon", 0},
		{now0.Add(time.Minute).Format(http.TimeFormat), time.Minute},
		{now0.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tc.v, now0); got != tc.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	w := withDefaults(Webhook{URL: "http://h", Backoff: 2 * time.Minute})
	if w.Timeout != DefaultTimeout || w.MaxAttempts != DefaultMaxAttempts || w.Backoff != 2*time.Minute || w.MaxBackoff != 2*time.Minute {
		t.Errorf("withDefaults = %+v", w)
	}
}
