package serve

// The daemon as the HTTP layer's api.Backend.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/vramhq/vram/proc"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/store"
)

var _ api.Backend = (*Daemon)(nil)

// State returns the latest sample, built when it is first asked for (it
// waits for a sample in progress to finish). The State and everything it
// holds are shared by every reader and must not be modified.
func (d *Daemon) State() (api.State, bool) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	l := d.latest
	if !l.ok {
		return api.State{}, false
	}
	if d.built == nil {
		d.built = d.buildState(l.now, l.snap, l.firing, l.warning)
	}
	return *d.built, true
}

// Subscribe returns live events: a "state" event per sample (without its
// State, which State returns), an "alert" event per alert transition, an
// "action" event per audited action. A subscriber that falls 64 events
// behind loses events; the daemon never waits for it. The channel closes
// when cancel is called or the daemon stops.
func (d *Daemon) Subscribe() (<-chan api.Event, func()) { return d.hub.subscribe() }

func (d *Daemon) knownGPU(uuid string) bool {
	for _, id := range d.ids {
		if id.UUID == uuid {
			return true
		}
	}
	return false
}

// DeviceHistory returns a GPU's memory over the query's range from the
// history file.
func (d *Daemon) DeviceHistory(ctx context.Context, uuid string, q api.HistoryQuery) ([]api.DevicePoint, error) {
	if !d.knownGPU(uuid) {
		return nil, fmt.Errorf("GPU %q is not sampled by this daemon: %w", uuid, api.ErrNotFound)
	}
	if !q.To.After(q.From) {
		return nil, fmt.Errorf("history range: from %s is not before to %s: %w", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), api.ErrInvalid)
	}
	pts, err := d.st.DeviceHistory(ctx, uuid, q.From, q.To, q.Step)
	if err != nil {
		return nil, fmt.Errorf("device history: %w", err)
	}
	out := make([]api.DevicePoint, len(pts))
	for i, p := range pts {
		out[i] = api.DevicePoint{Time: p.Time, Samples: p.Samples, Used: apiRange(p.Used), Reserved: apiRange(p.Reserved), Free: apiRange(p.Free), Total: p.Total}
		if p.UtilKnown {
			u := apiRange(p.Util)
			out[i].Util = &u
		}
	}
	return out, nil
}

// ProcessHistory returns the memory of the lifetimes of a PID on a GPU
// over the query's range from the history file.
func (d *Daemon) ProcessHistory(ctx context.Context, uuid string, pid uint32, q api.HistoryQuery) ([]api.ProcessPoint, error) {
	if !d.knownGPU(uuid) {
		return nil, fmt.Errorf("GPU %q is not sampled by this daemon: %w", uuid, api.ErrNotFound)
	}
	if !q.To.After(q.From) {
		return nil, fmt.Errorf("history range: from %s is not before to %s: %w", q.From.Format(time.RFC3339), q.To.Format(time.RFC3339), api.ErrInvalid)
	}
	pts, err := d.st.ProcessHistory(ctx, uuid, pid, q.From, q.To, q.Step)
	if err != nil {
		return nil, fmt.Errorf("process history: %w", err)
	}
	out := make([]api.ProcessPoint, len(pts))
	for i, p := range pts {
		out[i] = api.ProcessPoint{Time: p.Time, PID: p.PID, StartTime: p.StartTime, Samples: p.Samples, Bytes: apiRange(p.Bytes), Flags: p.Flags.Names(),
			AllocatorRanges: allocatorRanges(p)}
	}
	return out, nil
}

func apiRange(r store.Range) api.Range { return api.Range{Min: r.Min, Max: r.Max, Mean: r.Mean} }

// Alerts returns the alert transitions recorded in [from, to).
func (d *Daemon) Alerts(ctx context.Context, from, to time.Time) ([]api.Alert, error) {
	as, err := d.st.Alerts(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	out := make([]api.Alert, len(as))
	for i, a := range as {
		out[i] = api.Alert{Time: a.Time, Rule: a.Name, Severity: a.Severity, State: a.State, GPU: a.GPU, PID: a.PID, Message: a.Message}
	}
	return out, nil
}

// Actions returns the audit trail in [from, to).
func (d *Daemon) Actions(ctx context.Context, from, to time.Time) ([]api.Action, error) {
	as, err := d.st.Actions(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	out := make([]api.Action, len(as))
	for i, a := range as {
		out[i] = api.Action{Time: a.Time, Rule: a.Rule, PID: a.PID, StartTime: a.StartTime, Action: a.Action, Reason: a.Reason, Result: a.Result}
	}
	return out, nil
}

// Signal sends a signal a client asked for: only to a process that holds
// memory on a GPU of this node in the latest sample, named by its PID and
// its start time as that sample has them; never to PID 1 or the daemon;
// the identity is checked again right before the signal. Every request
// that names such a process is audited with rule "api", sent or not.
func (d *Daemon) Signal(ctx context.Context, r api.SignalRequest) (api.SignalResult, error) {
	var sig syscall.Signal
	switch strings.TrimPrefix(strings.ToUpper(r.Signal), "SIG") {
	case "TERM":
		sig = syscall.SIGTERM
	case "KILL":
		sig = syscall.SIGKILL
	default:
		return api.SignalResult{}, fmt.Errorf("signal %q: want TERM or KILL: %w", r.Signal, api.ErrInvalid)
	}
	switch {
	case r.PID <= 1:
		return api.SignalResult{}, fmt.Errorf("PID %d: vram never signals init or PID 0: %w", r.PID, api.ErrConflict)
	case int(r.PID) == d.opts.Self:
		return api.SignalResult{}, fmt.Errorf("PID %d is this daemon: %w", r.PID, api.ErrConflict)
	case r.StartTime.IsZero():
		return api.SignalResult{}, fmt.Errorf("start_time is required: with the PID it names the process: %w", api.ErrInvalid)
	}
	s, ok := d.State()
	if !ok {
		return api.SignalResult{}, fmt.Errorf("no sample yet: %w", api.ErrConflict)
	}
	gpuIndex, found, listed, other := -1, false, false, time.Time{}
	for _, p := range s.Processes {
		if p.PID != r.PID {
			continue
		}
		if p.StartTime.Equal(r.StartTime) {
			gpuIndex, found = p.GPUIndex, true
			break
		}
		listed, other = true, p.StartTime
	}
	switch {
	case found:
	case listed && other.IsZero():
		return api.SignalResult{}, fmt.Errorf("PID %d is not visible in /proc (another PID namespace, or it exited), so its identity cannot be checked: %w", r.PID, api.ErrConflict)
	case listed:
		return api.SignalResult{}, fmt.Errorf("PID %d now names another process (started %s, not %s): %w",
			r.PID, other.UTC().Format(time.RFC3339Nano), r.StartTime.UTC().Format(time.RFC3339Nano), api.ErrConflict)
	default:
		return api.SignalResult{}, fmt.Errorf("PID %d holds no GPU memory on this node in the latest sample: %w", r.PID, api.ErrNotFound)
	}
	reason := strings.TrimSpace(r.Reason)
	if reason == "" {
		reason = "requested through the API"
	}
	rec := store.Action{Time: d.now(), Rule: "api", PID: r.PID, StartTime: r.StartTime, Action: proc.SignalName(sig), Reason: reason}
	var class string
	rec.Result, class = d.acts.signal(proc.Identity{PID: int(r.PID), StartTime: r.StartTime}, sig, false)
	d.acts.audit(gpuIndex, "api", rec, class)
	act := api.Action{Time: rec.Time, Rule: rec.Rule, PID: rec.PID, StartTime: rec.StartTime, Action: rec.Action, Reason: rec.Reason, Result: rec.Result}
	switch class {
	case resultOK:
		return api.SignalResult{Action: act}, nil
	case resultGone, resultRefused:
		return api.SignalResult{Action: act}, fmt.Errorf("%s: %w", rec.Result, api.ErrConflict)
	}
	return api.SignalResult{Action: act}, errors.New(rec.Result)
}
