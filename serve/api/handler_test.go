package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestReadRoutes(t *testing.T) {
	f := newFake()
	f.devPoints = []DevicePoint{{Time: now.Add(-time.Minute), Samples: 6, Used: Range{Min: 1, Max: 3, Mean: 2}, Total: 9}}
	f.procPoints = []ProcessPoint{{Time: now.Add(-time.Minute), PID: 4242, Samples: 6, Bytes: Range{Min: 1, Max: 1, Mean: 1}}}
	f.alerts = []Alert{{Time: now, Rule: "leak", Severity: "warning", State: "firing", Message: "m"}}
	f.actions = []Action{{Time: now, Rule: "api", PID: 4242, Action: "term", Reason: "r", Result: "sent"}}
	h := Handler(f, testOptions())

	t.Run("state", func(t *testing.T) {
		w := serve(t, h, req{target: "/api/v1/state"})
		var s State
		decodeBody(t, w, &s)
		if w.Code != 200 || s.Schema != Schema || !s.Mutations || s.Hostname != "node-1" || len(s.Devices) != 2 || len(s.Processes) != 3 {
			t.Fatalf("%d %+v", w.Code, s)
		}
		// Lists are never null, even when the Backend leaves them nil.
		if s.Alerts == nil || s.Devices[1].Recent == nil || s.Processes[2].Flags == nil || s.Processes[2].Recent == nil {
			t.Errorf("nil lists in %+v", s)
		}
	})
	t.Run("state lists are [] in the JSON", func(t *testing.T) {
		w := serve(t, h, req{target: "/api/v1/state"})
		for _, want := range []string{`"alerts":[]`, `"recent":[]`, `"flags":[]`} {
			if !strings.Contains(w.Body.String(), want) {
				t.Errorf("no %s in %s", want, w.Body)
			}
		}
		// The one null: a process not on vram's allocator has no figures.
		body := strings.NewReplacer(`"allocated_bytes":null,"reserved_bytes":null`, "").Replace(w.Body.String())
		if strings.Contains(body, "null") {
			t.Errorf("null in %s", w.Body)
		}
	})
	t.Run("devices", func(t *testing.T) {
		var d DevicesResponse
		w := serve(t, h, req{target: "/api/v1/devices"})
		decodeBody(t, w, &d)
		if d.Schema != Schema || !d.Time.Equal(now.Add(-time.Second)) || len(d.Devices) != 2 || d.Devices[1].Error != "Xid 79" {
			t.Fatalf("%+v", d)
		}
	})
	for _, tc := range []struct {
		query string
		pids  []uint32
	}{
		{"", []uint32{4242, 4343, 5000}},
		{"?gpu=0", []uint32{4242, 4343}},
		{"?gpu=1", []uint32{5000}},
		{"?gpu=" + uuid1, []uint32{5000}},
	} {
		t.Run("processes"+tc.query, func(t *testing.T) {
			var p ProcessesResponse
			decodeBody(t, serve(t, h, req{target: "/api/v1/processes" + tc.query}), &p)
			var pids []uint32
			for _, x := range p.Processes {
				pids = append(pids, x.PID)
			}
			if fmt.Sprint(pids) != fmt.Sprint(tc.pids) || p.Schema != Schema {
				t.Fatalf("pids %v, want %v", pids, tc.pids)
			}
		})
	}
	t.Run("device history by UUID", func(t *testing.T) {
		var d DeviceHistoryResponse
		decodeBody(t, serve(t, h, req{target: "/api/v1/history/devices/" + uuid0 + "?from=-2h&to=-1h&step=1m"}), &d)
		want := HistoryQuery{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour), Step: time.Minute}
		if f.gotUUID != uuid0 || f.gotQuery != want {
			t.Fatalf("backend asked %s %+v, want %+v", f.gotUUID, f.gotQuery, want)
		}
		if d.GPU != uuid0 || !d.From.Equal(want.From) || !d.To.Equal(want.To) || d.Step != 60 || len(d.Points) != 1 || d.Points[0].Used.Max != 3 {
			t.Fatalf("%+v", d)
		}
	})
	t.Run("device history by index, default range and step", func(t *testing.T) {
		var d DeviceHistoryResponse
		decodeBody(t, serve(t, h, req{target: "/api/v1/history/devices/1"}), &d)
		want := HistoryQuery{From: now.Add(-time.Hour), To: now, Step: 5 * time.Second}
		if f.gotUUID != uuid1 || f.gotQuery != want || d.GPU != uuid1 || d.Step != 5 {
			t.Fatalf("backend asked %s %+v, want %s %+v", f.gotUUID, f.gotQuery, uuid1, want)
		}
	})
	t.Run("process history", func(t *testing.T) {
		var p ProcessHistoryResponse
		w := serve(t, h, req{target: "/api/v1/history/processes/0/4242?from=1796032800&to=2026-11-30T11:30:00Z&step=30"})
		decodeBody(t, w, &p)
		want := HistoryQuery{From: time.Unix(1796032800, 0).UTC(), To: now.Add(-30 * time.Minute), Step: 30 * time.Second}
		if f.gotUUID != uuid0 || f.gotPID != 4242 || f.gotQuery != want {
			t.Fatalf("backend asked %s %d %+v, want %+v", f.gotUUID, f.gotPID, f.gotQuery, want)
		}
		if p.PID != 4242 || p.GPU != uuid0 || len(p.Points) != 1 || p.Points[0].Flags == nil {
			t.Fatalf("%+v", p)
		}
	})
	t.Run("alerts default last 24h", func(t *testing.T) {
		var a AlertsResponse
		decodeBody(t, serve(t, h, req{target: "/api/v1/alerts"}), &a)
		if !f.gotFrom.Equal(now.Add(-24*time.Hour)) || !f.gotTo.Equal(now) || len(a.Alerts) != 1 || a.Schema != Schema {
			t.Fatalf("range %v..%v, %+v", f.gotFrom, f.gotTo, a)
		}
	})
	t.Run("actions range", func(t *testing.T) {
		var a ActionsResponse
		decodeBody(t, serve(t, h, req{target: "/api/v1/actions?from=-7d&to=now"}), &a)
		if !f.gotFrom.Equal(now.Add(-7*24*time.Hour)) || !f.gotTo.Equal(now) || len(a.Actions) != 1 {
			t.Fatalf("range %v..%v, %+v", f.gotFrom, f.gotTo, a)
		}
	})
	t.Run("empty lists are []", func(t *testing.T) {
		g := newFake()
		hg := Handler(g, testOptions())
		for _, target := range []string{"/api/v1/alerts", "/api/v1/actions", "/api/v1/history/devices/0", "/api/v1/history/processes/0/1"} {
			w := serve(t, hg, req{target: target})
			if w.Code != 200 || !strings.Contains(w.Body.String(), ":[]") {
				t.Errorf("%s: %d %s", target, w.Code, w.Body)
			}
		}
	})
	t.Run("healthz", func(t *testing.T) {
		w := serve(t, h, req{target: "/healthz"})
		if w.Code != 200 || w.Body.String() != "ok\n" {
			t.Fatalf("%d %q", w.Code, w.Body)
		}
	})
	t.Run("HEAD", func(t *testing.T) {
		w := serve(t, h, req{method: "HEAD", target: "/api/v1/state"})
		if w.Code != 200 {
			t.Fatalf("%d", w.Code)
		}
	})
}

func TestBeforeFirstSample(t *testing.T) {
	f := newFake()
	f.hasState = false
	h := Handler(f, testOptions())
	for _, target := range []string{"/api/v1/state", "/api/v1/devices", "/api/v1/processes", "/api/v1/processes?gpu=0", "/api/v1/history/devices/0"} {
		w := serve(t, h, req{target: target})
		if w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s: %d, Retry-After %q", target, w.Code, w.Header().Get("Retry-After"))
		}
		if e := errorDoc(t, w); !strings.Contains(e.Message, "no sample yet") {
			t.Errorf("%s: %q", target, e.Message)
		}
	}
	w := serve(t, h, req{target: "/healthz"})
	if w.Code != 503 || w.Body.String() != "no sample yet\n" {
		t.Errorf("healthz: %d %q", w.Code, w.Body)
	}
	// History by UUID does not need the State.
	if w := serve(t, h, req{target: "/api/v1/history/devices/" + uuid0}); w.Code != 200 {
		t.Errorf("history by UUID: %d %s", w.Code, w.Body)
	}
}

// TestRequestErrors: every malformed request gets a 4xx error document
// whose message names what is wrong, and the Backend is not asked.
func TestRequestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rq     req
		status int
		msg    string
		allow  string
	}{
		{"wrong method", req{method: "POST", target: "/api/v1/state"}, 405, "method POST is not allowed on /api/v1/state; allowed: GET, HEAD", "GET, HEAD"},
		{"wrong method, history", req{method: "DELETE", target: "/api/v1/history/devices/0"}, 405, "allowed: GET, HEAD", "GET, HEAD"},
		{"GET on a POST route", req{target: "/api/v1/signal"}, 405, "allowed: POST", "POST"},
		{"wrong method, events", req{method: "PUT", target: "/events"}, 405, "allowed: GET, HEAD", "GET, HEAD"},
		{"unknown path", req{target: "/api/v1/nope"}, 404, "no such endpoint: GET /api/v1/nope", ""},
		{"unknown version", req{target: "/api/v2/state"}, 404, "no such endpoint", ""},
		{"api root", req{target: "/api"}, 404, "no such endpoint", ""},
		{"trailing slash", req{target: "/api/v1/state/"}, 404, "no such endpoint", ""},
		{"history without GPU", req{target: "/api/v1/history/devices/"}, 404, "no such endpoint", ""},
		{"no UI", req{target: "/"}, 404, "no such endpoint: GET /", ""},
		{"no metrics", req{target: "/metrics"}, 404, "no such endpoint", ""},
		{"unknown parameter", req{target: "/api/v1/alerts?form=-1h"}, 400, `unknown query parameter "form": this endpoint takes from, to`, ""},
		{"parameter on state", req{target: "/api/v1/state?x=1"}, 400, `unknown query parameter "x": this endpoint takes none`, ""},
		{"repeated parameter", req{target: "/api/v1/alerts?from=-1h&from=-2h"}, 400, `query parameter "from" is given 2 times`, ""},
		{"malformed query", req{target: "/api/v1/alerts?from=%zz"}, 400, "malformed query string", ""},
		{"bad from", req{target: "/api/v1/alerts?from=yesterday"}, 400, `query parameter "from": "yesterday" is not a time`, ""},
		{"bad to", req{target: "/api/v1/actions?to=1h"}, 400, `query parameter "to": "1h" is not a time`, ""},
		{"future relative", req{target: "/api/v1/actions?to=%2B1h"}, 400, `"+1h" is in the future`, ""},
		{"empty from", req{target: "/api/v1/actions?from="}, 400, `"from": "" is empty`, ""},
		{"milliseconds", req{target: "/api/v1/actions?from=1764504000000000"}, 400, "out of range for Unix seconds", ""},
		{"from after to", req{target: "/api/v1/alerts?from=-1h&to=-2h"}, 400, "is not before to", ""},
		{"range too long", req{target: "/api/v1/alerts?from=-32d"}, 400, "at most 744h0m0s (31 days)", ""},
		{"step not a duration", req{target: "/api/v1/history/devices/0?step=fast"}, 400, `query parameter "step": "fast" is not a duration`, ""},
		{"step zero", req{target: "/api/v1/history/devices/0?step=0"}, 400, `"0" is too short; at least 1ms`, ""},
		{"step negative", req{target: "/api/v1/history/devices/0?step=-5s"}, 400, `"-5s" is too short`, ""},
		{"too many points", req{target: "/api/v1/history/devices/0?from=-24h&step=1s"}, 400, "step 1s over 24h0m0s gives 86400 points; at most 10000: use a step of at least 8.641s", ""},
		{"gpu bad", req{target: "/api/v1/processes?gpu=GPU%20x"}, 400, `gpu: "GPU x" is not a GPU UUID or index`, ""},
		{"gpu index out of range", req{target: "/api/v1/processes?gpu=99999"}, 400, "not a GPU index (0 to 4095)", ""},
		{"gpu absent", req{target: "/api/v1/processes?gpu=7"}, 404, "no GPU with index 7 on this node (indexes 0, 1)", ""},
		{"gpu uuid absent", req{target: "/api/v1/processes?gpu=GPU-none"}, 404, "no GPU with UUID GPU-none", ""},
		{"history gpu absent", req{target: "/api/v1/history/devices/3"}, 404, "no GPU with index 3", ""},
		{"history gpu bad", req{target: "/api/v1/history/devices/GPU%2Fx"}, 400, `"GPU/x" is not a GPU UUID`, ""},
		{"pid not a number", req{target: "/api/v1/history/processes/0/abc"}, 400, `pid: "abc" is not a process ID`, ""},
		{"pid zero", req{target: "/api/v1/history/processes/0/0"}, 400, "pid: 0 is not a process ID", ""},
		{"pid too big", req{target: "/api/v1/history/processes/0/4294967296"}, 400, "out of range for a process ID", ""},
		{"pid negative", req{target: "/api/v1/history/processes/0/-1"}, 400, "is not a process ID", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			w := serve(t, Handler(f, testOptions()), tc.rq)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			e := errorDoc(t, w)
			if !strings.Contains(e.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", e.Message, tc.msg)
			}
			if got := w.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if f.gotUUID != "" || !f.gotFrom.IsZero() {
				t.Errorf("the Backend was asked (%q, %v)", f.gotUUID, f.gotFrom)
			}
		})
	}
}

// TestBackendErrors: the Backend's sentinel errors map to their status with
// the Backend's message; anything else is a generic 500 and goes to the log.
func TestBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("GPU %s: %w", uuid0, ErrNotFound), 404, "GPU " + uuid0 + ": not found"},
		{fmt.Errorf("pid 4242 was restarted: %w", ErrConflict), 409, "pid 4242 was restarted: conflict"},
		{fmt.Errorf("bad range: %w", ErrInvalid), 400, "bad range: invalid request"},
		{fmt.Errorf("store: %w", context.DeadlineExceeded), 503, "the query took longer than 30s"},
		{errors.New("sqlite: disk I/O error at /var/lib/secret.db"), 500, "internal error; the daemon's log has the details"},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			f := newFake()
			f.historyErr = tc.err
			var log strings.Builder
			opts := testOptions()
			opts.Logger = newTestLogger(&log)
			h := Handler(f, opts)
			for _, target := range []string{"/api/v1/history/devices/0", "/api/v1/history/processes/0/1", "/api/v1/alerts", "/api/v1/actions"} {
				w := serve(t, h, req{target: target})
				if w.Code != tc.status {
					t.Fatalf("%s: status %d, want %d", target, w.Code, tc.status)
				}
				if e := errorDoc(t, w); !strings.Contains(e.Message, tc.msg) {
					t.Errorf("%s: message %q, want %q", target, e.Message, tc.msg)
				}
				if tc.status == 500 && strings.Contains(w.Body.String(), "secret") {
					t.Errorf("the internal error leaked: %s", w.Body)
				}
			}
			if tc.status == 500 && !strings.Contains(log.String(), "secret.db") {
				t.Errorf("the internal error is not in the log: %s", log.String())
			}
		})
	}
}

func TestPanicIsA500(t *testing.T) {
	f := newFake()
	f.panicNow = true
	var log strings.Builder
	opts := testOptions()
	opts.Logger = newTestLogger(&log)
	w := serve(t, Handler(f, opts), req{target: "/api/v1/state"})
	if w.Code != 500 {
		t.Fatalf("status %d", w.Code)
	}
	if e := errorDoc(t, w); strings.Contains(e.Message, "boom") {
		t.Errorf("panic value leaked: %q", e.Message)
	}
	if !strings.Contains(log.String(), "fake backend: boom") {
		t.Errorf("panic not logged: %s", log.String())
	}
}

func TestQueryTimeout(t *testing.T) {
	b := &slowBackend{fakeBackend: newFake()}
	opts := testOptions()
	opts.QueryTimeout = 20 * time.Millisecond
	w := serve(t, Handler(b, opts), req{target: "/api/v1/history/devices/0"})
	if w.Code != 503 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if e := errorDoc(t, w); !strings.Contains(e.Message, "longer than 20ms") {
		t.Errorf("%q", e.Message)
	}
}

// slowBackend's device history waits for its context.
type slowBackend struct{ *fakeBackend }

func (s *slowBackend) DeviceHistory(ctx context.Context, uuid string, q HistoryQuery) ([]DevicePoint, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("reading history: %w", ctx.Err())
}

func TestMounts(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "vram_up 1\n") })
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "ui %s", r.URL.Path)
	})
	opts := testOptions()
	opts.Metrics, opts.UI = metrics, ui
	h := Handler(newFake(), opts)
	for _, tc := range []struct {
		rq     req
		status int
		body   string
	}{
		{req{target: "/metrics"}, 200, "vram_up 1\n"},
		{req{target: "/"}, 200, "ui /"},
		{req{target: "/app.js"}, 200, "ui /app.js"},
		{req{target: "/api/v1/nope"}, 404, ""},
		{req{method: "POST", target: "/metrics"}, 405, ""},
		{req{method: "POST", target: "/"}, 405, ""},
		{req{method: "POST", target: "/index.html"}, 405, ""},
	} {
		w := serve(t, h, tc.rq)
		if w.Code != tc.status || tc.body != "" && w.Body.String() != tc.body {
			t.Errorf("%s %s: %d %q, want %d %q", tc.rq.method, tc.rq.target, w.Code, w.Body, tc.status, tc.body)
		}
		if w.Code >= 400 {
			errorDoc(t, w)
		}
	}
	if cc := serve(t, h, req{target: "/"}).Header().Get("Cache-Control"); cc != "max-age=60" {
		t.Errorf("the UI's Cache-Control was overridden: %q", cc)
	}
	if cc := serve(t, h, req{target: "/metrics"}).Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("metrics Cache-Control %q", cc)
	}
}

func TestSecurityHeaders(t *testing.T) {
	opts := testOptions()
	opts.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>") })
	h := Handler(newFake(), opts)
	for _, rq := range []req{
		{target: "/api/v1/state"}, {target: "/api/v1/nope"}, {method: "POST", target: "/api/v1/state"},
		{target: "/healthz"}, {target: "/"}, {method: "POST", target: "/api/v1/signal", header: map[string]string{"Origin": "http://evil.example"}},
	} {
		w := serve(t, h, rq)
		for k, want := range map[string]string{
			"X-Content-Type-Options":       "nosniff",
			"Content-Security-Policy":      "default-src 'self'; frame-ancestors 'none'",
			"X-Frame-Options":              "DENY",
			"Referrer-Policy":              "no-referrer",
			"Cross-Origin-Resource-Policy": "same-origin",
		} {
			if got := w.Header().Get(k); got != want {
				t.Errorf("%s %s: %s %q, want %q", rq.method, rq.target, k, got, want)
			}
		}
		for k := range w.Header() {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("%s %s: CORS header %s", rq.method, rq.target, k)
			}
		}
		if rq.target != "/" && w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: Cache-Control %q", rq.method, rq.target, w.Header().Get("Cache-Control"))
		}
	}
}

func TestAllowedHosts(t *testing.T) {
	opts := testOptions()
	opts.AllowedHosts = []string{"localhost", "node-1.example"}
	h := Handler(newFake(), opts)
	for _, tc := range []struct {
		host   string
		status int
	}{
		{"localhost:9400", 200}, {"LOCALHOST:9400", 200}, {"localhost", 200}, {"node-1.example.:9400", 200},
		{"127.0.0.1:9400", 200}, {"[::1]:9400", 200}, {"10.0.0.7:9400", 200},
		{"evil.example:9400", 421}, {"localhost.evil.example", 421}, {"", 421},
	} {
		r := httptest.NewRequest("GET", "/api/v1/state", nil)
		r.Host = tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("Host %q: %d, want %d", tc.host, w.Code, tc.status)
		}
		if w.Code == 421 {
			if e := errorDoc(t, w); !strings.Contains(e.Message, "is not served here") {
				t.Errorf("%q", e.Message)
			}
		}
	}
}

// TestStateMutationsFlag: the state says mutations only when a request with
// the token would be accepted.
func TestStateMutationsFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want bool
	}{
		{"on", Options{Mutations: true, Token: []byte(token)}, true},
		{"off", Options{Token: []byte(token)}, false},
		{"read-only", Options{Mutations: true, ReadOnly: true, Token: []byte(token)}, false},
		{"no token", Options{Mutations: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.state.Mutations = !tc.want // the Backend's value does not matter
			var s State
			decodeBody(t, serve(t, Handler(f, tc.opts), req{target: "/api/v1/state"}), &s)
			if s.Mutations != tc.want {
				t.Errorf("mutations %v, want %v", s.Mutations, tc.want)
			}
		})
	}
}

// TestResponsesAreStrictJSON decodes each route's document into its type
// with unknown fields refused, so the Go types and the wire agree.
func TestResponsesAreStrictJSON(t *testing.T) {
	h := Handler(newFake(), testOptions())
	w := serve(t, h, req{target: "/api/v1/state"})
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"schema", "time", "hostname", "simulated", "mutations", "devices", "processes", "alerts"} {
		if _, ok := m[k]; !ok {
			t.Errorf("state has no %q key", k)
		}
	}
}
