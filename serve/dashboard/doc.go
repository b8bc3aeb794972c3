// Package dashboard is the node daemon's web page: a live view of the GPUs and
// the processes holding their memory, with history, alerts and the policy
// audit trail. Handler serves it; the daemon mounts it at "/" beside the JSON
// API (package serve/api), which is where every figure on the page comes from.
//
// # What the page shows
//
//   - A header with the host name, a SIMULATED badge when the daemon samples
//     gpu.Sim instead of real devices, the state of the live connection (live,
//     reconnecting in N s) and the time of the last sample (amber when it is
//     more than 15 s old).
//   - One card per GPU: a memory bar split into memory attributed to
//     processes, unattributed memory (used by no process NVML lists: other
//     containers, the driver, a leak outside any process), reserved and free,
//     with the figures written as units.FormatBytes writes them; health (an unhealthy device shows its error);
//     utilization; and a line chart of used memory over the last ten minutes.
//     That chart is kept in the browser from the live stream, seeded from the
//     device's recent samples, and is lost on reload (the history panel is
//     the durable view).
//   - The process table, largest first, sortable by any column and filtered
//     by a search box: GPU, PID, user, command (truncated, whole in its
//     tooltip), memory, a sparkline of the process's recent samples, growth
//     (the leak detector's slope in MiB/min), flags as badges (leak red;
//     orphaned, zombie, no such process orange; jupyter, idle grey) and the
//     Kubernetes namespace/pod where known. Rows are kept per process and
//     only their changed cells are written at each state; the table shows
//     the first 200 rows of the chosen order until asked for all, because
//     laying out thousands of rows every second costs the browser far more
//     than they tell (BenchmarkRender, docs/dashboard.md).
//   - History: a GPU, or one process on it, over 15 min to 7 days. The chart
//     draws the min–max band and the mean of each bucket, so a short peak
//     stays visible at a coarse step. Dragging across the chart zooms into
//     that range, fetched again at a finer step; "Reset zoom" returns to the
//     chosen range.
//   - Alerts firing now and the policy actions of the last 24 hours.
//   - When the daemon has its mutating endpoints on (State.Mutations), a
//     terminate and a kill button per process that can be signalled
//     (Process.Signalable; the others show why not, from
//     not_signalable_reason). Each opens a confirmation that
//     names the PID, command and memory and asks for the bearer token; the
//     token is kept in the tab's sessionStorage (gone when the tab closes).
//     The request names the process by PID and start time, so the daemon
//     refuses it if the PID was reused meanwhile; an error the API returns is
//     shown as it is. Without mutations there are no buttons.
//
// # How it gets its data
//
// On load the page reads GET api/v1/state and GET api/v1/actions?from=-24h,
// then opens GET events (server-sent events). Each "state" event carries a
// whole State and redraws the page; "alert" and "action" events update those
// lists between states. When the stream drops, the page closes it and opens a
// new one after 1 s, 2 s, 4 s … up to 30 s (with jitter, reset on success),
// and reads the state and actions again once it is back. History is read on
// demand from api/v1/history/devices/{uuid} and
// api/v1/history/processes/{uuid}/{pid} with an explicit step of about 1/400
// of the range. All URLs are relative, so the page also works behind a path
// prefix.
//
// Every JSON field is read through accessors that default missing or mistyped
// values, so an older or newer daemon, or a partial state, shows "n/a" rather
// than breaking the page.
//
// # Files
//
// static/index.html, static/app.js and static/style.css are hand-written, with
// no framework and no build step; they are embedded in the binary with
// go:embed. The page loads nothing from anywhere but its own origin (no CDN,
// no web fonts) and has no inline script or style, so it runs under the
// Content-Security-Policy "default-src 'self'" that the API sets; when the
// caller has set none, Handler sets CSP, the same and a little stricter (no
// base URL, no framing, no form submission: the one form is sent by
// app.js). Charts are SVG drawn by app.js.
//
// Handler serves the files from a table built once at start: index.html at
// "/", the others by name, each with its content type, a strong ETag (a hash
// of the content) and "Cache-Control: no-cache", so browsers revalidate and
// get 304 until the binary changes. Any other path is 404; there is no
// directory listing.
//
// # Tests
//
// The handler's answers are checked directly. The page itself is tested in a
// real headless Chromium driven over the DevTools protocol
// (github.com/chromedp/chromedp), against the real HTTP layer with a fake
// backend: see dashboard_test.go and docs/dashboard.md. The browser test
// skips when no Chromium is installed, unless VRAM_REQUIRE_BROWSER=1 (as in
// CI), where it fails instead.
package dashboard
