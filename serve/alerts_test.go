package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/serve/api"
)

// configWith parses a configuration for a test.
func configWith(t *testing.T, text string) Config {
	t.Helper()
	c, err := ParseConfig("test.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAlertFiresAndResolves(t *testing.T) {
	hook := &hookServer{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	cfg := configWith(t, `version: 1
alerts:
  rules:
    - name: gpu-unhealthy
      when: device_unhealthy
      severity: critical
    - name: orphans
      when: orphan_holding
      min_bytes: 1MiB
  webhooks:
    - url: `+srv.URL+`
      max_attempts: 1
`)
	e := newEnv(t, 2, cfg)
	events, cancel := e.d.Subscribe()
	defer cancel()
	e.step(time.Second)
	s, _ := e.d.State()
	if len(s.Alerts) == 0 {
		t.Fatal("no orphan_holding alert on a host with an orphan")
	}
	for _, a := range s.Alerts {
		if a.Rule != "orphans" || a.State != "firing" {
			t.Errorf("firing before the failure: %+v", a)
		}
	}
	firstOrphans := len(s.Alerts)

	e.sim.FailDevice(1, nil)
	e.step(time.Second)
	s, _ = e.d.State()
	var unhealthy *api.Alert
	for i, a := range s.Alerts {
		if a.Rule == "gpu-unhealthy" {
			unhealthy = &s.Alerts[i]
		}
	}
	if unhealthy == nil || unhealthy.Severity != "critical" || unhealthy.GPU != e.d.Devices()[1].UUID || !strings.Contains(unhealthy.Message, "ERROR_GPU_IS_LOST") {
		t.Fatalf("alerts after the failure: %+v", s.Alerts)
	}
	e.sim.RestoreDevice(1)
	e.step(time.Second)
	s, _ = e.d.State()
	for _, a := range s.Alerts {
		if a.Rule == "gpu-unhealthy" {
			t.Errorf("still firing after the GPU came back: %+v", a)
		}
	}

	// The history has each transition once.
	e.flush(t)
	as, err := e.d.Alerts(context.Background(), e.clk.Now().Add(-time.Hour), e.clk.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, a := range as {
		if a.Rule == "gpu-unhealthy" {
			states = append(states, a.State)
		}
	}
	if strings.Join(states, ",") != "firing,resolved" {
		t.Errorf("recorded transitions of gpu-unhealthy: %v (all: %+v)", states, as)
	}
	orphans := 0
	for _, a := range as {
		if a.Rule == "orphans" {
			orphans++
		}
	}
	if orphans < firstOrphans {
		t.Errorf("%d orphan alerts recorded, want at least %d", orphans, firstOrphans)
	}

	// The live stream carried them.
	kinds := map[string]int{}
	for len(events) > 0 {
		kinds[(<-events).Kind]++
	}
	if kinds["alert"] < 2 || kinds["state"] != 3 {
		t.Errorf("events: %v", kinds)
	}

	// And the webhook received them.
	waitFor(t, "the webhook", func() bool { return hook.count("gpu-unhealthy") == 2 })
}

// hookServer is a webhook that records the alerts posted to it.
type hookServer struct {
	mu     sync.Mutex
	alerts []api.Alert
}

func (h *hookServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p struct {
		Schema string      `json:"schema"`
		Host   string      `json:"host"`
		Alerts []api.Alert `json:"alerts"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Host != "node-1" {
		http.Error(w, "bad payload", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.alerts = append(h.alerts, p.Alerts...)
	h.mu.Unlock()
}

func (h *hookServer) count(rule string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.alerts {
		if a.Rule == rule {
			n++
		}
	}
	return n
}

func TestLeakAlert(t *testing.T) {
	cfg := configWith(t, "version: 1\nalerts:\n  rules:\n    - {name: leak, when: leak}\n")
	e := newEnv(t, 1, cfg)
	fired := -1
	for i := range 150 {
		e.step(time.Second)
		if s, _ := e.d.State(); len(s.Alerts) > 0 && fired < 0 {
			fired = i + 1
			if a := s.Alerts[0]; a.Rule != "leak" || a.PID == 0 || a.StartTime.IsZero() {
				t.Errorf("leak alert = %+v", a)
			}
		}
	}
	if fired < 0 {
		t.Fatal("the simulated leak raised no alert in 150 s")
	}
	t.Logf("leak alert after %d s", fired)
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: orphans, when: [orphaned], action: term}\n")
	cfgPath := writeFile(t, dir, "vram.yaml", "version: 1\ninterval: 10ms\npolicy_file: policy.yaml\n")
	cfg, err := ReadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, 1, cfg)
	e.d.sampler = mustSampler(t, e.host, e.sim, time.Now)
	e.d.now = time.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()

	// A broken policy: the error names it, the old rules stay.
	writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: orphans, when: [sleepy]}\n")
	err = e.d.Reload(rctx)
	if err == nil || !strings.Contains(err.Error(), "policy.yaml:3") || !strings.Contains(err.Error(), `unknown condition "sleepy"`) {
		t.Fatalf("reload of a broken policy: %v", err)
	}
	if pol := currentPolicy(t, e); pol == nil || len(pol.Reclaim) != 1 || pol.Reclaim[0].Name != "orphans" {
		t.Fatalf("the old policy was not kept: %+v", pol)
	}
	// A broken alerts section.
	writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: zombies, when: [zombie]}\n")
	writeFile(t, dir, "vram.yaml", "version: 1\ninterval: 10ms\npolicy_file: policy.yaml\nalerts: {rules: [{name: x, when: never}]}\n")
	if err := e.d.Reload(rctx); err == nil || !strings.Contains(err.Error(), "vram.yaml:4") {
		t.Fatalf("reload of broken alert rules: %v", err)
	}
	if pol := currentPolicy(t, e); pol.Reclaim[0].Name != "orphans" {
		t.Fatal("a failed reload half-applied the new policy")
	}
	// A good one.
	writeFile(t, dir, "vram.yaml", "version: 1\ninterval: 1s\npolicy_file: policy.yaml\nalerts: {rules: [{name: sick, when: device_unhealthy}]}\n")
	if err := e.d.Reload(rctx); err != nil {
		t.Fatal(err)
	}
	if pol := currentPolicy(t, e); pol.Reclaim[0].Name != "zombies" {
		t.Errorf("policy after reload: %+v", pol.Reclaim)
	}
	if !strings.Contains(e.log.String(), "take effect at the next start only") {
		t.Error("no warning that the interval change needs a restart")
	}
	e.sim.FailDevice(0, nil)
	waitFor(t, "the reloaded alert rule to fire", func() bool {
		s, _ := e.d.State()
		return len(s.Alerts) == 1 && s.Alerts[0].Rule == "sick"
	})
}

// currentPolicy returns the policy in force, read on the sampling
// goroutine.
func currentPolicy(t *testing.T, e *testEnv) *policy.Policy {
	t.Helper()
	ch := make(chan *policy.Policy, 1)
	select {
	case e.d.inspect <- func() { ch <- e.d.pol }:
	case <-time.After(10 * time.Second):
		t.Fatal("loop not running")
	}
	return <-ch
}

// TestReloadNamesChangedSettings checks that a reload names exactly the
// settings that changed and need a restart.
func TestReloadNamesChangedSettings(t *testing.T) {
	base := "version: 1\ninterval: 1s\n"
	for _, tc := range []struct {
		name, file string
		want       string // the settings the warning names; "" for no warning
	}{
		{"nothing", base, ""},
		{"interval only", "version: 1\ninterval: 2s\n", "[interval]"},
		{"history_interval only", "version: 1\ninterval: 1s\nhistory_interval: 30s\n", "[history_interval]"},
		{"both", "version: 1\ninterval: 2s\nhistory_interval: 30s\n", "[interval history_interval]"},
		{"interval past the default history_interval", "version: 1\ninterval: 20s\n", "[interval history_interval]"},
		{"top_n", "version: 1\ninterval: 1s\ntop_n: 3\n", "[top_n]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, configWith(t, base))
			r := reloadRequest{cfg: configWith(t, tc.file)}
			if err := e.d.apply(r); err != nil {
				t.Fatal(err)
			}
			log := e.log.String()
			got := ""
			if m := regexp.MustCompile(`take effect at the next start only" settings="?(\[[^\]]*\])`).FindStringSubmatch(log); m != nil {
				got = m[1]
			}
			if got != tc.want {
				t.Errorf("settings named %q, want %q:\n%s", got, tc.want, log)
			}
		})
	}
}

// TestRestartResolvesAlertsLeftFiring stops a daemon while alerts fire,
// as kill -9 leaves them in the history file (a clean stop leaves them the
// same way), and starts another on the same file, twice: each alert left
// firing is resolved at the start, one whose condition still holds fires
// again, and no alert ever has two "firing" transitions without a
// "resolved" between them.
func TestRestartResolvesAlertsLeftFiring(t *testing.T) {
	hook := &hookServer{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	cfg := configWith(t, `version: 1
alerts:
  rules:
    - {name: gpu-unhealthy, when: device_unhealthy}
    - {name: orphans, when: orphan_holding, min_bytes: 1MiB}
  webhooks:
    - {url: `+srv.URL+`, max_attempts: 1}
`)
	db := filepath.Join(t.TempDir(), "history.db")
	clk := newClock()
	e := newEnvClock(t, 2, cfg, clk, withDB(db))
	e.sim.FailDevice(1, nil)
	e.step(time.Second)
	e.flush(t)
	leftOpen := len(e.d.engine.Firing())
	if leftOpen < 2 {
		t.Fatalf("%d alerts firing before the stop, want the GPU's and the orphans'", leftOpen)
	}
	for restart := 1; restart <= 2; restart++ {
		e.d.Close()
		clk.Advance(time.Minute)
		e = newEnvClock(t, 2, cfg, clk, withDB(db)) // GPU 1 answers again
		e.step(time.Second)
		e.step(time.Second)
		e.flush(t)

		as, err := e.d.Alerts(context.Background(), clk.Now().Add(-time.Hour), clk.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		type subject struct {
			rule, gpu string
			pid       uint32
		}
		last := map[subject]api.Alert{}
		for _, a := range as {
			k := subject{a.Rule, a.GPU, a.PID}
			if prev, ok := last[k]; ok && prev.State == a.State {
				t.Errorf("restart %d: %s twice in a row for %v: %q then %q", restart, a.State, k, prev.Message, a.Message)
			}
			last[k] = a
		}
		open := 0
		for k, a := range last {
			if a.State == "firing" {
				open++
			}
			if k.rule == "gpu-unhealthy" && (a.State != "resolved" || !strings.Contains(a.Message, "not watched while the daemon was stopped")) {
				t.Errorf("restart %d: the unhealthy GPU's alert ends %s: %q", restart, a.State, a.Message)
			}
		}
		if firing := len(e.d.engine.Firing()); open != firing || firing == 0 {
			t.Errorf("restart %d: %d alerts open in the history, %d firing", restart, open, firing)
		}
	}
	// The webhook heard the GPU's alert fire and resolve, once each.
	waitFor(t, "the webhook", func() bool { return hook.count("gpu-unhealthy") == 2 })
}
