package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/dashboard"
)

// recordedBackend answers with what a real daemon answered at one moment:
// the files scripts/gpu/serve.sh captures (PREFIX-state.json,
// PREFIX-history.json, PREFIX-alerts.json, PREFIX-actions.json). Every time
// is shifted by the capture's age, so that the page's relative clocks ("4 s
// ago", the last ten minutes) read as they did at the capture.
type recordedBackend struct {
	state   api.State
	history struct {
		GPU    string            `json:"gpu_uuid"`
		Points []api.DevicePoint `json:"points"`
	}
	alerts  struct{ Alerts []api.Alert }
	actions struct{ Actions []api.Action }
}

func loadRecorded(t *testing.T, prefix string, now time.Time) *recordedBackend {
	t.Helper()
	b := &recordedBackend{}
	for suffix, v := range map[string]any{"-state.json": &b.state, "-history.json": &b.history,
		"-alerts.json": &b.alerts, "-actions.json": &b.actions} {
		data, err := os.ReadFile(prefix + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s%s: %v", prefix, suffix, err)
		}
	}
	if b.state.Schema == "vram.serve/v1" || b.state.Schema == "vram.serve/v2" {
		upgradeIdentity(t, prefix, b)
	}
	if b.state.Schema == "vram.serve/v1" {
		// Captured before history points took the state's key names.
		var v1 struct {
			Points []struct {
				Time                 time.Time `json:"t"`
				Samples              int
				Used, Reserved, Free api.Range
				Total                uint64
				Util                 *api.Range
			}
		}
		data, err := os.ReadFile(prefix + "-history.json")
		if err == nil {
			err = json.Unmarshal(data, &v1)
		}
		if err != nil {
			t.Fatalf("%s-history.json: %v", prefix, err)
		}
		b.history.Points = nil
		for _, p := range v1.Points {
			b.history.Points = append(b.history.Points, api.DevicePoint{Time: p.Time, Samples: p.Samples,
				Used: p.Used, Reserved: p.Reserved, Free: p.Free, Total: p.Total, Util: p.Util})
		}
	}
	shift := now.Sub(b.state.Time)
	b.state.Time = b.state.Time.Add(shift)
	for i := range b.state.Processes {
		if !b.state.Processes[i].StartTime.IsZero() {
			b.state.Processes[i].StartTime = b.state.Processes[i].StartTime.Add(shift)
		}
	}
	for _, as := range [][]api.Alert{b.state.Alerts, b.alerts.Alerts} {
		for i := range as {
			as[i].Time = as[i].Time.Add(shift)
		}
	}
	for i := range b.actions.Actions {
		b.actions.Actions[i].Time = b.actions.Actions[i].Time.Add(shift)
	}
	for i := range b.history.Points {
		b.history.Points[i].Time = b.history.Points[i].Time.Add(shift)
	}
	return b
}

// upgradeIdentity reads the names captures before vram.serve/v3 gave a
// GPU: a device's index and uuid, a process's and an alert's gpu (its
// UUID), the history's gpu; and the leak verdicts no_leak and unknown.
func upgradeIdentity(t *testing.T, prefix string, b *recordedBackend) {
	t.Helper()
	var old struct {
		Devices []struct {
			Index int
			UUID  string
		}
		Processes []struct{ GPU string }
		Alerts    []struct{ GPU string }
	}
	var oldHist, oldAlerts struct {
		GPU    string
		Alerts []struct{ GPU string }
	}
	for suffix, v := range map[string]any{"-state.json": &old, "-history.json": &oldHist, "-alerts.json": &oldAlerts} {
		data, err := os.ReadFile(prefix + suffix)
		if err == nil {
			err = json.Unmarshal(data, v)
		}
		if err != nil {
			t.Fatalf("%s%s: %v", prefix, suffix, err)
		}
	}
	s := &b.state
	for i := range min(len(s.Devices), len(old.Devices)) {
		s.Devices[i].Index, s.Devices[i].UUID = old.Devices[i].Index, old.Devices[i].UUID
	}
	for i := range min(len(s.Processes), len(old.Processes)) {
		p := &s.Processes[i]
		p.GPU = old.Processes[i].GPU
		if l := p.Leak; l != nil {
			switch l.Verdict {
			case "no_leak":
				l.Verdict = detect.VerdictNoLeak
			case "unknown":
				l.Verdict = detect.VerdictInsufficient
			}
		}
	}
	for i := range min(len(s.Alerts), len(old.Alerts)) {
		s.Alerts[i].GPU = old.Alerts[i].GPU
	}
	for i := range min(len(b.alerts.Alerts), len(oldAlerts.Alerts)) {
		b.alerts.Alerts[i].GPU = oldAlerts.Alerts[i].GPU
	}
	b.history.GPU = oldHist.GPU
}

func (b *recordedBackend) State() (api.State, bool) { return b.state, true }

func (b *recordedBackend) Subscribe() (<-chan api.Event, func()) {
	c := make(chan api.Event)
	return c, func() {}
}

func (b *recordedBackend) DeviceHistory(_ context.Context, uuid string, q api.HistoryQuery) ([]api.DevicePoint, error) {
	var out []api.DevicePoint
	if uuid != b.history.GPU {
		return out, nil
	}
	for _, p := range b.history.Points {
		if !p.Time.Before(q.From) && p.Time.Before(q.To) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (b *recordedBackend) ProcessHistory(context.Context, string, uint32, api.HistoryQuery) ([]api.ProcessPoint, error) {
	return nil, nil
}

func (b *recordedBackend) Alerts(context.Context, time.Time, time.Time) ([]api.Alert, error) {
	return b.alerts.Alerts, nil
}

func (b *recordedBackend) Actions(context.Context, time.Time, time.Time) ([]api.Action, error) {
	return b.actions.Actions, nil
}

func (b *recordedBackend) Signal(context.Context, api.SignalRequest) (api.SignalResult, error) {
	return api.SignalResult{}, api.ErrConflict
}

func (b *recordedBackend) Reload(context.Context) error { return api.ErrConflict }

// TestRecordedScreenshot draws the page over a capture of a real daemon's
// answers (VRAM_SHOT_RECORDED=DIR/PREFIX, e.g. a directory of
// scripts/gpu/serve.sh's snapshots and t150) and writes a PNG to
// VRAM_SHOT_OUT. It serves the captured JSON through the real api.Handler
// and the real dashboard; only the clock is moved (recordedBackend).
func TestRecordedScreenshot(t *testing.T) {
	prefix := os.Getenv("VRAM_SHOT_RECORDED")
	if prefix == "" {
		t.Skip("set VRAM_SHOT_RECORDED=DIR/PREFIX to draw a captured daemon")
	}
	out := os.Getenv("VRAM_SHOT_OUT")
	if out == "" {
		out = "dashboard.png"
	}
	b := loadRecorded(t, prefix, time.Now())
	done := make(chan struct{})
	srv := httptest.NewServer(api.Handler(b, api.Options{UI: dashboard.Handler(), Done: done}))
	defer srv.Close()
	defer close(done) // ends the page's event stream, which Close would wait for
	ctx := newBrowser(t, true, 2*time.Minute)
	run(t, ctx, "loading the page",
		chromedp.EmulateViewport(1600, 1000),
		chromedp.Navigate(srv.URL))
	waitFor(t, ctx, "the first sample", `+document.body.dataset.samples > 0`)
	waitFor(t, ctx, "the history chart", `document.querySelector('#hist-chart svg') !== null &&
		!/Loading/.test(document.querySelector('#hist-status').textContent)`)
	png, err := chromedp.Run(ctx, pagePicture())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}

// TestLoadRecordedOldNames reads the capture of 2026-11-30 (vram.serve/v1,
// before the identity keys were gpu_index and gpu_uuid) and checks that
// every GPU is named after the upgrade.
func TestLoadRecordedOldNames(t *testing.T) {
	b := loadRecorded(t, "../../docs/gpu-runs/2026-11-30/serve/snapshots/t90", time.Now())
	if len(b.state.Devices) == 0 || len(b.state.Processes) == 0 || len(b.state.Alerts) == 0 {
		t.Fatalf("capture has %d devices, %d processes, %d alerts", len(b.state.Devices), len(b.state.Processes), len(b.state.Alerts))
	}
	uuid := b.state.Devices[0].UUID
	if uuid == "" || b.history.GPU != uuid || len(b.history.Points) == 0 {
		t.Errorf("device uuid %q, history of %q with %d points", uuid, b.history.GPU, len(b.history.Points))
	}
	for _, p := range b.state.Processes {
		if p.GPU != uuid {
			t.Errorf("process %d on %q, want %q", p.PID, p.GPU, uuid)
		}
		if l := p.Leak; l != nil && l.Verdict != detect.VerdictLeak && l.Verdict != detect.VerdictNoLeak && l.Verdict != detect.VerdictInsufficient {
			t.Errorf("process %d: verdict %q", p.PID, l.Verdict)
		}
	}
	for _, a := range append(b.state.Alerts, b.alerts.Alerts...) {
		if a.GPU != uuid {
			t.Errorf("alert %s on %q, want %q", a.Rule, a.GPU, uuid)
		}
	}
}
