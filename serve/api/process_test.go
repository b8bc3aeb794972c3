package api

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// processJSON is a process of a response, as raw JSON values.
type processJSON map[string]json.RawMessage

// rawProcesses reads the processes of a state, processes or event body.
func rawProcesses(t *testing.T, body []byte) []processJSON {
	t.Helper()
	var doc struct {
		Processes []processJSON `json:"processes"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return doc.Processes
}

// TestProcessSignalable: each process says whether a signal request for it
// can be acted on and why not; an unknown start time is null, never the
// zero time.
func TestProcessSignalable(t *testing.T) {
	start := now.Add(-time.Hour)
	f := newFake()
	f.state.Processes = []Process{
		{GPU: uuid0, PID: 4242, StartTime: start, Flags: []string{"orphaned"}},
		{GPU: uuid0, PID: 4343, Flags: []string{"no-such-process"}},          // another PID namespace
		{GPU: uuid0, PID: 4444, StartTime: start, Flags: []string{"zombie"}}, // exited, not reaped
		{GPU: uuid0, PID: 4545},                                              // no /proc reading at all
		{GPU: uuid1, PID: 1, StartTime: start},                               // init
		{GPU: uuid1, PID: uint32(os.Getpid()), StartTime: start, Flags: nil}, // the daemon
	}
	want := []struct {
		signalable bool
		reason     string // a part of it
		start      string // the JSON value
	}{
		{true, "", `"2026-11-30T11:00:00Z"`},
		{false, "not visible in /proc", "null"},
		{false, "zombie", `"2026-11-30T11:00:00Z"`},
		{false, "not visible in /proc", "null"},
		{false, "init", `"2026-11-30T11:00:00Z"`},
		{false, "this daemon", `"2026-11-30T11:00:00Z"`},
	}
	h := Handler(f, testOptions())
	check := func(t *testing.T, ps []processJSON) {
		t.Helper()
		if len(ps) != len(want) {
			t.Fatalf("%d processes, want %d", len(ps), len(want))
		}
		for i, w := range want {
			p := ps[i]
			var reason string
			if r, ok := p["not_signalable_reason"]; ok {
				if err := json.Unmarshal(r, &reason); err != nil {
					t.Fatal(err)
				}
			}
			if got := string(p["signalable"]); got != fmt.Sprint(w.signalable) ||
				w.reason == "" && reason != "" || !strings.Contains(reason, w.reason) || string(p["start_time"]) != w.start {
				t.Errorf("process %s: signalable %s, reason %q, start_time %s; want %v, %q, %s",
					p["pid"], p["signalable"], reason, p["start_time"], w.signalable, w.reason, w.start)
			}
		}
	}
	t.Run("state", func(t *testing.T) {
		check(t, rawProcesses(t, serve(t, h, req{target: "/api/v1/state"}).Body.Bytes()))
	})
	t.Run("processes", func(t *testing.T) {
		check(t, rawProcesses(t, serve(t, h, req{target: "/api/v1/processes"}).Body.Bytes()))
	})
	t.Run("events", func(t *testing.T) {
		_, events, _ := openStream(t, f, testOptions())
		ev := next(t, events, false)
		if ev.name != "state" {
			t.Fatalf("first event %q", ev.name)
		}
		check(t, rawProcesses(t, []byte(ev.data)))
	})
	t.Run("decodes", func(t *testing.T) {
		var s State
		decodeBody(t, serve(t, h, req{target: "/api/v1/state"}), &s)
		if p := s.Processes[1]; !p.StartTime.IsZero() || p.Signalable || p.NotSignalableReason == "" {
			t.Errorf("decoded %+v", p)
		}
		if p := s.Processes[0]; !p.StartTime.Equal(start) || !p.Signalable || p.NotSignalableReason != "" {
			t.Errorf("decoded %+v", p)
		}
	})
	t.Run("the backend's state is not written", func(t *testing.T) {
		serve(t, h, req{target: "/api/v1/state"})
		if f.state.Processes[0].Signalable || f.state.Processes[5].Flags != nil {
			t.Errorf("the backend's processes were changed: %+v", f.state.Processes)
		}
	})
}

// TestSignalRefusedWhenNotSignalable: a request naming a process that the
// latest state shows as not signalable is refused with the reason, and the
// backend is never asked.
func TestSignalRefusedWhenNotSignalable(t *testing.T) {
	f := newFake()
	f.state.Processes[0].Flags = []string{"zombie"}
	w := serve(t, Handler(f, testOptions()), req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()})
	if w.Code != 409 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if e := errorDoc(t, w); !strings.Contains(e.Message, "PID 4242") || !strings.Contains(e.Message, "zombie") {
		t.Errorf("message %q, want the PID and the reason", e.Message)
	}
	if n, _ := f.calls(); n != 0 {
		t.Errorf("the backend was asked to signal %d times", n)
	}
}

// TestHistoryKeys: history points use the state's key names (sizes in
// _bytes), and a process point's unknown start time is null.
func TestHistoryKeys(t *testing.T) {
	f := newFake()
	f.devPoints = []DevicePoint{{Time: now.Add(-time.Minute), Samples: 6, Used: Range{Min: 1, Max: 3, Mean: 2},
		Reserved: Range{Min: 4, Max: 4, Mean: 4}, Free: Range{Min: 5, Max: 7, Mean: 6}, Total: 9, Util: &Range{Min: 10, Max: 90, Mean: 50}}}
	f.procPoints = []ProcessPoint{{Time: now.Add(-time.Minute), PID: 4242, Samples: 6, Bytes: Range{Min: 1, Max: 2, Mean: 1.5}}}
	h := Handler(f, testOptions())
	for _, tc := range []struct {
		target string
		want   string
	}{
		{"/api/v1/history/devices/0", `{"t":"2026-11-30T11:59:00Z","samples":6,"used_bytes":{"min":1,"max":3,"mean":2},` +
			`"reserved_bytes":{"min":4,"max":4,"mean":4},"free_bytes":{"min":5,"max":7,"mean":6},"total_bytes":9,"util_percent":{"min":10,"max":90,"mean":50}}`},
		{"/api/v1/history/processes/0/4242", `{"t":"2026-11-30T11:59:00Z","pid":4242,"samples":6,"used_bytes":{"min":1,"max":2,"mean":1.5},"flags":[],` +
			`"allocated_bytes":null,"reserved_bytes":null,"start_time":null}`},
	} {
		var doc struct {
			Points []json.RawMessage `json:"points"`
		}
		w := serve(t, h, req{target: tc.target})
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Points) != 1 {
			t.Fatalf("%s: %v %s", tc.target, err, w.Body)
		}
		if got := string(doc.Points[0]); got != tc.want {
			t.Errorf("%s: point\n got %s\nwant %s", tc.target, got, tc.want)
		}
	}
}

// TestMarshalJSONAsWritten: a Process or ProcessPoint encoded on its own
// reads as the routes write it.
func TestMarshalJSONAsWritten(t *testing.T) {
	for _, p := range []Process{sampleState().Processes[1], {PID: 7, Flags: []string{"no-such-process"}}} {
		alone, err1 := json.Marshal(p)
		wire, err2 := json.Marshal(wireProcesses([]Process{p})[0])
		if err1 != nil || err2 != nil || string(alone) != string(wire) {
			t.Errorf("Process %d:\n alone %s (%v)\n  wire %s (%v)", p.PID, alone, err1, wire, err2)
		}
	}
	for _, p := range []ProcessPoint{{Time: now, PID: 7, StartTime: now.Add(-time.Hour), Flags: []string{}}, {Time: now, PID: 8}} {
		alone, err1 := json.Marshal(p)
		wire, err2 := json.Marshal(wirePoints([]ProcessPoint{p})[0])
		if err1 != nil || err2 != nil || string(alone) != string(wire) {
			t.Errorf("ProcessPoint %d:\n alone %s (%v)\n  wire %s (%v)", p.PID, alone, err1, wire, err2)
		}
	}
	if b, _ := json.Marshal(Process{PID: 7}); !strings.Contains(string(b), `"start_time":null`) {
		t.Errorf("unknown start time written as %s", b)
	}
}
