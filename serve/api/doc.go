// Package api is the HTTP face of the node daemon (vram serve): the JSON API
// under /api/v1, the live event stream at /events, the health probe at
// /healthz, and the mount points for the Prometheus exposition (/metrics)
// and the web dashboard (/). The daemon (package serve) implements Backend
// and hands it to Handler; this package owns everything between the socket
// and that interface: routing, parsing and validating requests, the
// security rules, the error format and the stream.
//
// # Routes
//
// Every JSON document carries "schema": Schema at the top.
//
//	GET  /api/v1/state                                 State (503 before the first sample)
//	GET  /api/v1/devices                               {schema, time, devices}
//	GET  /api/v1/processes[?gpu=UUID|index]            {schema, time, processes}
//	GET  /api/v1/history/devices/{gpu}?from=&to=&step= {schema, gpu_uuid, from, to, step_seconds, points}
//	GET  /api/v1/history/processes/{gpu}/{pid}?...     the same plus pid
//	GET  /api/v1/alerts?from=&to=                      {schema, alerts}   (default: the last 24 h)
//	GET  /api/v1/actions?from=&to=                     {schema, actions}  (default: the last 24 h)
//	POST /api/v1/signal   SignalRequest                SignalResult       (mutating)
//	POST /api/v1/reload                                {schema, ok: true} (mutating)
//	GET  /events                                       text/event-stream
//	GET  /healthz                                      200 "ok", 503 before the first sample
//	GET  /metrics                                      Options.Metrics, when set
//	GET  /                                             Options.UI, when set
//
// Lists in responses are never null: an empty list is []. The mutations
// field of a State is set by this package to whether the mutating endpoints
// would accept a request with the right token (Options.Mutations, not
// ReadOnly, a token configured), so a client hides its buttons exactly when
// they would fail.
//
// Each process also says whether it can be signalled at all: signalable,
// and when false not_signalable_reason, both set by this package from the
// process itself. A process that /proc does not show (another PID
// namespace, or it exited) has no known start time, so its identity cannot
// be checked: its start_time is null, not a zero date. A zombie has exited
// already (its memory goes when its parent reaps it); init and the daemon
// are never signalled. A signal request naming a process that the latest
// State shows as not signalable is refused with 409 and that reason, before
// the Backend is asked.
//
// History points use the State's key names: a device point has t, samples,
// used_bytes, reserved_bytes and free_bytes (each {min, max, mean} over the
// bucket), total_bytes and util_percent ({min, max, mean}, absent when
// unknown); a process point has t, pid, start_time (null when unknown),
// samples, used_bytes ({min, max, mean}), flags, and allocated_bytes and
// reserved_bytes ({min, max, mean}, null when the process was not on vram's
// allocator in that bucket).
//
// A process in a State carries the figures of vram's allocator inside it
// (libvram's statistics channel) with the keys of vram status --json:
// allocated_bytes and reserved_bytes, null when it does not run it, and an
// allocator object (absent then) with the rest (allocator.go).
//
// # Query parameters
//
// A time (from, to) is RFC 3339 ("2026-11-30T12:00:00Z"), Unix seconds with
// an optional fraction ("1796040000", "1796040000.5"), "now", or a negative
// duration relative to the time of the request ("-15m", "-1h30m", and "-7d"
// for days). The default range is the last hour (history) or the last 24 h
// (alerts, actions); a range needs from before to and may span at most
// MaxRange (31 days, a little more than the default aggregate retention).
//
// step is a Go duration ("10s", "1m") or seconds ("10", "0.5"), at least a
// millisecond (the store's resolution). Without step the API picks the
// smallest of a list of round steps (1s, 2s, 5s, 10s, 15s, 30s, 1m, ... 1d)
// that gives at most DefaultPoints (1,000) buckets. A step that would give
// more than MaxPoints (10,000) buckets is rejected with 400, naming the
// smallest step that fits, rather than silently coarsened: a client that
// asked for a resolution either gets it or learns why not. The range's start
// is aligned down to a multiple of the step (counted from the Unix epoch) so
// that the buckets of successive refreshes coincide; the response's from is
// the aligned start.
//
// A GPU is named by its UUID or its index (digits only; an index is resolved
// against the latest State); a pid is a decimal number above 0. Unknown and
// repeated parameters are errors, so that a typo ("form=-1h") is reported
// rather than ignored.
//
// # Errors
//
// Every error, including unknown /api paths (404) and wrong methods (405,
// with an Allow header), is a JSON document:
//
//	{"schema": "vram.serve/v3", "error": {"status": 400, "message": "from: \"yesterday\" is not ..."}}
//
// A message names the parameter or field and the bad value. Errors from the
// Backend map through errors.Is: ErrNotFound to 404, ErrConflict to 409,
// ErrInvalid to 400 (the backend's message is shown); a deadline to 503; any
// other error to 500 with a generic message, the error itself going to the
// log only. A panic in a handler is recovered, logged and answered with 500.
// /healthz answers in plain text (it is a probe).
//
// # Security
//
// The daemon binds to loopback unless told otherwise: CheckListen refuses a
// listen address reachable from other hosts (any non-loopback host, and an
// empty host, which means every interface) unless remote access was allowed
// explicitly.
//
// Reads need no credentials. The mutating endpoints are layered, each layer
// answering on its own:
//
//  1. Off unless Options.Mutations, and off whenever Options.ReadOnly: 403
//     with a message saying which setting refuses it. Enabled without a
//     token, they stay refused (403): the layer fails closed.
//  2. Cross-origin requests are refused (403): a browser's request whose
//     Sec-Fetch-Site is neither same-origin nor none, or whose Origin header
//     does not name the Host the request was sent to. The API sends no CORS
//     headers, so no other site's page can read from it either. Non-browser
//     clients send neither header and pass this layer.
//  3. An Authorization: Bearer token, compared with Options.Token in constant
//     time (both sides hashed first, so not even the length leaks); missing or
//     wrong gives 401 with WWW-Authenticate: Bearer. ReadTokenFile reads the
//     token from a file only its owner can read (no group or other permission
//     bits), at most 4 KiB, at least MinTokenLen visible ASCII characters,
//     trailing newline trimmed.
//  4. The body: Content-Type application/json (415 otherwise), at most
//     MaxBodyBytes (64 KiB, 413 otherwise), one JSON object with no unknown
//     fields, then the request's own rules (signal TERM or KILL, pid above 1
//     and not the daemon, start_time present). Only then is the Backend
//     called; it re-checks the process's identity before any signal.
//
// Every response carries X-Content-Type-Options: nosniff, a
// Content-Security-Policy of default-src 'self' (no inline script, nothing
// from another origin; frame-ancestors 'none' against framing),
// Referrer-Policy: no-referrer and Cross-Origin-Resource-Policy: same-origin;
// API, stream, probe and metrics responses carry Cache-Control: no-store.
// Options.AllowedHosts, when set, refuses requests whose Host header is not
// one of those names or an IP address: with the daemon on loopback this
// stops a DNS-rebinding page (a hostile name that resolves to 127.0.0.1)
// from reading the API.
//
// # Event stream
//
// GET /events is a server-sent event stream. It sends the latest State at
// once (when there is one), then the Backend's events as they come: "state"
// events (a State) at most one per Options.StatePeriod, the newest winning
// when they come faster; "alert" (an Alert) and "action" (an Action) events
// as they happen; and a ": ping" comment every Options.PingPeriod (15 s) so
// that proxies and clients see a live connection. Each event is flushed as
// it is written and each write has a deadline, so a stuck client cannot hold
// the handler. The stream ends, and its subscription is cancelled, when the
// client goes away, when the Backend closes the channel, or when
// Options.Done is closed: the daemon closes it on shutdown (for example from
// http.Server.RegisterOnShutdown), because http.Server.Shutdown waits for
// open streams and would otherwise wait for ever. At most
// Options.MaxStreams streams are open at a time (503 beyond).
//
// # What this package does not do
//
// TLS, and authentication of reads, are left to a reverse proxy or the
// network (the daemon is meant to listen on loopback or a node-local
// address scraped by Prometheus). Responses are not compressed. The server's
// own timeouts (reading headers, idle connections) belong to the
// http.Server: NewServer returns one with settings that suit this package
// (streams outlive its read and write timeouts).
package api
