package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/store"
)

// runEnv is a daemon on a simulated host with the real clock, running its
// loop, served over HTTP by the real api.Handler.
type runEnv struct {
	d    *Daemon
	sim  *gpu.Sim
	srv  *httptest.Server
	stop func()
	db   string
	log  *syncBuffer
}

func startDaemon(t *testing.T, cfg Config, db string) *runEnv {
	t.Helper()
	op, err := gpu.Open(gpu.OpenOptions{Simulate: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d, err := New(context.Background(), Options{Config: cfg, Opened: op, DB: db, Logger: slog.New(slog.NewTextHandler(logs, nil)), NoXid: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	streams := make(chan struct{})
	srv := httptest.NewServer(api.Handler(d, api.Options{Metrics: d.MetricsHandler(), StatePeriod: 10 * time.Millisecond, Done: streams}))
	e := &runEnv{d: d, sim: op.Host.(*gpu.Sim), srv: srv, db: db, log: logs}
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		close(streams)
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	t.Cleanup(e.stop)
	return e
}

func (e *runEnv) get(t *testing.T, path string, into any) *http.Response {
	t.Helper()
	res, err := http.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return res
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fastConfig() Config {
	c := DefaultConfig()
	c.Interval = 20 * time.Millisecond
	c.HistoryInterval = 40 * time.Millisecond
	c.PodResourcesSocket, c.PodResourcesAuto = "", false
	return c
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := fastConfig()
	cfg.PolicyFile = writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: orphans, when: [orphaned], action: term}\n")
	rules := configWith(t, "version: 1\nalerts:\n  rules:\n    - {name: sick, when: device_unhealthy}\n")
	cfg.Alerts = rules.Alerts
	e := startDaemon(t, cfg, filepath.Join(dir, "h.db"))
	waitFor(t, "healthz", func() bool { return e.get(t, "/healthz", nil).StatusCode == http.StatusOK })

	var s api.State
	if res := e.get(t, "/api/v1/state", &s); res.StatusCode != 200 {
		t.Fatalf("state: %d", res.StatusCode)
	}
	if !s.Simulated || len(s.Devices) != 2 || len(s.Processes) == 0 || s.Schema != api.Schema {
		t.Errorf("state = %+v", s)
	}
	uuid := s.Devices[0].UUID

	// History after a few ticks.
	var hist struct {
		Points []api.DevicePoint `json:"points"`
	}
	waitFor(t, "three history points", func() bool {
		if res := e.get(t, "/api/v1/history/devices/"+uuid+"?from=-1m&step=0.01", &hist); res.StatusCode != 200 {
			t.Fatalf("history: status %d", res.StatusCode)
		}
		return len(hist.Points) >= 3
	})
	for _, p := range hist.Points {
		if p.Used.Max == 0 || p.Total == 0 {
			t.Errorf("history point = %+v", p)
		}
	}

	// Prometheus.
	res, err := http.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"vram_gpu_memory_used_bytes{", "vram_process_memory_used_bytes{", "vram_scrape_success 1", "vram_gpu_healthy{", "vram_daemon_samples_total ", "vram_history_ticks_written_total "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "vram_") {
			t.Errorf("/metrics has a series outside vram_: %q", line)
		}
	}

	// The live stream: a state event.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/events", nil)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("events content type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && event == "state" {
			var st api.State
			if err := json.Unmarshal([]byte(v), &st); err != nil || len(st.Devices) != 2 {
				t.Errorf("state event: %v %+v", err, st)
			}
			break
		}
	}
	if event != "state" {
		t.Errorf("no state event: %v", sc.Err())
	}

	// A failing GPU: marked unhealthy, the loop goes on.
	e.sim.FailDevice(1, nil)
	waitFor(t, "GPU 1 unhealthy", func() bool {
		e.get(t, "/api/v1/devices", &s)
		return len(s.Devices) == 2 && !s.Devices[1].Healthy
	})
	before := e.d.ticks.Load()
	waitFor(t, "more samples", func() bool { return e.d.ticks.Load() > before+3 })
	e.sim.RestoreDevice(1)
	waitFor(t, "GPU 1 healthy again", func() bool {
		e.get(t, "/api/v1/devices", &s)
		return s.Devices[1].Healthy
	})

	// The alert fired and resolved; the dry-run policy audited the orphan.
	var alerts struct {
		Alerts []api.Alert `json:"alerts"`
	}
	waitFor(t, "the alert's two transitions", func() bool {
		e.get(t, "/api/v1/alerts?from=-1h", &alerts)
		return len(alerts.Alerts) == 2
	})
	if a := alerts.Alerts; a[0].Rule != "sick" || a[0].State != "firing" || a[1].State != "resolved" || a[0].GPU != s.Devices[1].UUID {
		t.Errorf("alerts = %+v", a)
	}
	var actions struct {
		Actions []api.Action `json:"actions"`
	}
	waitFor(t, "the audit of the orphan", func() bool {
		e.get(t, "/api/v1/actions?from=-1h", &actions)
		return len(actions.Actions) > 0
	})
	for _, a := range actions.Actions {
		if !strings.Contains(a.Rule, `reclaim rule "orphans"`) || a.Action != "SIGTERM" || !strings.HasPrefix(a.Result, "dry run") {
			t.Errorf("action = %+v", a)
		}
	}
}

func TestRestartKeepsHistory(t *testing.T) {
	db := filepath.Join(t.TempDir(), "h.db")
	e := startDaemon(t, fastConfig(), db)
	waitFor(t, "five ticks written", func() bool { return e.d.w.ticks.Load() >= 5 })
	uuid := e.d.Devices()[0].UUID
	e.stop()
	first := readTicks(t, db, uuid)
	if len(first) < 5 {
		t.Fatalf("%d ticks after the first run", len(first))
	}

	e = startDaemon(t, fastConfig(), db)
	waitFor(t, "five more ticks", func() bool { return e.d.w.ticks.Load() >= 5 })
	e.stop()
	second := readTicks(t, db, uuid)
	for at := range first {
		if !second[at] {
			t.Errorf("tick %v of the first run lost after a restart", at)
		}
	}
	if len(second) < len(first)+5 {
		t.Errorf("%d ticks after the second run, want at least %d", len(second), len(first)+5)
	}
}

// readTicks opens the history file and returns the times of the GPU's ticks.
func readTicks(t *testing.T, db, uuid string) map[time.Time]bool {
	t.Helper()
	st, err := store.Open(context.Background(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pts, err := st.DeviceHistory(context.Background(), uuid, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[time.Time]bool{}
	for _, p := range pts {
		out[p.Time] = true
	}
	return out
}

// TestReloadAPIBrokenFile posts a reload while the policy file is broken:
// the answer is 400 with the file's error, the log has it once without a
// doubled prefix, and the rules in force stay until the file is fixed.
func TestReloadAPIBrokenFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: orphans, when: [orphaned]}\n")
	cfgPath := writeFile(t, dir, "vram.yaml", "version: 1\ninterval: 20ms\npolicy_file: policy.yaml\nkubernetes: {pod_resources_socket: \"\"}\n")
	cfg, err := ReadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	e := startDaemon(t, cfg, filepath.Join(dir, "history.db"))
	const token = "0123456789abcdef0123456789abcdef"
	httpLog := &syncBuffer{}
	srv := httptest.NewServer(api.Handler(e.d, api.Options{Mutations: true, Token: []byte(token), Logger: slog.New(slog.NewTextHandler(httpLog, nil))}))
	defer srv.Close()
	reload := func() (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+"/api/v1/reload", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}

	for _, tc := range []struct{ name, policy, want string }{
		{"unknown condition", "version: 1\nreclaim:\n  - {name: orphans, when: [sleepy]}\n", `policy.yaml:3: reclaim[0].when[0]: unknown condition \"sleepy\"`},
		{"missing file", "", "policy.yaml: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "policy.yaml")
			if tc.policy == "" {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else {
				writeFile(t, dir, "policy.yaml", tc.policy)
			}
			code, body := reload()
			if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("POST /api/v1/reload: %d %s; want 400 with %s", code, body, tc.want)
			}
			for what, text := range map[string]string{"answer": body, "log": httpLog.String()} {
				if strings.Contains(text, "reload: reload:") || strings.Contains(text, "internal error") {
					t.Errorf("the %s: %s", what, text)
				}
			}
		})
	}
	writeFile(t, dir, "policy.yaml", "version: 1\nreclaim:\n  - {name: zombies, when: [zombie]}\n")
	if code, body := reload(); code != http.StatusOK {
		t.Fatalf("POST /api/v1/reload of a good file: %d %s", code, body)
	}
}

// TestOneDaemonPerHistoryFile starts a second daemon on the history file of
// a running one: it is refused, naming this process as the holder, and the
// file opens again once the first is closed.
func TestOneDaemonPerHistoryFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "history.db")
	first := startDaemon(t, fastConfig(), db)
	op, err := gpu.Open(gpu.OpenOptions{Simulate: 1, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	second, err := New(context.Background(), Options{Config: fastConfig(), Opened: op, DB: db, NoXid: true})
	if err == nil {
		second.Close()
		t.Fatal("a second daemon opened the history file of a running one")
	}
	op.Host.Close()
	want := fmt.Sprintf("history file %s is in use by PID %d, which holds its lock %s.lock", db, os.Getpid(), db)
	var locked *store.LockedError
	if !errors.As(err, &locked) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--db") {
		t.Errorf("second daemon: %v; want %q and a hint", err, want)
	}
	first.stop()
	startDaemon(t, fastConfig(), db).stop()
}
