package api

import (
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/internal/jsondoc"
)

// TestJSONDoc checks every document of the read and mutating routes, and
// an error, against docs/json.md.
func TestJSONDoc(t *testing.T) {
	f := newFake()
	f.state.Alerts = []Alert{{Time: now, Rule: "gpu-nearly-full", Severity: "warning", State: "firing", GPU: uuid0, Message: "m"}}
	f.state.Warnings = []string{"sampling is late"}
	f.state.Processes[2].Leak = &Leak{Verdict: detect.VerdictInsufficient, Reason: "warming up"}
	f.state.Processes = append(f.state.Processes, Process{GPU: uuid1, GPUIndex: 1, PID: 6000, User: "?", Command: "other namespace",
		Container: "3f2a", Pod: "train-0", Namespace: "ml", ContainerName: "trainer", Flags: []string{"no-such-process"}})
	util := Range{Min: 10, Max: 90, Mean: 42.5}
	f.devPoints = []DevicePoint{{Time: now.Add(-time.Minute), Samples: 6, Used: Range{Min: 1, Max: 3, Mean: 2}, Total: 9, Util: &util},
		{Time: now, Samples: 1, Total: 9}}
	f.procPoints = []ProcessPoint{{Time: now.Add(-time.Minute), PID: 4242, StartTime: now.Add(-time.Hour), Samples: 6, Bytes: Range{Min: 1, Max: 1, Mean: 1}, Flags: []string{"idle"}}}
	f.alerts = []Alert{{Time: now, Rule: "leak", Severity: "critical", State: "resolved", GPU: uuid0, PID: 4343, StartTime: now.Add(-time.Hour), Message: "m"}}
	f.actions = []Action{{Time: now, Rule: "api", PID: 4242, StartTime: now.Add(-time.Hour), Action: "term", Reason: "r", Result: "sent"}}
	h := Handler(f, testOptions())
	auth := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	start := now.Add(-time.Hour).Format(time.RFC3339Nano)
	for _, tt := range []struct {
		title string
		rq    req
	}{
		{"GET /api/v1/state", req{target: "/api/v1/state"}},
		{"GET /api/v1/devices", req{target: "/api/v1/devices"}},
		{"GET /api/v1/processes", req{target: "/api/v1/processes"}},
		{"GET /api/v1/history/devices/GPU", req{target: "/api/v1/history/devices/" + uuid0 + "?from=-1h&step=10s"}},
		{"GET /api/v1/history/processes/GPU/PID", req{target: "/api/v1/history/processes/" + uuid0 + "/4242?from=-1h"}},
		{"GET /api/v1/alerts", req{target: "/api/v1/alerts"}},
		{"GET /api/v1/actions", req{target: "/api/v1/actions"}},
		{"POST /api/v1/signal", req{method: "POST", target: "/api/v1/signal", header: auth,
			body: `{"pid":4242,"start_time":"` + start + `","signal":"TERM","reason":"test"}`}},
		{"POST /api/v1/reload", req{method: "POST", target: "/api/v1/reload", header: auth}},
		{"An error", req{target: "/api/v1/processes?gpu=99"}},
	} {
		t.Run(tt.title, func(t *testing.T) {
			w := serve(t, h, tt.rq)
			if (w.Code >= 400) != (tt.title == "An error") {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			jsondoc.Test(t, tt.title, w.Body.Bytes())
		})
	}
}
