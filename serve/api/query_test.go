package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{"2026-11-30T10:00:00Z", now.Add(-2 * time.Hour), ""},
		{"2026-11-30T11:00:00+01:00", now.Add(-2 * time.Hour), ""},
		{"2026-11-30T11:00:00 01:00", now.Add(-2 * time.Hour), ""}, // an unencoded '+'
		{"2026-11-30T10:00:00.250Z", now.Add(-2*time.Hour + 250*time.Millisecond), ""},
		{"1796032800", now.Add(-2 * time.Hour), ""},
		{"1796032800.5", now.Add(-2*time.Hour + 500*time.Millisecond), ""},
		{"1796032800.0000000019", now.Add(-2*time.Hour + time.Nanosecond), ""},
		{"0", time.Unix(0, 0).UTC(), ""},
		{"now", now, ""},
		{"-0s", now, ""},
		{"-90m", now.Add(-90 * time.Minute), ""},
		{"-1h30m", now.Add(-90 * time.Minute), ""},
		{"-7d", now.Add(-7 * 24 * time.Hour), ""},
		{"-1.5h", now.Add(-90 * time.Minute), ""},
		{"", time.Time{}, "is empty"},
		{"1h", time.Time{}, "is not a time"},
		{"+1h", time.Time{}, "is in the future"},
		{"-5", time.Time{}, "is not a negative duration"},
		{"-d", time.Time{}, "is not a negative duration"},
		{"-99999999d", time.Time{}, "is not a negative duration"},
		{"-2562047h", time.Time{}, "is before 1970"},
		{"1796032800000", time.Time{}, "out of range for Unix seconds"},
		{"253402300800", time.Time{}, "out of range"},
		{"1.2.3", time.Time{}, "is not a time"},
		{"2026-11-30", time.Time{}, "is not a time"},
		{"2026-11-30 10:00:00", time.Time{}, "is not a time"},
		{"yesterday", time.Time{}, `"yesterday" is not a time: want RFC 3339`},
		{"1969-12-31T23:59:59Z", time.Time{}, "is before 1970"},
		{"NaN", time.Time{}, "is not a time"},
	} {
		got, err := parseTime("from", tc.in, now)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), `query parameter "from"`) {
				t.Errorf("%q: %v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseStep(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"10s", 10 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"10", 10 * time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"0.001", time.Millisecond, ""},
		{"1.5ms", time.Millisecond, ""}, // whole milliseconds
		{"744h", MaxRange, ""},
		{"0", 0, "too short"},
		{"0.0001", 0, "too short"},
		{"999us", 0, "too short"},
		{"-1s", 0, "too short"},
		{"745h", 0, "too long"},
		{"1e9", 0, "is not a duration"},
		{"99999999999", 0, "too long"},
		{"", 0, "is empty"},
		{"fast", 0, "is not a duration"},
		{"10 s", 0, "is not a duration"},
	} {
		got, err := parseStep(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseHistory(t *testing.T) {
	for _, tc := range []struct {
		query   string
		want    HistoryQuery
		points  int64
		wantErr string
	}{
		// Defaults: the last hour, the smallest round step giving <= 1000 points.
		{"", HistoryQuery{From: now.Add(-time.Hour), To: now, Step: 5 * time.Second}, 720, ""},
		{"from=-15m", HistoryQuery{From: now.Add(-15 * time.Minute), To: now, Step: time.Second}, 900, ""},
		{"from=-6h", HistoryQuery{From: now.Add(-6 * time.Hour), To: now, Step: 30 * time.Second}, 720, ""},
		{"from=-24h", HistoryQuery{From: now.Add(-24 * time.Hour), To: now, Step: 2 * time.Minute}, 720, ""},
		{"from=-7d", HistoryQuery{From: now.Add(-7 * 24 * time.Hour), To: now, Step: 15 * time.Minute}, 672, ""},
		{"from=-31d", HistoryQuery{From: now.Add(-31 * 24 * time.Hour), To: now, Step: time.Hour}, 744, ""},
		{"from=-10s", HistoryQuery{From: now.Add(-10 * time.Second), To: now, Step: time.Second}, 10, ""},
		// to without from: an hour before to.
		{"to=-1h", HistoryQuery{From: now.Add(-2 * time.Hour), To: now.Add(-time.Hour), Step: 5 * time.Second}, 720, ""},
		// from is aligned down to a multiple of the step.
		{"from=2026-11-30T11:00:07Z&step=10s", HistoryQuery{From: now.Add(-time.Hour), To: now, Step: 10 * time.Second}, 360, ""},
		{"from=2026-11-30T11:00:07.5Z&to=2026-11-30T11:00:09Z", HistoryQuery{From: now.Add(-time.Hour + 7*time.Second), To: now.Add(-time.Hour + 9*time.Second), Step: time.Second}, 2, ""},
		{"from=-1h&step=0.36", HistoryQuery{From: now.Add(-time.Hour), To: now, Step: 360 * time.Millisecond}, 10000, ""},
		{"from=-1h&step=0.359", HistoryQuery{}, 0, "gives 10028 points; at most 10000: use a step of at least 361ms"},
		{"from=-31d&step=1m", HistoryQuery{}, 0, "gives 44640 points"},
		{"from=-32d", HistoryQuery{}, 0, "at most 744h0m0s"},
		{"from=now", HistoryQuery{}, 0, "is not before to"},
	} {
		v, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseHistory(v, now)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %+v, %v; want error %q", tc.query, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.query, got, err, tc.want)
			continue
		}
		if n := buckets(got.From, got.To, got.Step); n != tc.points {
			t.Errorf("%q: %d points, want %d", tc.query, n, tc.points)
		}
	}
}

// TestLeastStepFits: the step an error suggests is accepted, for ranges
// and starts of every kind.
func TestLeastStepFits(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 9999 * time.Millisecond, 10001 * time.Millisecond, time.Hour, 24*time.Hour + 7*time.Millisecond, MaxRange} {
		for _, off := range []time.Duration{0, time.Millisecond, 499 * time.Microsecond, 7777 * time.Millisecond} {
			if off >= d {
				continue
			}
			from := now.Add(-d).Add(off)
			v := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {now.Format(time.RFC3339Nano)}, "step": {leastStep(now.Sub(from)).String()}}
			if _, err := parseHistory(v, now); err != nil {
				t.Errorf("range %v from %v: the suggested step %v is refused: %v", d, from, leastStep(now.Sub(from)), err)
			}
		}
	}
}

func TestParseParams(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		allowed []string
		wantErr string
	}{
		{"", nil, ""},
		{"from=-1h&to=now", []string{"from", "to"}, ""},
		{"from=-1h&x=1", []string{"from", "to"}, `unknown query parameter "x": this endpoint takes from, to`},
		{"a=1", nil, `unknown query parameter "a": this endpoint takes none`},
		{"from=1&from=2", []string{"from"}, `"from" is given 2 times`},
		{"from=%", []string{"from"}, "malformed query string"},
		{"from=1;to=2", []string{"from", "to"}, "malformed query string"},
	} {
		_, err := parseParams(tc.raw, tc.allowed...)
		if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: %v, want %q", tc.raw, err, tc.wantErr)
		}
	}
}

// FuzzParseHistory checks the query parser on any query string: it never
// panics, every error is a 400 with a message, and what it accepts keeps
// the package's limits.
func FuzzParseHistory(f *testing.F) {
	for _, s := range []string{
		"", "from=-1h", "from=-7d&to=now", "from=1796032800&to=1796036400&step=10", "step=0.5",
		"from=2026-11-30T11:00:00Z&to=2026-11-30T11:30:00%2B01:00", "from=-1h&step=1ms", "to=0", "from=0&to=1",
		"step=744h", "from=-99999d", "from=%zz", "from=1&from=2", "from=-1h30m&step=1m30s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := parseParams(raw, "from", "to", "step")
		if err != nil {
			checkBadRequest(t, err)
			return
		}
		q, err := parseHistory(v, now)
		if err != nil {
			checkBadRequest(t, err)
			return
		}
		switch {
		case !q.From.Before(q.To):
			t.Fatalf("%q: empty range %+v", raw, q)
		case q.From.Before(minTime) || q.To.After(maxTime):
			t.Fatalf("%q: out of bounds %+v", raw, q)
		case q.Step < MinStep || q.Step > MaxRange || q.Step%time.Millisecond != 0:
			t.Fatalf("%q: step %v", raw, q.Step)
		case q.To.Sub(q.From) > MaxRange+q.Step:
			t.Fatalf("%q: range %v", raw, q.To.Sub(q.From))
		case buckets(q.From, q.To, q.Step) > MaxPoints:
			t.Fatalf("%q: %d points", raw, buckets(q.From, q.To, q.Step))
		case q.From.UnixMilli()%q.Step.Milliseconds() != 0:
			t.Fatalf("%q: from %v not aligned to %v", raw, q.From, q.Step)
		case !v.Has("step") && buckets(q.From, q.To, q.Step) > DefaultPoints:
			t.Fatalf("%q: default step gives %d points", raw, buckets(q.From, q.To, q.Step))
		}
	})
}

// FuzzParseGPUAndPID: no panic, errors are 400s, an accepted UUID holds
// only the allowed bytes.
func FuzzParseGPUAndPID(f *testing.F) {
	for _, s := range []string{"0", "7", uuid0, "MIG-1234", "4096", "", "GPU x", "-1", "4294967295", "4294967296", "00012"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := parseGPU("gpu", s)
		if err != nil {
			checkBadRequest(t, err)
		} else if !ref.byIndex && (len(ref.uuid) == 0 || len(ref.uuid) > maxUUID || strings.ContainsAny(ref.uuid, " /?#%\"<>\\\x00\n")) {
			t.Fatalf("accepted UUID %q", ref.uuid)
		}
		pid, err := parsePID("pid", s)
		if err != nil {
			checkBadRequest(t, err)
		} else if pid == 0 {
			t.Fatalf("accepted pid 0 from %q", s)
		}
	})
}

// FuzzDecodeSignal: any body either decodes to a request that keeps every
// rule or is refused with a 400.
func FuzzDecodeSignal(f *testing.F) {
	for _, s := range []string{
		goodSignal, `{}`, `{"pid":2,"start_time":"2026-01-01T00:00:00Z","signal":"KILL"}`, `{"pid":2,"pid":3}`,
		`{"PID":2}`, `[]`, `null`, `{"pid":1e3}`, `{"pid":-0}`, `{"reason":"\u0000"}`, `{} {}`, `{"pid":2,"start_time":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeSignal(body)
		if err != nil {
			checkBadRequest(t, err)
			return
		}
		if r.PID <= 1 || r.StartTime.IsZero() || r.Signal != "TERM" && r.Signal != "KILL" || len(r.Reason) > maxReason || !utf8.ValidString(r.Reason) {
			t.Fatalf("accepted %+v from %q", r, body)
		}
	})
}

// FuzzHandler sends arbitrary requests through the whole handler: it never
// panics, never answers 500, and every error is the JSON error document.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ method, target, body string }{
		{"GET", "/api/v1/state", ""}, {"GET", "/api/v1/processes?gpu=1", ""}, {"GET", "/api/v1/history/devices/0?from=-1h&step=10s", ""},
		{"GET", "/api/v1/history/processes/" + uuid0 + "/4242?from=-7d", ""}, {"GET", "/api/v1/alerts?from=0&to=1", ""},
		{"POST", "/api/v1/signal", goodSignal}, {"POST", "/api/v1/reload", "{}"}, {"DELETE", "/api/v1/actions", ""},
		{"GET", "/api/v1/history/devices/%2e%2e", ""}, {"GET", "/nope", ""}, {"POST", "/api/v1/signal", `{"pid":1}`},
	} {
		f.Add(s.method, s.target, s.body)
	}
	fb := newFake()
	h := Handler(fb, testOptions())
	f.Fuzz(func(t *testing.T, method, target, body string) {
		if !validMethod(method) {
			return
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(target, "/") {
			return
		}
		r := &http.Request{Method: method, URL: u, RequestURI: target, Host: "example.com", Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		r.Body = http.NoBody
		if body != "" {
			r.Body = httpBody(body)
			r.ContentLength = int64(len(body))
		}
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q: %d %s", method, target, body, w.Code, w.Body)
		}
		if w.Code >= 400 {
			errorDoc(t, w)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range []byte(m) {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func httpBody(s string) *nopCloser { return &nopCloser{bytes.NewReader([]byte(s))} }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func checkBadRequest(t *testing.T, err error) {
	t.Helper()
	e, ok := err.(*Error)
	if !ok || e.Status != http.StatusBadRequest || e.Message == "" || !utf8.ValidString(e.Message) {
		t.Fatalf("error %#v is not a 400 with a message", err)
	}
}
