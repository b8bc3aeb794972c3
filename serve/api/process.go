package api

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// How processes are written: the fields of Process, with start_time null
// when it is unknown (the zero time, which reads like a date). The routes
// encode these wire types directly rather than through MarshalJSON, which
// encoding/json calls once per element and whose output it scans again.
type (
	processFields Process // the fields, without the methods
	wireProcess   struct {
		processFields
		StartTime *time.Time `json:"start_time"`
	}
	pointFields ProcessPoint
	wirePoint   struct {
		pointFields
		StartTime *time.Time `json:"start_time"`
	}
	stateFields State
	wireState   struct {
		stateFields
		Processes []wireProcess `json:"processes"`
	}
)

func wireProcesses(ps []Process) []wireProcess {
	out := make([]wireProcess, len(ps))
	for i, p := range ps {
		out[i] = wireProcess{processFields(p), timeOrNull(p.StartTime)}
	}
	return out
}

func wirePoints(ps []ProcessPoint) []wirePoint {
	out := make([]wirePoint, len(ps))
	for i, p := range ps {
		out[i] = wirePoint{pointFields(p), timeOrNull(p.StartTime)}
	}
	return out
}

// toWire is s as written.
func toWire(s State) wireState {
	return wireState{stateFields(s), wireProcesses(s.Processes)}
}

// MarshalJSON writes p as the routes do: start_time is null when unknown.
func (p Process) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireProcess{processFields(p), timeOrNull(p.StartTime)})
}

// MarshalJSON writes p as the routes do: start_time is null when unknown.
func (p ProcessPoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(wirePoint{pointFields(p), timeOrNull(p.StartTime)})
}

func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// notSignalable says why a signal request for p would be refused, or ""
// when it can be acted on; self is the daemon's PID. These are the
// refusals that the process itself decides, the same as the daemon's
// and the policy enforcer's.
func notSignalable(p Process, self int) string {
	switch {
	case p.PID <= 1:
		return fmt.Sprintf("PID %d is init (or not a process): vram never signals it", p.PID)
	case int64(p.PID) == int64(self):
		return fmt.Sprintf("PID %d is this daemon", p.PID)
	case p.StartTime.IsZero() || slices.Contains(p.Flags, "no-such-process"):
		return "not visible in /proc (another PID namespace, or it exited), so its identity cannot be checked"
	case slices.Contains(p.Flags, "zombie"):
		return "it has already exited (a zombie): its memory goes when its parent reaps it or the driver finishes the teardown"
	}
	return ""
}

// withSignalable returns ps with Signalable and NotSignalableReason set, and
// Recent and Flags never nil. It copies: the Backend's slices are shared
// with other readers.
func withSignalable(ps []Process) []Process {
	out := make([]Process, len(ps))
	self := os.Getpid()
	for i, p := range ps {
		p.Recent = orEmpty(p.Recent)
		p.Flags = orEmpty(p.Flags)
		p.NotSignalableReason = notSignalable(p, self)
		p.Signalable = p.NotSignalableReason == ""
		out[i] = p
	}
	return out
}
