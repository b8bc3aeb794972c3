package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/dashboard"
)

// The browser tests drive a real headless Chromium over the DevTools
// protocol. Without a Chromium they skip, unless VRAM_REQUIRE_BROWSER=1 (CI),
// where they fail.

const testToken = "s3cret-token-for-the-test"

// chromium returns the path of a Chromium or Chrome binary, or "".
func chromium() string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium for the test and returns a context
// whose actions run in one tab, closed after limit at the latest. required
// makes a missing browser a failure rather than a skip.
func newBrowser(t testing.TB, required bool, limit time.Duration) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		const msg = "no Chromium found (looked for /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH); " +
			"install it with apt-get install -y chromium"
		if required || os.Getenv("VRAM_REQUIRE_BROWSER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + " to run the browser test")
	}
	dir, err := os.MkdirTemp("", "vram-dashboard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1600, 1000),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// Chromium's children can write into the directory for a moment
		// after the browser has gone.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	// Start the browser with no deadline (its life is the context's), then
	// bound the whole test with a watchdog.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	watchdog := time.AfterFunc(limit, cancel)
	t.Cleanup(func() { watchdog.Stop() })
	return ctx
}

// pageLog collects what the page said and asked for.
type pageLog struct {
	mu       sync.Mutex
	problems []string // console errors, exceptions, error entries of the browser log
	requests []string // every URL the page requested
}

func (l *pageLog) listen(ev any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range ev.Args {
				parts = append(parts, a.Description+string(a.Value))
			}
			l.problems = append(l.problems, "console."+string(ev.Type)+": "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		l.problems = append(l.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *log.EventEntryAdded:
		if e := ev.Entry; e.Level == log.EntryLevelError {
			l.problems = append(l.problems, fmt.Sprintf("log (%s) %s: %s", e.Source, e.URL, e.Text))
		}
	case *network.EventRequestWillBeSent:
		l.requests = append(l.requests, ev.Request.URL)
	}
}

func (l *pageLog) snapshot() (problems, requests []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.problems), slices.Clone(l.requests)
}

// run runs browser actions, failing the test on error.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate until it is true, for at most 10 s.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Run(tctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// eventually polls a Go predicate until it is true, for at most 10 s.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// What the page shows, read back from its DOM.
type shownCard struct {
	UUID, Index, Name, Health, Error string
	Used, Reserved, Free, Total      string
	Unattr, Util, Procs              string
	LivePoints                       int
	UsedWidth, UnattrWidth, ResWidth float64
	HistoryButton                    bool
}

type shownRow struct {
	Key, GPU, PID, User, Command, Title, Used, Growth, Workload string
	GrowthLeak, GrowthCalm                                      bool
	Flags                                                       []string // "flag:colour"
	Spark, Buttons                                              int
	NoSignal                                                    string // the reason shown instead of the buttons
}

const readCards = `Array.from(document.querySelectorAll('#gpus .card')).map(c => {
  const q = s => c.querySelector(s);
  const w = s => parseFloat(q(s).style.width) || 0;
  return {UUID: c.dataset.uuid, Index: q('.gpu-index').textContent, Name: q('.gpu-name').textContent,
    Health: q('.health').textContent, Error: q('.health-error').hidden ? '' : q('.health-error').textContent,
    Used: q('.mem-used').textContent, Reserved: q('.mem-reserved').textContent, Free: q('.mem-free').textContent,
    Total: q('.mem-total').textContent, Unattr: q('.mem-unattr').textContent, Util: q('.util').textContent,
    Procs: q('.nprocs').textContent, LivePoints: +(q('svg.live') || {dataset: {}}).dataset.points || 0,
    UsedWidth: w('.seg.used'), UnattrWidth: w('.seg.unattr'), ResWidth: w('.seg.reserved'),
    HistoryButton: !!q('.hist-btn')};
})`

const readRows = `Array.from(document.querySelectorAll('#procs tbody tr')).map(tr => {
  const q = s => tr.querySelector(s);
  return {Key: tr.dataset.key, GPU: q('.c-gpu').textContent, PID: q('.c-pid').textContent,
    User: q('.c-user').textContent, Command: q('.c-command').textContent, Title: q('.c-command').title,
    Used: q('.c-used').textContent, Growth: q('.c-growth').textContent, GrowthLeak: q('.c-growth').classList.contains('leak'),
    GrowthCalm: q('.c-growth').classList.contains('calm'),
    Workload: q('.c-workload').textContent,
    Flags: Array.from(tr.querySelectorAll('.c-flags .badge')).map(b => b.dataset.flag + ':' +
      ['red', 'orange', 'grey'].filter(k => b.classList.contains(k)).join('')),
    Spark: +(q('svg.spark') || {dataset: {}}).dataset.points || 0,
    Buttons: tr.querySelectorAll('button[data-signal]').length,
    NoSignal: (q('.c-act .nosig') || {dataset: {}}).dataset.reason || ''};
})`

// apiState is the state as the API serves it (with the fields the API
// sets, such as whether each process can be signalled).
func apiState(t *testing.T, base string) api.State {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s api.State
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("decoding the API's state: %v", err)
	}
	return s
}

func checkCards(t *testing.T, got []shownCard, s api.State) {
	t.Helper()
	if len(got) != len(s.Devices) {
		t.Fatalf("page shows %d GPU cards, the state has %d devices", len(got), len(s.Devices))
	}
	for i, d := range s.Devices {
		c := got[i]
		nprocs := 0
		for _, p := range s.Processes {
			if p.GPU == d.UUID {
				nprocs++
			}
		}
		health, util := "healthy", strconv.Itoa(d.UtilPercent)+" %"
		if !d.Healthy {
			health = "unhealthy"
		}
		if d.UtilPercent < 0 {
			util = "n/a"
		}
		want := shownCard{
			UUID: d.UUID, Index: fmt.Sprintf("GPU %d", d.Index), Name: d.Name, Health: health, Error: d.Error,
			Used: units.FormatBytes(d.UsedBytes), Reserved: units.FormatBytes(d.ReservedBytes), Free: units.FormatBytes(d.FreeBytes),
			Total: units.FormatBytes(d.TotalBytes), Unattr: units.FormatBytes(d.UnattributedBytes), Util: util,
			Procs: strconv.Itoa(nprocs), LivePoints: c.LivePoints,
			UsedWidth: c.UsedWidth, UnattrWidth: c.UnattrWidth, ResWidth: c.ResWidth, HistoryButton: true,
		}
		if c != want {
			t.Errorf("GPU card %d:\n got %+v\nwant %+v", i, c, want)
		}
		// The bar's segments are the state's shares of the total.
		pct := func(b uint64) float64 { return 100 * float64(b) / float64(d.TotalBytes) }
		for _, seg := range []struct {
			name      string
			got, want float64
		}{
			{"used (attributed)", c.UsedWidth, pct(d.UsedBytes - d.UnattributedBytes)},
			{"unattributed", c.UnattrWidth, pct(d.UnattributedBytes)},
			{"reserved", c.ResWidth, pct(d.ReservedBytes)},
		} {
			if diff := seg.got - seg.want; diff > 0.01 || diff < -0.01 {
				t.Errorf("GPU %d: %s segment is %.3f%% wide, want %.3f%%", d.Index, seg.name, seg.got, seg.want)
			}
		}
	}
}

func checkRows(t *testing.T, got []shownRow, s api.State, mutations bool) {
	t.Helper()
	if len(got) != len(s.Processes) {
		t.Fatalf("page shows %d process rows, the state has %d processes", len(got), len(s.Processes))
	}
	colour := map[string]string{"leak": "red", "orphaned": "orange", "zombie": "orange", "no_such_process": "orange",
		"no-such-process": "orange", "jupyter": "grey", "idle": "grey"}
	for i, p := range s.Processes { // the state is largest first, and so is the page by default
		r := got[i]
		var flags []string
		if p.Leak != nil && p.Leak.Verdict == detect.VerdictLeak {
			flags = append(flags, "leak:red")
		}
		for _, f := range p.Flags {
			flags = append(flags, f+":"+colour[f])
		}
		cmd := p.Command
		if len([]rune(cmd)) > 60 {
			cmd = string([]rune(cmd)[:59]) + "…"
		}
		growth, leak, calm := "—", false, false
		if p.Leak != nil && p.Leak.Verdict != detect.VerdictInsufficient {
			g := p.Leak.Slope * 60 / mib
			growth = fmt.Sprintf("%+.1f MiB/min", g)
			if math.Abs(g) >= 100 {
				growth = fmt.Sprintf("%+.0f MiB/min", g)
			}
			leak = p.Leak.Verdict == detect.VerdictLeak
			calm = !leak
		}
		workload := p.Pod
		if p.Namespace != "" {
			workload = p.Namespace + "/" + p.Pod
		}
		buttons, noSignal := 0, ""
		switch {
		case mutations && p.Signalable:
			buttons = 2
		case mutations:
			noSignal = p.NotSignalableReason
		}
		want := shownRow{
			Key: r.Key, GPU: strconv.Itoa(p.GPUIndex), PID: strconv.FormatUint(uint64(p.PID), 10), User: p.User,
			Command: cmd, Title: p.Command, Used: units.FormatBytes(p.UsedBytes), Growth: growth, GrowthLeak: leak, GrowthCalm: calm,
			Workload: workload, Flags: flags, Spark: len(p.Recent), Buttons: buttons, NoSignal: noSignal,
		}
		if fmt.Sprint(r) != fmt.Sprint(want) {
			t.Errorf("process row %d:\n got %+v\nwant %+v", i, r, want)
		}
	}
}

func rowSelector(p api.Process) string {
	return fmt.Sprintf(`#procs tbody tr[data-key="%s|%d|%s"]`, p.GPU, p.PID, p.StartTime.Format(time.RFC3339Nano))
}

func findProc(t *testing.T, s api.State, pid uint32) api.Process {
	t.Helper()
	for _, p := range s.Processes {
		if p.PID == pid {
			return p
		}
	}
	t.Fatalf("no PID %d in the fake state", pid)
	return api.Process{}
}

// TestBrowser loads the dashboard in headless Chromium against the API over a
// fake backend and checks what it shows and what it asks for.
func TestBrowser(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	b := newFakeBackend(now)
	// Cleanups run last first: the servers close after the browser, whose
	// open event streams would otherwise hold Close up.
	srv := httptest.NewServer(api.Handler(b, api.Options{
		UI: dashboard.Handler(), Mutations: true, Token: []byte(testToken)}))
	t.Cleanup(srv.Close)
	readOnly := httptest.NewServer(api.Handler(b, api.Options{UI: dashboard.Handler()}))
	t.Cleanup(readOnly.Close)

	ctx := newBrowser(t, false, 90*time.Second)
	var pl pageLog
	if err := chromedp.Listen(ctx, pl.listen); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// 1. Load: GPU cards, the process table, the header, alerts, actions.
	run(t, ctx, "loading the page",
		chromedp.EmulateViewport(1600, 1000),
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#gpus .card")),
		chromedp.WaitVisible(chromedp.CSS("#procs tbody tr")))
	waitFor(t, ctx, "the live stream", `document.querySelector('#conn').dataset.state === 'live'`)
	s0 := apiState(t, srv.URL)
	checkCards(t, eval[[]shownCard](t, ctx, readCards), s0)
	checkRows(t, eval[[]shownRow](t, ctx, readRows), s0, true)
	header := eval[map[string]any](t, ctx, `({host: document.querySelector('#host').textContent,
		sim: !document.querySelector('#simulated').hidden, last: document.querySelector('#last-sample').textContent,
		alerts: Array.from(document.querySelectorAll('#alerts li')).map(li => li.textContent),
		actions: document.querySelectorAll('#actions tbody tr').length,
		signalColumn: !document.querySelector('#procs th.act-col').hidden})`)
	if header["host"] != "gpu-node-07" || header["sim"] != true {
		t.Errorf("header: host %v, SIMULATED badge shown %v; want gpu-node-07 and true", header["host"], header["sim"])
	}
	if last, _ := header["last"].(string); !strings.HasPrefix(last, "last sample ") {
		t.Errorf("header: last sample shows %q", last)
	}
	if al, _ := header["alerts"].([]any); len(al) != 1 || !strings.Contains(fmt.Sprint(al[0]), s0.Alerts[0].Message) {
		t.Errorf("alerts list %v, want the one firing alert %q", al, s0.Alerts[0].Message)
	}
	if n, _ := header["actions"].(float64); n != 2 {
		t.Errorf("actions table has %v rows, want the fake's 2 of the last 24 h", header["actions"])
	}
	if header["signalColumn"] != true {
		t.Errorf("mutations are on but the signal column is hidden")
	}

	// A process /proc does not show and a zombie cannot be signalled: the
	// API says so and why, and the page shows the reason, not the buttons
	// (checkRows).
	for _, pid := range []uint32{pidGone, pidZombie} {
		if p := findProc(t, s0, pid); p.Signalable || p.NotSignalableReason == "" {
			t.Errorf("the API shows PID %d as signalable %v, reason %q; want not, with a reason", pid, p.Signalable, p.NotSignalableReason)
		}
	}

	// Sizes read as units.FormatBytes writes them, the unit picked by size
	// (exact ties, such as 1.125 KiB, round to even as Go does).
	sizes := []uint64{0, 1, 1023, 1024, 1152, 1408, 1664, 1920, 1536, 10239, 3 * mib, 3*mib + 128<<10, mib - 1,
		5*gib + 3*gib/4, 71*gib + gib/4, h200Total, h200Reserved, 2 << 40, 1<<50 + 1<<47, 123456789012345}
	sizesJSON, _ := json.Marshal(sizes)
	shown := eval[[]string](t, ctx, `(`+string(sizesJSON)+`).map(window.vramDashboard.formatBytes)`)
	for i, b := range sizes {
		if i >= len(shown) || shown[i] != units.FormatBytes(b) {
			t.Errorf("the page writes %d bytes as %q, units.FormatBytes as %q", b, shown[min(i, len(shown)-1)], units.FormatBytes(b))
		}
	}

	// The actions panel fits its column at every width: no sideways
	// scrolling, no cell cut off (long results and reasons wrap).
	for _, width := range []int64{1600, 1000, 700} {
		run(t, ctx, "resizing the window", chromedp.EmulateViewport(width, 1000))
		fit := eval[map[string]float64](t, ctx, `(() => {
			const sec = document.querySelector('#actions-section'), wrap = sec.querySelector('.table-wrap');
			const right = sec.getBoundingClientRect().right;
			const cells = Array.from(sec.querySelectorAll('#actions tr > *'));
			return {scroll: wrap.scrollWidth, client: wrap.clientWidth, rows: sec.querySelectorAll('#actions tbody tr').length,
				outside: cells.filter(c => c.getBoundingClientRect().right > right + 0.5).length,
				cut: cells.filter(c => c.scrollWidth > c.clientWidth + 1).length};
		})()`)
		if fit["rows"] == 0 || fit["scroll"] > fit["client"] || fit["outside"] > 0 || fit["cut"] > 0 {
			t.Errorf("at %d px the actions panel scrolls %v px in %v, %v cells reach past it, %v cells are cut off (%v rows)",
				width, fit["scroll"], fit["client"], fit["outside"], fit["cut"], fit["rows"])
		}
	}
	run(t, ctx, "resizing the window back", chromedp.EmulateViewport(1600, 1000))

	// The leak and orphan badges, by colour.
	leakRow := rowSelector(findProc(t, s0, pidLeak))
	orphanRow := rowSelector(findProc(t, s0, pidOrphan))
	badges := eval[[]string](t, ctx, fmt.Sprintf(`[%q, %q].map(s =>
		Array.from(document.querySelectorAll(s + ' .badge')).map(b => b.textContent + '=' + getComputedStyle(b).color).join())`,
		leakRow, orphanRow))
	if !strings.HasPrefix(badges[0], "leak=rgb(185, 28, 28)") || !strings.HasPrefix(badges[1], "orphaned=rgb(194, 65, 12)") {
		t.Errorf("badges: leaking process %q, orphan %q; want a red leak badge and an orange orphaned one", badges[0], badges[1])
	}
	if g := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(leakRow+" .c-growth")+`).textContent`); g != shownSlope {
		t.Errorf("leaking process's growth shows %q, want %q", g, shownSlope)
	}

	// Sorting and the filter.
	pids := func() string {
		return eval[string](t, ctx, `Array.from(document.querySelectorAll('#procs tbody .c-pid')).map(c => c.textContent).join()`)
	}
	run(t, ctx, "sorting by PID", chromedp.Click(chromedp.CSS(`#procs th[data-key="pid"]`)))
	if got, want := pids(), "4242,5120,6001,7331,8123,9001,9100"; got != want {
		t.Errorf("sorted by PID: %s, want %s", got, want)
	}
	run(t, ctx, "sorting by PID, descending", chromedp.Click(chromedp.CSS(`#procs th[data-key="pid"]`)))
	if got, want := pids(), "9100,9001,8123,7331,6001,5120,4242"; got != want {
		t.Errorf("sorted by PID, descending: %s, want %s", got, want)
	}
	run(t, ctx, "sorting by memory", chromedp.Click(chromedp.CSS(`#procs th[data-key="used"]`)))
	run(t, ctx, "filtering", chromedp.SendKeys(chromedp.CSS("#filter"), "orphan"))
	if got := pids(); got != "8123" {
		t.Errorf("filter 'orphan' leaves %s, want 8123", got)
	}
	eval[chromedp.Void](t, ctx, `(f => { f.value = ''; f.dispatchEvent(new Event('input')); })(document.querySelector('#filter'))`)
	checkRows(t, eval[[]shownRow](t, ctx, readRows), s0, true)

	// The history panel has loaded the first GPU; wait for it before the
	// screenshot.
	waitFor(t, ctx, "the first GPU's history", `+(document.querySelector('#hist-chart svg') || {dataset: {}}).dataset.points > 0`)
	if os.Getenv("VRAM_SHOT_UPDATE") == "1" {
		png, err := chromedp.Run(ctx, pagePicture())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		out := filepath.Join("..", "..", "docs", "img", "dashboard-sim.png")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", out, len(png))
	}

	// VRAM_SHOT_STEPS=DIR keeps a picture of the page after each step, to
	// look at while working on the page.
	shot := func(name string) {
		dir := os.Getenv("VRAM_SHOT_STEPS")
		if dir == "" {
			return
		}
		png, err := chromedp.Run(ctx, pagePicture())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
		}
		if err != nil {
			t.Errorf("step picture %s: %v", name, err)
		}
	}
	shot("1-loaded")

	// 2. A new state over the stream: the page follows it.
	livePoints := eval[int](t, ctx, `+document.querySelector('#gpus .card svg.live').dataset.points`)
	b.push(b.build(now.Add(2*time.Second), true))
	s1 := apiState(t, srv.URL)
	waitFor(t, ctx, "the pushed state", fmt.Sprintf(`document.querySelector('#gpus .card .mem-used').textContent === %q &&
		document.querySelectorAll('#procs tbody tr').length === %d`, units.FormatBytes(s1.Devices[0].UsedBytes), len(s1.Processes)))
	checkCards(t, eval[[]shownCard](t, ctx, readCards), s1)
	checkRows(t, eval[[]shownRow](t, ctx, readRows), s1, true)
	if got := eval[int](t, ctx, `+document.querySelector('#gpus .card svg.live').dataset.points`); got != livePoints+1 {
		t.Errorf("GPU 0's live chart has %d points after one more state, had %d", got, livePoints)
	}

	shot("2-pushed")
	// An alert resolved on the stream leaves the list.
	b.mu.Lock()
	resolved := s1.Alerts[0]
	resolved.State = "resolved"
	b.sendLocked(api.Event{Kind: "alert", Alert: &resolved})
	b.mu.Unlock()
	waitFor(t, ctx, "the resolved alert to leave the list", `document.querySelectorAll('#alerts li').length === 0`)

	// 3. History: open GPU 1's, then zoom by dragging across the chart.
	run(t, ctx, "opening GPU 1's history", chromedp.Click(chromedp.CSS(`.card[data-uuid="`+gpu1+`"] .hist-btn`)))
	waitFor(t, ctx, "GPU 1's history", fmt.Sprintf(`document.querySelector('#hist-gpu').value === %q &&
		+document.querySelector('#hist-chart svg').dataset.points > 0 && /GPU 1/.test(document.querySelector('#hist-status').textContent)`, gpu1))
	if n := eval[int](t, ctx, `document.querySelectorAll('#hist-chart .alloc-band, #hist-chart .alloc-legend').length +
		+document.querySelector('#hist-chart svg').dataset.allocPoints`); n != 0 {
		t.Errorf("GPU 1's chart has %d allocator marks; a device's reserved memory is the driver's, not an allocator's", n)
	}
	lastDev := func() histQuery {
		dev, _, _ := b.queries()
		for i := len(dev) - 1; i >= 0; i-- {
			if dev[i].GPU == gpu1 {
				return dev[i]
			}
		}
		return histQuery{}
	}
	wide := lastDev()
	if span := wide.Q.To.Sub(wide.Q.From); span < 59*time.Minute || span > 61*time.Minute || wide.Q.Step != 9*time.Second {
		t.Errorf("GPU 1's history asked for %v at step %v, want the last hour at 9s", span, wide.Q.Step)
	}
	pointsBefore := eval[int](t, ctx, `+document.querySelector('#hist-chart svg').dataset.points`)
	box := eval[map[string]float64](t, ctx, `(r => ({x: r.left, y: r.top, w: r.width, h: r.height}))(
		document.querySelector('#hist-chart svg').getBoundingClientRect())`)
	plotL, plotW := box["x"]+64, box["w"]-64-16
	y := box["y"] + box["h"]/2
	x0, x1 := plotL+0.40*plotW, plotL+0.60*plotW
	run(t, ctx, "dragging across the history chart",
		chromedp.MouseEvent(chromedp.MouseMoved, x0, y),
		chromedp.MouseEvent(chromedp.MousePressed, x0, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, (x0+x1)/2, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x1, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x1, y, chromedp.ButtonLeft))
	eventually(t, "a finer history request after the zoom", func() bool {
		q := lastDev().Q
		return q.To.Sub(q.From) < 20*time.Minute && q.Step > 0 && q.Step < wide.Q.Step
	})
	zoomed := lastDev().Q
	if span := zoomed.To.Sub(zoomed.From); span < 10*time.Minute || span > 14*time.Minute ||
		zoomed.From.Before(wide.Q.From) || zoomed.To.After(wide.Q.To.Add(time.Second)) {
		t.Errorf("zoom to the middle fifth of the hour asked for %v .. %v (%v), want about 12 min inside %v .. %v",
			zoomed.From, zoomed.To, span, wide.Q.From, wide.Q.To)
	}
	waitFor(t, ctx, "the zoomed chart", `!document.querySelector('#reset-zoom').disabled &&
		!/Loading/.test(document.querySelector('#hist-status').textContent) &&
		+document.querySelector('#hist-chart svg').dataset.points > 0`)
	shot("3-zoomed")
	t.Logf("history: %d points over the hour at %v, zoomed to %v at %v",
		pointsBefore, wide.Q.Step, zoomed.To.Sub(zoomed.From), zoomed.Step)
	run(t, ctx, "resetting the zoom", chromedp.Click(chromedp.CSS("#reset-zoom")))
	waitFor(t, ctx, "the reset zoom", `document.querySelector('#reset-zoom').disabled`)

	// A process's history, from its row.
	run(t, ctx, "opening the leaking process's history", chromedp.Click(chromedp.CSS(leakRow+" .pid-link")))
	waitFor(t, ctx, "the process history", fmt.Sprintf(`document.querySelector('#hist-proc').value.startsWith('%d|') &&
		+document.querySelector('#hist-chart svg').dataset.points > 0 && /PID %d/.test(document.querySelector('#hist-status').textContent)`,
		pidLeak, pidLeak))
	if _, proc, _ := b.queries(); len(proc) == 0 || proc[len(proc)-1].PID != pidLeak || proc[len(proc)-1].GPU != gpu1 {
		t.Errorf("process history requests %+v, want one for PID %d on %s", proc, pidLeak, gpu1)
	}
	// The process runs vram's allocator: its chart has the allocated to
	// reserved band, under the used memory's, on every point.
	band := eval[map[string]float64](t, ctx, `(() => {
		const s = document.querySelector('#hist-chart svg'), b = s.querySelector('polygon.alloc-band'), u = s.querySelector('polygon.band');
		const top = el => Math.min(...el.getAttribute('points').split(' ').map(p => +p.split(',')[1]));
		return {points: +s.dataset.points, alloc: +s.dataset.allocPoints, bands: s.querySelectorAll('polygon.alloc-band').length,
			lines: s.querySelectorAll('polyline.alloc-line').length, bandTop: b ? top(b) : -1, usedTop: u ? top(u) : -1,
			legend: s.querySelector('.alloc-legend') ? 1 : 0};
	})()`)
	if band["alloc"] != band["points"] || band["bands"] < 1 || band["lines"] != band["bands"] || band["legend"] != 1 || band["bandTop"] <= band["usedTop"] {
		t.Errorf("the process chart's allocator band: %v; want figures on every point, a band and a line per run, "+
			"a legend, and the band's top (reserved) under the used memory's", band)
	}

	shot("3-process-history")
	// 4. Signal the orphan: a wrong token shows the API's error, the right
	// one sends the process's identity.
	orphan := findProc(t, s1, pidOrphan)
	run(t, ctx, "opening the terminate dialog",
		chromedp.Click(chromedp.CSS(orphanRow+` button[data-signal="TERM"]`)),
		chromedp.WaitVisible(chromedp.CSS("#signal-dialog")))
	dlg := eval[map[string]string](t, ctx, `({pid: document.querySelector('#sig-pid').textContent,
		command: document.querySelector('#sig-command').textContent, memory: document.querySelector('#sig-memory').textContent})`)
	if want := (map[string]string{"pid": "8123", "command": orphan.Command, "memory": units.FormatBytes(orphan.UsedBytes) + " on GPU 1"}); fmt.Sprint(dlg) != fmt.Sprint(want) {
		t.Errorf("confirm dialog shows %v, want %v", dlg, want)
	}
	run(t, ctx, "sending with a wrong token",
		chromedp.SetValue(chromedp.CSS("#sig-token"), "wrong"),
		chromedp.Click(chromedp.CSS("#sig-confirm")))
	waitFor(t, ctx, "the API's error", `!document.querySelector('#sig-error').hidden`)
	shot("4-signal-error")
	shownErr := eval[string](t, ctx, `document.querySelector('#sig-error').textContent`)
	if want := apiErrorFor(t, srv.URL, "wrong", orphan); shownErr != want {
		t.Errorf("dialog shows error %q, want the API's message %q", shownErr, want)
	}
	run(t, ctx, "sending with the token",
		chromedp.SetValue(chromedp.CSS("#sig-token"), testToken),
		chromedp.Click(chromedp.CSS("#sig-confirm")))
	waitFor(t, ctx, "the dialog to close", `!document.querySelector('#signal-dialog').open`)
	_, _, sigs := b.queries()
	if len(sigs) == 0 {
		t.Fatal("the backend got no signal request")
	}
	if got := sigs[len(sigs)-1]; got.PID != pidOrphan || !got.StartTime.Equal(orphan.StartTime) || got.Signal != "TERM" || got.Reason == "" {
		t.Errorf("signal request %+v, want PID %d started %v, TERM, with a reason", got, pidOrphan, orphan.StartTime)
	}
	waitFor(t, ctx, "the action in the list", `document.querySelectorAll('#actions tbody tr').length === 3`)
	if tok := eval[string](t, ctx, `sessionStorage.getItem('vram.token')`); tok != testToken {
		t.Errorf("token kept in sessionStorage is %q", tok)
	}

	// 5. The stream drops: the page says so and comes back.
	srv.CloseClientConnections()
	waitFor(t, ctx, "the page to notice the dropped stream", `document.querySelector('#conn').dataset.state === 'reconnecting'`)
	waitFor(t, ctx, "the page to reconnect", `document.querySelector('#conn').dataset.state === 'live'`)

	// 6. Partial or malformed states never throw. The page is read in the
	// same task as the states are applied, before any answer of the
	// reconnection can replace them.
	sparse := eval[[]shownCard](t, ctx, `(() => { const f = window.vramDashboard.applyState;
		f(null); f({}); f({devices: 'x', processes: {}, alerts: 7});
		f({hostname: 5, time: 'garbage', devices: [{gpu_uuid: 'GPU-sparse'}, null, 7],
		   processes: [{pid: 7}, {}, null, {pid: 8, leak: {}, flags: null, recent: [1, 'x', null]}],
		   alerts: [{}], warnings: ['partial state']});
		return `+readCards+`; })()`)
	if len(sparse) != 3 || sparse[0].UUID != "GPU-sparse" || sparse[0].Util != "n/a" || sparse[0].Used != "0 B" {
		t.Errorf("a sparse state shows cards %+v", sparse)
	}

	// A long process list shows its first 200 rows until asked for all
	// (again applied and read in one task).
	big, err := json.Marshal(bigState(now, 2, 150, 0))
	if err != nil {
		t.Fatal(err)
	}
	capped := eval[[]any](t, ctx, `(() => { window.vramDashboard.applyState(`+string(big)+`);
		const rows = () => document.querySelectorAll('#procs tbody tr').length, more = document.querySelector('#procs-more');
		const out = [rows(), more.hidden, more.textContent];
		more.click();
		out.push(rows(), more.textContent);
		return out; })()`)
	if want := []any{200.0, false, "Show all 300 (200 shown)", 300.0, "Show the first 200 only"}; fmt.Sprint(capped) != fmt.Sprint(want) {
		t.Errorf("300 processes: rows, button hidden, its text, rows after a click, its text = %v, want %v", capped, want)
	}

	// 7. A daemon without mutations: no buttons.
	run(t, ctx, "loading the read-only page",
		chromedp.Navigate(readOnly.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#procs tbody tr")))
	checkRows(t, eval[[]shownRow](t, ctx, readRows), apiState(t, readOnly.URL), false)
	if eval[bool](t, ctx, `!document.querySelector('#procs th.act-col').hidden`) {
		t.Error("mutations are off but the signal column is shown")
	}

	// Nothing went wrong in the page, and nothing left the origin.
	problems, requests := pl.snapshot()
	sigURL, eventsURL := srv.URL+"/api/v1/signal", srv.URL+"/events"
	for _, p := range problems {
		// The 401 of the wrong token is logged by the browser as a failed
		// load, and so is the event stream the test cut.
		if strings.Contains(p, sigURL) && strings.Contains(p, "401") ||
			strings.Contains(p, eventsURL) && strings.Contains(p, "net::ERR_") {
			continue
		}
		t.Errorf("page: %s", p)
	}
	origins := map[string]bool{origin(srv.URL): true, origin(readOnly.URL): true}
	for _, u := range requests {
		if !origins[origin(u)] {
			t.Errorf("the page requested %s, outside its origin", u)
		}
	}
	if len(requests) < 8 {
		t.Errorf("only %d requests seen: %v", len(requests), requests)
	}
	t.Logf("browser part took %v, %d requests", time.Since(start).Round(time.Millisecond), len(requests))
}

// pagePicture is a PNG of the whole page, scrolled to the top first so that
// the sticky header is where it belongs, with no focus ring.
func pagePicture() chromedp.Action[[]byte] {
	return func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		if _, err := chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)`)(ctx, t); err != nil {
			return nil, err
		}
		return chromedp.FullScreenshot(100)(ctx, t)
	}
}

func origin(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "unparsable " + u
	}
	return p.Scheme + "://" + p.Host
}

// apiErrorFor asks the API directly what it says to a signal request with
// this token.
func apiErrorFor(t *testing.T, base, token string, p api.Process) string {
	t.Helper()
	body, _ := json.Marshal(api.SignalRequest{PID: p.PID, StartTime: p.StartTime, Signal: "TERM", Reason: "test"})
	req, _ := http.NewRequest("POST", base+"/api/v1/signal", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Message == "" {
		t.Fatalf("the API's answer to a wrong token (status %d) has no error message: %v", resp.StatusCode, err)
	}
	return e.Error.Message
}

// TestScreenshot writes a PNG of a running dashboard: VRAM_SHOT_URL is the
// page, VRAM_SHOT_OUT the file (default dashboard.png), VRAM_SHOT_WAIT extra
// seconds to wait once data is shown (for the live charts to fill).
//
//	VRAM_SHOT_URL=http://127.0.0.1:9400/ VRAM_SHOT_OUT=/tmp/h200.png VRAM_SHOT_WAIT=30 \
//	    go test -run TestScreenshot ./serve/dashboard/
func TestScreenshot(t *testing.T) {
	target := os.Getenv("VRAM_SHOT_URL")
	if target == "" {
		t.Skip("set VRAM_SHOT_URL to take a screenshot of a running dashboard")
	}
	out := os.Getenv("VRAM_SHOT_OUT")
	if out == "" {
		out = "dashboard.png"
	}
	var wait time.Duration
	if s := os.Getenv("VRAM_SHOT_WAIT"); s != "" {
		sec, err := strconv.ParseFloat(s, 64)
		if err != nil || sec < 0 || sec > 3600 {
			t.Fatalf("VRAM_SHOT_WAIT=%q: want seconds between 0 and 3600", s)
		}
		wait = time.Duration(sec * float64(time.Second))
	}
	ctx := newBrowser(t, true, wait+2*time.Minute)
	run(t, ctx, "loading "+target,
		chromedp.EmulateViewport(1600, 1000),
		chromedp.Navigate(target))
	waitFor(t, ctx, "the first sample", `+document.body.dataset.samples > 0`)
	waitFor(t, ctx, "the history chart", `document.querySelector('#hist-chart svg') !== null &&
		!/Loading/.test(document.querySelector('#hist-status').textContent)`)
	if wait > 0 {
		tctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
		defer cancel()
		if err := chromedp.Do(tctx, chromedp.Sleep(wait)); err != nil {
			t.Fatal(err)
		}
	}
	png, err := chromedp.Run(ctx, pagePicture())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}

// bigState is a node of gpus GPUs with perGPU processes each; i varies the
// figures so that successive states change every row.
func bigState(now time.Time, gpus, perGPU, i int) api.State {
	s := api.State{Schema: api.Schema, Time: now.Add(time.Duration(i) * time.Second), Hostname: "big-node",
		Mutations: true, Alerts: []api.Alert{}}
	for g := range gpus {
		uuid := fmt.Sprintf("GPU-%08d-0000-4000-8000-000000000000", g)
		var used uint64
		for k := range perGPU {
			b := uint64(100+k+i%7) * mib
			used += b
			flags := []string{}
			if k%17 == 0 {
				flags = append(flags, "orphaned")
			}
			p := api.Process{
				GPU: uuid, GPUIndex: g, PID: uint32(1000 + g*perGPU + k), StartTime: now.Add(-time.Hour),
				User: "user" + strconv.Itoa(k%9), Command: fmt.Sprintf("python job_%d.py --rank %d --config /etc/jobs/%d.yaml", k, g, k),
				UsedBytes: b, MemoryKnown: true, Flags: flags, Recent: ramp(b, 60, float64(k%5)*mib), RecentStep: 1,
			}
			if k%23 == 0 {
				p.Leak = &api.Leak{Verdict: "leak", Slope: float64(k) * 1000, Confidence: 0.9, Reason: "grows"}
			}
			s.Processes = append(s.Processes, p)
		}
		s.Devices = append(s.Devices, api.Device{
			Index: g, UUID: uuid, Name: "NVIDIA H200", Healthy: true, TotalBytes: h200Total, UsedBytes: used,
			FreeBytes: h200Total - used - h200Reserved, ReservedBytes: h200Reserved, ReservedKnown: true,
			UtilPercent: 50, Recent: ramp(used, 120, mib), RecentStep: 1,
		})
	}
	sortBySize(s.Processes)
	return s
}

// BenchmarkRender measures the page's redraw of one state of 8 GPUs × 200
// processes in Chromium: applying the state and the style and layout it
// causes (painting is not counted). The time is measured in the page
// (performance.now) and reported as ms/state; ns/op adds the DevTools round
// trip.
//
//	go test -run XXX -bench Render -benchtime 50x ./serve/dashboard/
func BenchmarkRender(b *testing.B) {
	now := time.Now().UTC().Truncate(time.Second)
	fb := newFakeBackend(now)
	fb.state = bigState(now, 8, 200, 0)
	srv := httptest.NewServer(api.Handler(fb, api.Options{UI: dashboard.Handler()}))
	b.Cleanup(srv.Close)
	ctx := newBrowser(b, false, 5*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1600, 1000), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#procs tbody tr"))); err != nil {
		b.Fatal(err)
	}
	var states []string
	for i := range 2 {
		j, err := json.Marshal(bigState(now, 8, 200, i+1))
		if err != nil {
			b.Fatal(err)
		}
		states = append(states, string(j))
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.__bench = [`+states[0]+`, `+states[1]+`]`)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		showAll bool
		rows    int
	}{{"first-200", false, 200}, {"all-1600", true, 1600}} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
				const more = document.querySelector('#procs-more');
				if (/Show all/.test(more.textContent) === %t) more.click();
				return true; })()`, bc.showAll))); err != nil {
				b.Fatal(err)
			}
			var total float64
			b.ResetTimer()
			for i := range b.N {
				ms, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(`(() => {
					const t0 = performance.now();
					window.vramDashboard.applyState(window.__bench[%d]);
					void document.body.offsetHeight; // style and layout
					return performance.now() - t0; })()`, i%2)))
				if err != nil {
					b.Fatal(err)
				}
				total += ms
			}
			b.ReportMetric(total/float64(b.N), "ms/state")
			rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#procs tbody tr').length`))
			if err != nil || rows != bc.rows {
				b.Fatalf("the page shows %d rows (%v), want %d", rows, err, bc.rows)
			}
		})
	}
}
