package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/vramhq/vram/serve/api"
)

// node is a Backend with one GPU and no history: the smallest daemon.
type node struct{}

func (node) State() (api.State, bool) {
	return api.State{
		Time:     time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		Hostname: "node-1",
		Devices:  []api.Device{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", Healthy: true, TotalBytes: 150 << 30, UsedBytes: 40 << 30}},
	}, true
}
func (node) Subscribe() (<-chan api.Event, func()) {
	ch := make(chan api.Event)
	return ch, func() { close(ch) }
}
func (node) DeviceHistory(context.Context, string, api.HistoryQuery) ([]api.DevicePoint, error) {
	return nil, nil
}
func (node) ProcessHistory(context.Context, string, uint32, api.HistoryQuery) ([]api.ProcessPoint, error) {
	return nil, nil
}
func (node) Alerts(context.Context, time.Time, time.Time) ([]api.Alert, error)   { return nil, nil }
func (node) Actions(context.Context, time.Time, time.Time) ([]api.Action, error) { return nil, nil }
func (node) Signal(context.Context, api.SignalRequest) (api.SignalResult, error) {
	return api.SignalResult{}, fmt.Errorf("no such process: %w", api.ErrNotFound)
}
func (node) Reload(context.Context) error { return nil }

// The daemon hands its Backend to Handler and serves the result; reads
// need nothing more, mutations are off unless enabled with a token.
func ExampleHandler() {
	h := api.Handler(node{}, api.Options{})

	for _, r := range []struct{ method, target string }{
		{"GET", "/api/v1/devices"},
		{"GET", "/api/v1/alerts?from=yesterday"},
		{"POST", "/api/v1/signal"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(r.method, r.target, strings.NewReader("{}")))
		fmt.Print(w.Code, " ", w.Body)
	}
	// Output:
	// 200 {"schema":"vram.serve/v3","time":"2026-11-30T12:00:00Z","devices":[{"gpu_index":0,"gpu_uuid":"GPU-0","name":"NVIDIA H200","healthy":true,"total_bytes":161061273600,"used_bytes":42949672960,"free_bytes":0,"reserved_bytes":0,"reserved_known":false,"unattributed_bytes":0,"util_percent":0,"recent":[],"recent_step_seconds":0}]}
	// 400 {"schema":"vram.serve/v3","error":{"status":400,"message":"query parameter \"from\": \"yesterday\" is not a time: want RFC 3339 (2026-11-30T12:00:00Z), Unix seconds, \"now\" or a negative duration like -1h"}}
	// 403 {"schema":"vram.serve/v3","error":{"status":403,"message":"mutating endpoints are disabled on this daemon; enable http.mutations (with a token_file) in its config"}}
}

// A daemon checks its listen address and reads its token before it serves.
func ExampleCheckListen() {
	fmt.Println(api.CheckListen("127.0.0.1:9400", false))
	fmt.Println(api.CheckListen("0.0.0.0:9400", false))
	fmt.Println(api.CheckListen("0.0.0.0:9400", true))
	// Output:
	// <nil>
	// listen address "0.0.0.0:9400": 0.0.0.0 listens on every interface, so other hosts could reach the API; bind to 127.0.0.1 or allow remote access explicitly (http.allow_remote in the config)
	// <nil>
}
