package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// sseEvent is one item read from a stream: an event (name and data) or a
// comment.
type sseEvent struct {
	name, data, comment string
}

// readSSE reads a server-sent event stream the way a browser does (fields
// "event" and "data", blank line ends an event, ":" starts a comment) and
// sends each item to the returned channel, which is closed at the end of
// the stream.
func readSSE(t *testing.T, resp *http.Response) <-chan sseEvent {
	t.Helper()
	out := make(chan sseEvent, 256)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				out <- sseEvent{comment: strings.TrimSpace(line[1:])}
			default:
				field, value, _ := strings.Cut(line, ":")
				value = strings.TrimPrefix(value, " ")
				switch field {
				case "event":
					ev.name = value
				case "data":
					if ev.data != "" {
						ev.data += "\n"
					}
					ev.data += value
				case "retry", "id":
				default:
					t.Errorf("unknown SSE field in %q", line)
				}
			}
		}
	}()
	return out
}

// next returns the next event (comments skipped unless wantComment),
// failing the test after a timeout.
func next(t *testing.T, ch <-chan sseEvent, wantComment bool) sseEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("the stream ended")
			}
			if ev.comment != "" && !wantComment {
				continue
			}
			return ev
		case <-deadline:
			t.Fatal("no event within 5 s")
		}
	}
}

// openStream starts a server over f and opens /events on it.
func openStream(t *testing.T, f *fakeBackend, opts Options) (*http.Response, <-chan sseEvent, context.CancelFunc) {
	t.Helper()
	srv := httptest.NewServer(Handler(f, opts))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, readSSE(t, resp), cancel
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func decodeState(t *testing.T, ev sseEvent) State {
	t.Helper()
	if ev.name != "state" {
		t.Fatalf("event %q, want state: %s", ev.name, ev.data)
	}
	var s State
	if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
		t.Fatalf("state event: %v", err)
	}
	return s
}

func TestEventsInitialStateThenLiveEvents(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.StatePeriod = time.Millisecond
	resp, events, _ := openStream(t, f, opts)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", resp.Header)
	}
	s := decodeState(t, next(t, events, false))
	if s.Schema != Schema || s.Hostname != "node-1" || !s.Mutations || len(s.Processes) != 3 {
		t.Fatalf("initial state %+v", s)
	}

	f.publish(Event{Kind: "alert", Alert: &Alert{Rule: "leak", Severity: "critical", State: "firing", PID: 4343, Message: "leaking 1 MiB/s"}})
	ev := next(t, events, false)
	var a Alert
	if ev.name != "alert" || json.Unmarshal([]byte(ev.data), &a) != nil || a.PID != 4343 || a.Rule != "leak" {
		t.Fatalf("%+v", ev)
	}
	f.publish(Event{Kind: "action", Action: &Action{Rule: "idle", PID: 5000, Action: "warn", Result: "dry-run"}})
	ev = next(t, events, false)
	var act Action
	if ev.name != "action" || json.Unmarshal([]byte(ev.data), &act) != nil || act.PID != 5000 || act.Result != "dry-run" {
		t.Fatalf("%+v", ev)
	}
	st := sampleState()
	st.Hostname = "node-2"
	time.Sleep(2 * time.Millisecond) // past StatePeriod
	f.publish(Event{Kind: "state", State: &st})
	if s := decodeState(t, next(t, events, false)); s.Hostname != "node-2" || s.Schema != Schema {
		t.Fatalf("%+v", s)
	}
	// Malformed events (a kind without its payload) are skipped, not sent.
	f.publish(Event{Kind: "alert"})
	f.publish(Event{Kind: "bogus", State: &st})
	f.publish(Event{Kind: "action", Action: &Action{PID: 7}})
	if ev := next(t, events, false); ev.name != "action" {
		t.Fatalf("%+v", ev)
	}
}

func TestEventsNoInitialStateBeforeFirstSample(t *testing.T) {
	f := newFake()
	f.hasState = false
	opts := testOptions()
	opts.PingPeriod = 20 * time.Millisecond
	_, events, _ := openStream(t, f, opts)
	// The first thing is a ping, not a state.
	if ev := next(t, events, true); ev.comment != "ping" {
		t.Fatalf("first item %+v, want a ping", ev)
	}
	st := sampleState()
	f.publish(Event{Kind: "state", State: &st})
	if s := decodeState(t, next(t, events, false)); s.Hostname != "node-1" {
		t.Fatalf("%+v", s)
	}
}

// TestEventsStateCoalescing: states published faster than StatePeriod
// reach the client at most once per period, the newest winning; alerts
// are not held back behind a pending state.
func TestEventsStateCoalescing(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.StatePeriod = 300 * time.Millisecond
	opened := time.Now() // the server writes the first state after this
	_, events, _ := openStream(t, f, opts)
	first := decodeState(t, next(t, events, false))
	if first.Hostname != "node-1" {
		t.Fatal(first.Hostname)
	}
	for i := range 20 {
		st := sampleState()
		st.Hostname = "burst-" + string(rune('a'+i))
		f.publish(Event{Kind: "state", State: &st})
	}
	f.publish(Event{Kind: "alert", Alert: &Alert{Rule: "quick"}})
	if ev := next(t, events, false); ev.name != "alert" {
		t.Fatalf("the alert was held back behind states: %+v", ev)
	}
	s := decodeState(t, next(t, events, false))
	if since := time.Since(opened); since < opts.StatePeriod {
		t.Errorf("second state %v after the stream opened; StatePeriod is 300ms", since)
	}
	if s.Hostname != "burst-t" {
		t.Errorf("coalesced state is %q, want the newest, burst-t", s.Hostname)
	}
	// Nothing else is pending: the next item is the one published next.
	time.Sleep(350 * time.Millisecond)
	st := sampleState()
	st.Hostname = "after"
	f.publish(Event{Kind: "state", State: &st})
	if s := decodeState(t, next(t, events, false)); s.Hostname != "after" {
		t.Fatalf("got %q, want after (a stale coalesced state was sent twice?)", s.Hostname)
	}
}

// TestEventsStateFromBackend: a state event without its State is written
// as the Backend's State when the stream writes it, once for a burst;
// with no State nothing is written.
func TestEventsStateFromBackend(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.StatePeriod = 200 * time.Millisecond
	opts.PingPeriod = 50 * time.Millisecond
	_, events, _ := openStream(t, f, opts)
	if s := decodeState(t, next(t, events, false)); s.Hostname != "node-1" {
		t.Fatal(s.Hostname)
	}
	f.mu.Lock()
	f.state.Hostname = "newer"
	f.mu.Unlock()
	for range 5 {
		f.publish(Event{Kind: "state"})
	}
	if s := decodeState(t, next(t, events, false)); s.Hostname != "newer" {
		t.Errorf("coalesced state is %q, want the Backend's, newer", s.Hostname)
	}
	if ev := next(t, events, true); ev.comment != "ping" {
		t.Errorf("after the coalesced state came %+v, want a ping", ev)
	}
	time.Sleep(250 * time.Millisecond) // past StatePeriod: the next is written at once
	f.mu.Lock()
	f.state.Hostname, f.hasState = "gone", false
	f.mu.Unlock()
	f.publish(Event{Kind: "state"})
	if ev := next(t, events, true); ev.comment != "ping" {
		t.Errorf("with no State the next item is %+v, want a ping", ev)
	}
}

func TestEventsPing(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.PingPeriod = 30 * time.Millisecond
	_, events, _ := openStream(t, f, opts)
	decodeState(t, next(t, events, false))
	for range 2 {
		if ev := next(t, events, true); ev.comment != "ping" {
			t.Fatalf("%+v, want a ping", ev)
		}
	}
}

func TestEventsEndAndUnsubscribe(t *testing.T) {
	t.Run("client disconnects", func(t *testing.T) {
		f := newFake()
		_, events, cancel := openStream(t, f, testOptions())
		decodeState(t, next(t, events, false))
		cancel()
		waitFor(t, "the subscription to be cancelled", func() bool { open, c := f.subscribers(); return open == 0 && c == 1 })
	})
	t.Run("server shuts down", func(t *testing.T) {
		f := newFake()
		done := make(chan struct{})
		opts := testOptions()
		opts.Done = done
		_, events, _ := openStream(t, f, opts)
		decodeState(t, next(t, events, false))
		close(done)
		for range events { // the stream ends
		}
		waitFor(t, "the subscription to be cancelled", func() bool { open, c := f.subscribers(); return open == 0 && c == 1 })
	})
	t.Run("backend closes the subscription", func(t *testing.T) {
		f := newFake()
		_, events, _ := openStream(t, f, testOptions())
		decodeState(t, next(t, events, false))
		f.closeAll()
		for range events {
		}
		waitFor(t, "the handler to cancel", func() bool { _, c := f.subscribers(); return c == 1 })
	})
	t.Run("http.Server.Shutdown with Done from RegisterOnShutdown", func(t *testing.T) {
		f := newFake()
		done := make(chan struct{})
		opts := testOptions()
		opts.Done = done
		srv := httptest.NewUnstartedServer(Handler(f, opts))
		srv.Config.RegisterOnShutdown(func() { close(done) })
		srv.Start()
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		events := readSSE(t, resp)
		decodeState(t, next(t, events, false))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Config.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with an open stream: %v", err)
		}
		waitFor(t, "the subscription to be cancelled", func() bool { _, c := f.subscribers(); return c == 1 })
	})
}

func TestEventsMaxStreams(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.MaxStreams = 2
	srv := httptest.NewServer(Handler(f, opts))
	defer srv.Close()
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range 2 {
		resp, err := http.Get(srv.URL + "/events")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		open = append(open, resp)
		decodeState(t, next(t, readSSE(t, resp), false))
	}
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc ErrorResponse
	if resp.StatusCode != 503 || json.NewDecoder(resp.Body).Decode(&doc) != nil || !strings.Contains(doc.Error.Message, "too many event streams open (2)") {
		t.Fatalf("third stream: %d %+v", resp.StatusCode, doc.Error)
	}
	// Closing one frees its place.
	open[0].Body.Close()
	open = open[1:]
	waitFor(t, "a stream to close", func() bool { _, c := f.subscribers(); return c == 1 })
	resp2, err := http.Get(srv.URL + "/events")
	if err != nil || resp2.StatusCode != 200 {
		t.Fatalf("after a close: %v %v", resp2, err)
	}
	open = append(open, resp2)
}

func TestEventsHEADAndParams(t *testing.T) {
	f := newFake()
	h := Handler(f, testOptions())
	w := serve(t, h, req{method: "HEAD", target: "/events"})
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("HEAD: %d %v", w.Code, w.Header())
	}
	if w := serve(t, h, req{target: "/events?since=5"}); w.Code != 400 {
		t.Fatalf("unknown parameter: %d", w.Code)
	}
	if open, c := f.subscribers(); open != 0 || c != 0 {
		t.Fatalf("subscribed: %d open, %d cancelled", open, c)
	}
}

// TestNewServer serves the handler from NewServer on a real socket: reads
// work, and a stream outlives every timeout of the server.
func TestNewServer(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.PingPeriod = 20 * time.Millisecond
	srv := NewServer("127.0.0.1:0", Handler(f, opts), nil)
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout <= DefaultQueryTimeout || srv.IdleTimeout == 0 {
		t.Fatalf("timeouts: %+v", srv)
	}
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readSSE(t, resp)
	decodeState(t, next(t, events, false))
	for range 10 { // 200 ms of pings: four times each timeout
		if ev := next(t, events, true); ev.comment != "ping" {
			t.Fatalf("%+v", ev)
		}
	}
}

// TestEventsOutliveServerTimeouts: a stream stays open past the server's
// whole-request timeouts. The read timeout does not apply once the
// handler runs (the server clears it for its background read); the write
// timeout is pushed back by the stream's own deadline at each write.
func TestEventsOutliveServerTimeouts(t *testing.T) {
	f := newFake()
	opts := testOptions()
	opts.PingPeriod = 20 * time.Millisecond
	srv := httptest.NewUnstartedServer(Handler(f, opts))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 100 * time.Millisecond
	srv.Start()
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := readSSE(t, resp)
	decodeState(t, next(t, events, false))
	time.Sleep(400 * time.Millisecond) // four timeouts
	for range 25 {                     // 500 ms of pings
		if ev := next(t, events, true); ev.comment != "ping" {
			t.Fatalf("%+v", ev)
		}
	}
	if open, _ := f.subscribers(); open != 1 {
		t.Fatalf("%d subscriptions open, want 1", open)
	}
}
