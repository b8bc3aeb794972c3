package api

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Limits and defaults. See the package documentation for what each bounds.
const (
	// MaxRange is the longest time range a query may span.
	MaxRange = 31 * 24 * time.Hour
	// MaxPoints is the most buckets a history query may ask for.
	MaxPoints = 10000
	// DefaultPoints bounds the buckets of a history query without step.
	DefaultPoints = 1000
	// MinStep is the finest step: the store keeps times in milliseconds.
	MinStep = time.Millisecond
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 64 << 10

	DefaultStatePeriod  = time.Second
	DefaultPingPeriod   = 15 * time.Second
	DefaultMaxStreams   = 64
	DefaultQueryTimeout = 30 * time.Second

	defaultHistoryRange = time.Hour
	defaultEventRange   = 24 * time.Hour
)

// Options configures Handler. The zero value serves the read-only API with
// no metrics and no dashboard.
type Options struct {
	// Metrics, when set, is served at GET /metrics (the daemon passes
	// promhttp.HandlerFor on its own registry).
	Metrics http.Handler
	// UI, when set, is served at GET / and every path not routed
	// otherwise (the embedded dashboard).
	UI http.Handler
	// Mutations enables POST /api/v1/signal and /api/v1/reload. They then
	// need Token; without one they stay refused.
	Mutations bool
	// Token is the bearer token the mutating endpoints require
	// (ReadTokenFile reads it).
	Token []byte
	// ReadOnly refuses every mutation, whatever Mutations says.
	ReadOnly bool
	// Logger receives server errors (Error), refused mutations and
	// signals (Info, Warn) and each request (Debug). Nil: no log.
	Logger *slog.Logger
	// StatePeriod is the least time between two "state" events of one
	// stream (default DefaultStatePeriod).
	StatePeriod time.Duration
	// PingPeriod is the time between two ": ping" comments of a stream
	// (default DefaultPingPeriod).
	PingPeriod time.Duration
	// Done, when closed, ends every open event stream. The daemon closes
	// it when it shuts its server down: http.Server.Shutdown does not
	// cancel the requests it waits for.
	Done <-chan struct{}
	// MaxStreams is the most event streams open at once (default
	// DefaultMaxStreams); more are answered 503.
	MaxStreams int
	// QueryTimeout bounds each Backend call of a read (default
	// DefaultQueryTimeout); past it the request gets 503.
	QueryTimeout time.Duration
	// AllowedHosts, when not empty, are the only host names (besides IP
	// addresses) a request's Host header may name; others get 421. It
	// defends a loopback daemon against DNS rebinding.
	AllowedHosts []string
	// Now is the clock relative times ("-1h") count from (default
	// time.Now).
	Now func() time.Time
}

// Handler returns the daemon's HTTP handler: the routes of the package
// documentation over b. It never panics on a request; see the package
// documentation for the error format and the security rules.
func Handler(b Backend, opts Options) http.Handler {
	h := &handler{b: b, o: opts, log: opts.Logger, now: opts.Now}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.o.StatePeriod <= 0 {
		h.o.StatePeriod = DefaultStatePeriod
	}
	if h.o.PingPeriod <= 0 {
		h.o.PingPeriod = DefaultPingPeriod
	}
	if h.o.MaxStreams <= 0 {
		h.o.MaxStreams = DefaultMaxStreams
	}
	if h.o.QueryTimeout <= 0 {
		h.o.QueryTimeout = DefaultQueryTimeout
	}
	if len(opts.Token) > 0 {
		h.tokenSum = sha256.Sum256(opts.Token)
	}
	h.mutations = opts.Mutations && !opts.ReadOnly && len(opts.Token) > 0
	if opts.Mutations && !opts.ReadOnly && len(opts.Token) == 0 {
		h.log.Error("api: mutating endpoints are enabled but no token is configured; they will refuse every request")
	}
	h.routes()
	return h
}

// handler serves every route. Its fields are set by Handler and then only
// read, except streams, which is atomic.
type handler struct {
	b         Backend
	o         Options
	log       *slog.Logger
	now       func() time.Time
	tokenSum  [sha256.Size]byte // of Options.Token; zero when there is none
	mutations bool              // the mutating endpoints accept a request with the token
	mux       *http.ServeMux
	streams   atomic.Int64 // event streams open now
}

// apiFunc is a route's handler: it writes a success itself and returns any
// failure, which ServeHTTP's error path turns into the JSON error document.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// routes builds the mux. Each path gets its method-specific patterns plus a
// method-less pattern of its own that answers 405 with Allow: the mux
// prefers the more specific pattern, so the fallback only sees the wrong
// methods. "/api/" catches unknown API paths (404 in JSON).
func (h *handler) routes() {
	h.mux = http.NewServeMux()
	allow := map[string][]string{}
	var order []string
	add := func(method, path string, f apiFunc) {
		h.mux.Handle(method+" "+path, h.api(f))
		if _, ok := allow[path]; !ok {
			order = append(order, path)
		}
		allow[path] = append(allow[path], method)
		if method == http.MethodGet {
			allow[path] = append(allow[path], http.MethodHead)
		}
	}
	add("GET", "/api/v1/state", h.getState)
	add("GET", "/api/v1/devices", h.getDevices)
	add("GET", "/api/v1/processes", h.getProcesses)
	add("GET", "/api/v1/history/devices/{gpu}", h.getDeviceHistory)
	add("GET", "/api/v1/history/processes/{gpu}/{pid}", h.getProcessHistory)
	add("GET", "/api/v1/alerts", h.getAlerts)
	add("GET", "/api/v1/actions", h.getActions)
	add("POST", "/api/v1/signal", h.mutating(h.postSignal))
	add("POST", "/api/v1/reload", h.mutating(h.postReload))
	add("GET", "/events", h.getEvents)
	h.mux.HandleFunc("GET /healthz", h.getHealth)
	allow["/healthz"] = []string{http.MethodGet, http.MethodHead}
	order = append(order, "/healthz")
	if h.o.Metrics != nil {
		h.mux.Handle("GET /metrics", h.o.Metrics)
		allow["/metrics"] = []string{http.MethodGet, http.MethodHead}
		order = append(order, "/metrics")
	}
	if h.o.UI != nil {
		// Not "GET /": with that pattern beside the method-less fallbacks
		// below, the mux cannot rank "GET /" against "/api/v1/state".
		h.mux.Handle("/", h.ui())
	}
	for _, path := range order {
		methods := strings.Join(allow[path], ", ")
		h.mux.Handle(path, h.api(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", methods)
			return errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, methods)
		}))
	}
	notFound := h.api(func(w http.ResponseWriter, r *http.Request) error {
		return errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	h.mux.Handle("/api/", notFound)
	h.mux.Handle("/api", notFound)
	if h.o.UI == nil {
		h.mux.Handle("/", notFound)
	}
}

// ui serves Options.UI for GET and HEAD, 405 for the other methods.
func (h *handler) ui() http.Handler {
	wrong := h.api(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", "GET, HEAD")
		return errorf(http.StatusMethodNotAllowed, "method %s is not allowed on %s; allowed: GET, HEAD", r.Method, r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			wrong.ServeHTTP(w, r)
			return
		}
		h.o.UI.ServeHTTP(w, r)
	})
}

// ServeHTTP sets the headers every response carries, refuses hosts not
// allowed, and hands the request to the mux. A panic below is logged and
// answered with 500.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("api: panic serving a request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
			h.log.Debug("api: panic stack", "stack", string(debug.Stack()))
			if sw.status == 0 {
				h.writeError(sw, &Error{Status: http.StatusInternalServerError, Message: "internal error; the daemon's log has the details"})
			}
		}
		h.log.Debug("api: request", "method", r.Method, "path", r.URL.Path, "status", sw.code(), "remote", r.RemoteAddr, "took", time.Since(start))
	}()
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
	if noStore(r.URL.Path) {
		hdr.Set("Cache-Control", "no-store")
	}
	if !h.hostAllowed(r.Host) {
		h.writeError(sw, errorf(http.StatusMisdirectedRequest, "host %q is not served here; use one of %s or an IP address", r.Host, strings.Join(h.o.AllowedHosts, ", ")))
		return
	}
	h.mux.ServeHTTP(sw, r)
}

// noStore reports whether a path is one of this package's own (API,
// stream, probe, metrics), whose responses must not be cached; the UI
// handler chooses its own caching.
func noStore(path string) bool {
	return path == "/api" || strings.HasPrefix(path, "/api/") || path == "/events" || path == "/healthz" || path == "/metrics"
}

// api adapts an apiFunc: a returned error becomes the JSON error document.
func (h *handler) api(f apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			h.fail(w, r, err)
		}
	})
}

// Error is the body of an error response, and the error a route returns to
// produce one: {"schema": Schema, "error": {"status": 404, "message": "..."}}.
type Error struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

func errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Message: fmt.Sprintf(format, args...)}
}

// fail answers a request with err: an *Error as it is, a Backend's
// sentinel errors with their status and message, a deadline with 503, and
// anything else with 500 and a generic message (err goes to the log).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, ErrNotFound):
		e = &Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, ErrConflict):
		e = &Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, ErrInvalid):
		e = &Error{Status: http.StatusBadRequest, Message: err.Error()}
	case r.Context().Err() != nil:
		// The client went away; there is no one to answer.
		h.log.Debug("api: request abandoned by the client", "method", r.Method, "path", r.URL.Path, "err", err)
		return
	case errors.Is(err, context.DeadlineExceeded):
		h.log.Warn("api: query timed out", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		e = errorf(http.StatusServiceUnavailable, "the query took longer than %v; ask for a shorter range or a coarser step", h.o.QueryTimeout)
	default:
		h.log.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		e = &Error{Status: http.StatusInternalServerError, Message: "internal error; the daemon's log has the details"}
	}
	h.writeError(w, e)
}

// ErrorResponse is the document of every error response.
type ErrorResponse struct {
	Schema string `json:"schema"`
	Error  *Error `json:"error"`
}

func (h *handler) writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	h.writeJSON(w, e.Status, ErrorResponse{Schema: Schema, Error: e})
}

// writeJSON encodes v whole before writing anything, so that an encoding
// failure can still become a 500.
func (h *handler) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	h.writeEncoded(w, status, b, err)
}

// writeEncoded writes a document encoded already; err is the encoder's.
func (h *handler) writeEncoded(w http.ResponseWriter, status int, b []byte, err error) {
	if err != nil {
		h.log.Error("api: encoding a response", "err", err)
		status = http.StatusInternalServerError
		b = []byte(`{"schema":"` + Schema + `","error":{"status":500,"message":"internal error; the daemon's log has the details"}}`)
	}
	b = append(b, '\n')
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json; charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// statusWriter remembers the status written, for the request log and the
// panic path. Unwrap lets http.ResponseController reach the connection
// (flush, deadlines) through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// hostAllowed checks a request's Host header against Options.AllowedHosts.
func (h *handler) hostAllowed(host string) bool {
	if len(h.o.AllowedHosts) == 0 {
		return true
	}
	name := hostOnly(host)
	if isIPLiteral(name) {
		return true
	}
	name = strings.TrimSuffix(name, ".")
	return slices.ContainsFunc(h.o.AllowedHosts, func(a string) bool { return strings.EqualFold(strings.TrimSuffix(a, "."), name) })
}

var errNoSample = &Error{Status: http.StatusServiceUnavailable, Message: "no sample yet: the daemon is starting"}

// state returns the latest State ready to be written: schema and
// mutations set, lists never null.
func (h *handler) state() (State, bool) {
	s, ok := h.b.State()
	if !ok {
		return State{}, false
	}
	return h.prepare(s), true
}

// prepare copies where it must change something: the Backend's slices are
// shared with other readers and are never written. It sets each process's
// signalable fields.
func (h *handler) prepare(s State) State {
	s.Schema = Schema
	s.Mutations = h.mutations
	s.Devices = devicesOrEmpty(s.Devices)
	s.Processes = withSignalable(s.Processes)
	s.Alerts = orEmpty(s.Alerts)
	return s
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func devicesOrEmpty(ds []Device) []Device {
	if !slices.ContainsFunc(ds, func(d Device) bool { return d.Recent == nil }) {
		return orEmpty(ds)
	}
	out := slices.Clone(ds)
	for i := range out {
		out[i].Recent = orEmpty(out[i].Recent)
	}
	return out
}

// Response documents of the read routes, for clients written in Go.
type (
	DevicesResponse struct {
		Schema  string    `json:"schema"`
		Time    time.Time `json:"time"`
		Devices []Device  `json:"devices"`
	}
	ProcessesResponse struct {
		Schema    string    `json:"schema"`
		Time      time.Time `json:"time"`
		Processes []Process `json:"processes"`
	}
	DeviceHistoryResponse struct {
		Schema string        `json:"schema"`
		GPU    string        `json:"gpu_uuid"`
		From   time.Time     `json:"from"`
		To     time.Time     `json:"to"`
		Step   float64       `json:"step_seconds"`
		Points []DevicePoint `json:"points"`
	}
	ProcessHistoryResponse struct {
		Schema string         `json:"schema"`
		GPU    string         `json:"gpu_uuid"`
		PID    uint32         `json:"pid"`
		From   time.Time      `json:"from"`
		To     time.Time      `json:"to"`
		Step   float64        `json:"step_seconds"`
		Points []ProcessPoint `json:"points"`
	}
	AlertsResponse struct {
		Schema string  `json:"schema"`
		Alerts []Alert `json:"alerts"`
	}
	ActionsResponse struct {
		Schema  string   `json:"schema"`
		Actions []Action `json:"actions"`
	}
	// SignalResponse is SignalResult with the schema key.
	SignalResponse struct {
		Schema string `json:"schema"`
		SignalResult
	}
	ReloadResponse struct {
		Schema string `json:"schema"`
		OK     bool   `json:"ok"`
	}
)

func (h *handler) getState(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	s, ok := h.state()
	if !ok {
		return errNoSample
	}
	b, err := marshalState(s)
	h.writeEncoded(w, http.StatusOK, b, err)
	return nil
}

func (h *handler) getDevices(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	s, ok := h.state()
	if !ok {
		return errNoSample
	}
	h.writeJSON(w, http.StatusOK, DevicesResponse{Schema: Schema, Time: s.Time, Devices: s.Devices})
	return nil
}

func (h *handler) getProcesses(w http.ResponseWriter, r *http.Request) error {
	v, err := params(r, "gpu")
	if err != nil {
		return err
	}
	var ref gpuRef
	if v.Has("gpu") {
		if ref, err = parseGPU("gpu", v.Get("gpu")); err != nil {
			return err
		}
	}
	s, ok := h.state()
	if !ok {
		return errNoSample
	}
	ps := s.Processes
	if v.Has("gpu") {
		d, err := findGPU(s, ref)
		if err != nil {
			return err
		}
		ps = []Process{}
		for _, p := range s.Processes {
			if p.GPU == d.UUID {
				ps = append(ps, p)
			}
		}
	}
	b, err := marshalProcesses(s.Time, ps) // ProcessesResponse, as written
	h.writeEncoded(w, http.StatusOK, b, err)
	return nil
}

// findGPU looks a GPU up in a State by index or UUID.
func findGPU(s State, ref gpuRef) (Device, error) {
	for _, d := range s.Devices {
		if ref.byIndex && d.Index == ref.index || !ref.byIndex && d.UUID == ref.uuid {
			return d, nil
		}
	}
	if ref.byIndex {
		return Device{}, errorf(http.StatusNotFound, "no GPU with index %d on this node (%s)", ref.index, gpuIndexes(s))
	}
	return Device{}, errorf(http.StatusNotFound, "no GPU with UUID %s on this node (%s)", ref.uuid, gpuIndexes(s))
}

func gpuIndexes(s State) string {
	if len(s.Devices) == 0 {
		return "it has none"
	}
	idx := make([]string, len(s.Devices))
	for i, d := range s.Devices {
		idx[i] = strconv.Itoa(d.Index)
	}
	return "indexes " + strings.Join(idx, ", ")
}

// historyGPU resolves a history path's GPU: a UUID as it is (its history
// may outlive the device), an index through the latest State.
func (h *handler) historyGPU(r *http.Request) (string, error) {
	ref, err := parseGPU("gpu", r.PathValue("gpu"))
	if err != nil {
		return "", err
	}
	if !ref.byIndex {
		return ref.uuid, nil
	}
	s, ok := h.b.State()
	if !ok {
		return "", errNoSample
	}
	d, err := findGPU(s, ref)
	return d.UUID, err
}

// historyRange is what both history routes read after their own
// parameters: the GPU their path names and the range of the query v.
func (h *handler) historyRange(r *http.Request, v url.Values) (string, HistoryQuery, error) {
	uuid, err := h.historyGPU(r)
	if err != nil {
		return "", HistoryQuery{}, err
	}
	q, err := parseHistory(v, h.now())
	return uuid, q, err
}

func (h *handler) getDeviceHistory(w http.ResponseWriter, r *http.Request) error {
	v, err := params(r, "from", "to", "step")
	if err != nil {
		return err
	}
	uuid, q, err := h.historyRange(r, v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.QueryTimeout)
	defer cancel()
	pts, err := h.b.DeviceHistory(ctx, uuid, q)
	if err != nil {
		return fmt.Errorf("device history of %s: %w", uuid, err)
	}
	h.writeJSON(w, http.StatusOK, DeviceHistoryResponse{Schema: Schema, GPU: uuid, From: q.From, To: q.To, Step: q.Step.Seconds(), Points: orEmpty(pts)})
	return nil
}

func (h *handler) getProcessHistory(w http.ResponseWriter, r *http.Request) error {
	v, err := params(r, "from", "to", "step")
	if err != nil {
		return err
	}
	pid, err := parsePID("pid", r.PathValue("pid"))
	if err != nil {
		return err
	}
	uuid, q, err := h.historyRange(r, v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.QueryTimeout)
	defer cancel()
	pts, err := h.b.ProcessHistory(ctx, uuid, pid, q)
	if err != nil {
		return fmt.Errorf("history of process %d on %s: %w", pid, uuid, err)
	}
	if slices.ContainsFunc(pts, func(p ProcessPoint) bool { return p.Flags == nil }) {
		pts = slices.Clone(pts)
		for i := range pts {
			pts[i].Flags = orEmpty(pts[i].Flags)
		}
	}
	type fields ProcessHistoryResponse
	h.writeJSON(w, http.StatusOK, struct { // ProcessHistoryResponse, as written
		fields
		Points []wirePoint `json:"points"`
	}{fields{Schema: Schema, GPU: uuid, PID: pid, From: q.From, To: q.To, Step: q.Step.Seconds()}, wirePoints(pts)})
	return nil
}

func (h *handler) getAlerts(w http.ResponseWriter, r *http.Request) error {
	return getEvents(h, w, r, "alerts", h.b.Alerts, func(as []Alert) any {
		return AlertsResponse{Schema: Schema, Alerts: orEmpty(as)}
	})
}

func (h *handler) getActions(w http.ResponseWriter, r *http.Request) error {
	return getEvents(h, w, r, "actions", h.b.Actions, func(as []Action) any {
		return ActionsResponse{Schema: Schema, Actions: orEmpty(as)}
	})
}

// getEvents answers a list of recorded events over a time range (from, to;
// the last day by default): what names it in errors, list reads it from
// the backend, body wraps it in its response document.
func getEvents[T any](h *handler, w http.ResponseWriter, r *http.Request, what string,
	list func(ctx context.Context, from, to time.Time) ([]T, error), body func([]T) any) error {
	v, err := params(r, "from", "to")
	if err != nil {
		return err
	}
	from, to, err := parseRange(v, h.now(), defaultEventRange)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.QueryTimeout)
	defer cancel()
	xs, err := list(ctx, from, to)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	h.writeJSON(w, http.StatusOK, body(xs))
	return nil
}

// getHealth is the probe: plain text, 200 once a sample exists.
func (h *handler) getHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if _, ok := h.b.State(); !ok {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("no sample yet\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
