package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// now is the fake clock of every test: relative times count from it.
var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	uuid0 = "GPU-11111111-2222-3333-4444-555555555555"
	uuid1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
	token = "s3cret-token-for-tests-0123456789"
)

// sampleState is a node of two GPUs and three processes.
func sampleState() State {
	start := now.Add(-time.Hour)
	return State{
		Time: now.Add(-time.Second), Hostname: "node-1", Simulated: true,
		Devices: []Device{
			{Index: 0, UUID: uuid0, Name: "NVIDIA H200", Healthy: true, TotalBytes: 150 << 30, UsedBytes: 40 << 30, FreeBytes: 110 << 30, UtilPercent: 50, Recent: []uint64{1, 2, 3}, RecentStep: 1},
			{Index: 1, UUID: uuid1, Name: "NVIDIA H200", Healthy: false, Error: "Xid 79", TotalBytes: 150 << 30, UtilPercent: -1},
		},
		Processes: []Process{
			{GPU: uuid0, GPUIndex: 0, PID: 4242, StartTime: start, User: "ada", Command: "python train.py", UsedBytes: 30 << 30, MemoryKnown: true, Flags: []string{}, Recent: []uint64{5}},
			{GPU: uuid0, GPUIndex: 0, PID: 4343, StartTime: start, User: "bob", Command: "python leak.py", UsedBytes: 10 << 30, MemoryKnown: true, Flags: []string{"orphaned"},
				Leak: &Leak{Verdict: "leak", Slope: 1 << 20, Confidence: 0.99, Reason: "grows"}},
			{GPU: uuid1, GPUIndex: 1, PID: 5000, StartTime: start, User: "eve", Command: "jupyter", UsedBytes: 1 << 30},
		},
	}
}

// fakeBackend is a Backend whose answers the tests set and whose calls they
// inspect. publish sends an event to every subscriber.
type fakeBackend struct {
	mu        sync.Mutex
	state     State
	hasState  bool
	subs      map[int]chan Event
	nextSub   int
	cancelled int // subscriptions cancelled
	panicNow  bool

	historyErr error
	devPoints  []DevicePoint
	procPoints []ProcessPoint
	alerts     []Alert
	actions    []Action
	gotUUID    string
	gotPID     uint32
	gotQuery   HistoryQuery
	gotFrom    time.Time
	gotTo      time.Time

	signals   []SignalRequest
	signalErr error
	reloads   int
	reloadErr error
}

func newFake() *fakeBackend {
	return &fakeBackend{state: sampleState(), hasState: true, subs: map[int]chan Event{}}
}

func (f *fakeBackend) State() (State, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.panicNow {
		panic("fake backend: boom")
	}
	return f.state, f.hasState
}

func (f *fakeBackend) Subscribe() (<-chan Event, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.nextSub
	f.nextSub++
	ch := make(chan Event, 64)
	f.subs[id] = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if c, ok := f.subs[id]; ok {
				delete(f.subs, id)
				close(c)
			}
			f.cancelled++
		})
	}
}

func (f *fakeBackend) publish(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// closeAll ends every subscription from the Backend's side.
func (f *fakeBackend) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, ch := range f.subs {
		close(ch)
		delete(f.subs, id)
	}
}

func (f *fakeBackend) subscribers() (open, cancelled int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs), f.cancelled
}

func (f *fakeBackend) DeviceHistory(ctx context.Context, uuid string, q HistoryQuery) ([]DevicePoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotUUID, f.gotQuery = uuid, q
	if f.historyErr != nil {
		return nil, f.historyErr
	}
	return f.devPoints, nil
}

func (f *fakeBackend) ProcessHistory(ctx context.Context, uuid string, pid uint32, q HistoryQuery) ([]ProcessPoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotUUID, f.gotPID, f.gotQuery = uuid, pid, q
	if f.historyErr != nil {
		return nil, f.historyErr
	}
	return f.procPoints, nil
}

func (f *fakeBackend) Alerts(ctx context.Context, from, to time.Time) ([]Alert, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotFrom, f.gotTo = from, to
	return f.alerts, f.historyErr
}

func (f *fakeBackend) Actions(ctx context.Context, from, to time.Time) ([]Action, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gotFrom, f.gotTo = from, to
	return f.actions, f.historyErr
}

func (f *fakeBackend) Signal(ctx context.Context, r SignalRequest) (SignalResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, r)
	if f.signalErr != nil {
		return SignalResult{}, f.signalErr
	}
	return SignalResult{Action: Action{Time: now, Rule: "api", PID: r.PID, StartTime: r.StartTime, Action: strings.ToLower(r.Signal), Reason: r.Reason, Result: "sent"}}, nil
}

func (f *fakeBackend) Reload(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	return f.reloadErr
}

func (f *fakeBackend) calls() (signals, reloads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.signals), f.reloads
}

// testOptions are the options most tests use: a fixed clock, mutations on
// with the test token.
func testOptions() Options {
	return Options{Mutations: true, Token: []byte(token), Now: func() time.Time { return now }}
}

// req describes one request of a table.
type req struct {
	method, target, body string
	header               map[string]string
}

// serve runs one request through h and returns the recorded response.
func serve(t testing.TB, h http.Handler, rq req) *httptest.ResponseRecorder {
	t.Helper()
	method := rq.method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	r := httptest.NewRequest(method, rq.target, body)
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// errorDoc decodes an error response, failing the test if it is not one.
func errorDoc(t testing.TB, w *httptest.ResponseRecorder) *Error {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("error response Content-Type %q, body %q", ct, w.Body)
	}
	var doc ErrorResponse
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("error response is not the error document: %v", err)
	}
	if doc.Schema != Schema || doc.Error == nil {
		t.Fatalf("error document %+v: want schema %q and an error", doc, Schema)
	}
	if doc.Error.Status != w.Code {
		t.Fatalf("error document status %d, response status %d", doc.Error.Status, w.Code)
	}
	return doc.Error
}

// decodeBody decodes a success response into v, strictly.
func decodeBody(t testing.TB, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %T: %v", v, err)
	}
}
