package alert_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/alert"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
)

// The daemon's loop, on a fake timeline: one rule that waits five minutes,
// one that fires at once, and the transitions of each sample.
func ExampleEngine() {
	e := alert.NewEngine([]alert.Rule{
		{Name: "gpu-nearly-full", When: alert.WhenUsedAbove, Percent: 90, For: 5 * time.Minute, Severity: alert.SeverityWarning},
		{Name: "orphan-holding", When: alert.WhenOrphanHolding, MinBytes: 1 << 30, Severity: alert.SeverityCritical},
	})
	const gib = 1 << 30
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	sample := func(at time.Duration, used uint64, orphan bool) alert.Input {
		in := alert.Input{
			Time:    t0.Add(at),
			Devices: []alert.Device{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", Total: 140 * gib, Used: used, Healthy: true}},
		}
		if orphan {
			in.Processes = []sample.Process{{GPU: "GPU-0", PID: 4242, StartTime: t0.Add(-time.Hour),
				Display: "python train.py", Bytes: 12 * gib, Flags: gpu.FlagOrphaned}}
		}
		return in
	}
	for _, in := range []alert.Input{
		sample(0, 130*gib, true),
		sample(time.Minute, 131*gib, true),
		sample(5*time.Minute, 129*gib, false),
		sample(6*time.Minute, 100*gib, false),
	} {
		for _, a := range e.Evaluate(in) {
			fmt.Printf("%s %s %s: %s\n", in.Time.Format("15:04"), a.State, a.Rule, a.Message)
		}
	}
	// Output:
	// 12:00 firing orphan-holding: process 4242 (python train.py) on GPU 0 is orphaned and holds 12.00 GiB
	// 12:05 firing gpu-nearly-full: GPU 0 (NVIDIA H200): 92.1% used (129.00 GiB of 140.00 GiB) for 5m0s
	// 12:05 resolved orphan-holding: process 4242 (python train.py) on GPU 0 is no longer listed on the GPU (it exited or released its memory)
	// 12:06 resolved gpu-nearly-full: GPU 0 (NVIDIA H200): 71.4% used (100.00 GiB of 140.00 GiB), under 90% again
}

// section returns the value of the alerts: key of a configuration file, as
// the daemon's configuration reader hands it to Decode.
func section(src string) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		panic(err)
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "alerts" {
			return root.Content[i+1]
		}
	}
	return nil
}

func ExampleDecode() {
	cfg, err := alert.Decode("vram.yaml", section(`
version: 1
alerts:
  rules:
    - name: gpu-nearly-full
      when: used_above
      percent: 90
      for: 5m
    - name: leak
      when: leak
      min_slope: 1MiB/s
      severity: critical
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range cfg.Rules {
		fmt.Printf("%s: %s, %s after %s\n", r.Name, r.When, r.Severity, r.For)
	}

	// Mistakes name the file, the line and the field.
	_, err = alert.Decode("vram.yaml", section(`
version: 1
alerts:
  rules:
    - name: gpu-nearly-full
      when: used_above
      percent: 90
      for: -5m
    - name: leak
      when: leak
      min_bytes: 1GiB
`))
	fmt.Println(err)
	// Output:
	// gpu-nearly-full: used_above, warning after 5m0s
	// leak: leak, critical after 0s
	// vram.yaml:8: alerts.rules[0].for: -5m is negative
	// vram.yaml:11: alerts.rules[1].min_bytes: set, but when: leak does not read it
}

// A Notifier logs each alert and posts it to the webhooks; Close delivers
// what is queued before the daemon exits.
func ExampleNotifier() {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p alert.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, a := range p.Alerts {
			fmt.Printf("webhook got from %s (%s): %s %s: %s\n", p.Host, p.Schema, a.State, a.Rule, a.Message)
		}
	}))
	defer hook.Close()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output for this example
			}
			return a
		},
	}))
	n := alert.NewNotifier(alert.Config{Webhooks: []alert.Webhook{{URL: hook.URL, MaxAttempts: 3}}},
		alert.NotifierOptions{Logger: logger, Hostname: "gpu-node-7"})
	n.Notify(api.Alert{
		Time: time.Date(2025, 6, 1, 12, 5, 0, 0, time.UTC), Rule: "gpu-nearly-full", Severity: alert.SeverityWarning,
		State: alert.StateFiring, GPU: "GPU-0", Message: "GPU 0 (NVIDIA H200): 92.1% used (129.00 GiB of 140.00 GiB) for 5m0s",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%+v\n", n.Stats())
	// Output:
	// level=WARN msg="alert firing" rule=gpu-nearly-full severity=warning gpu=GPU-0 message="GPU 0 (NVIDIA H200): 92.1% used (129.00 GiB of 140.00 GiB) for 5m0s"
	// webhook got from gpu-node-7 (vram.alert/v2): firing gpu-nearly-full: GPU 0 (NVIDIA H200): 92.1% used (129.00 GiB of 140.00 GiB) for 5m0s
	// {Sent:1 Failed:0 Retried:0 Dropped:0}
}
