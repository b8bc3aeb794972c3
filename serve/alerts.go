package serve

// Alerts: the rules of the configuration's alerts: section evaluated at
// each sample (package serve/alert), their transitions recorded, notified
// and streamed.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/alert"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/store"
)

// evaluateAlerts hands the sample to the alert engine and passes each
// transition on: to the history file, the notifier (which logs it and
// calls the webhooks) and the live stream. It returns the firing alerts.
func (d *Daemon) evaluateAlerts(now time.Time, snap *gpu.Snapshot) []api.Alert {
	in := alert.Input{Time: now}
	for i, t := range d.devs {
		dev := alert.Device{Index: t.id.Index, UUID: t.id.UUID, Name: t.id.Name, Healthy: t.healthy, Error: t.err}
		if snap != nil && i < len(snap.Devices) && snap.Devices[i].Err == nil {
			ds := snap.Devices[i]
			dev.Total, dev.Used, dev.Unattributed = ds.Memory.Total, ds.Memory.Used, ds.Unattributed
		}
		in.Devices = append(in.Devices, dev)
	}
	if snap != nil && d.engine.ReadsProcesses() {
		in.Processes = d.sampleRecords()
	}
	d.transitions(d.engine.Evaluate(in))
	return d.engine.Firing()
}

// transitions passes alert transitions on: to the notifier (which logs
// them and calls the webhooks), the history file and the live stream.
func (d *Daemon) transitions(changes []api.Alert) {
	if len(changes) > 0 {
		if n := d.notifier.Load(); n != nil {
			n.Notify(changes...)
		} else {
			for _, a := range changes {
				d.log.Log(nil, slog.LevelWarn, "alert", "rule", a.Rule, "state", a.State, "message", a.Message)
			}
		}
	}
	for i := range changes {
		a := changes[i]
		d.w.record(writeOp{alert: &store.Alert{Time: a.Time, Name: a.Rule, Severity: a.Severity, GPU: a.GPU, PID: a.PID, Message: a.Message, State: a.State}})
		d.hub.publish(api.Event{Kind: "alert", Alert: &a})
	}
}

// resolveLeftOpen resolves the alerts that an earlier run of the daemon
// left firing in the history file (it was killed, or stopped while they
// fired): nothing watched them since, and the engine starts with none, so
// left open they would stay "firing" forever beside the new ones. Each is
// resolved at the start, through the notifier like any transition; one
// whose condition still holds fires again as the engine sees it.
func (d *Daemon) resolveLeftOpen(ctx context.Context) {
	open, err := d.st.OpenAlerts(ctx)
	if err != nil {
		d.log.Error("the alerts an earlier run left firing could not be read: they stay open in the history", "err", err)
		return
	}
	if len(open) == 0 {
		return
	}
	now := d.now()
	changes := make([]api.Alert, 0, len(open))
	for _, a := range open {
		changes = append(changes, api.Alert{
			Time: later(now, a.Time), Rule: a.Name, Severity: a.Severity, State: alert.StateResolved, GPU: a.GPU, PID: a.PID,
			Message: fmt.Sprintf("not watched while the daemon was stopped (firing since %s: %s); it fires again if its condition still holds",
				a.Time.UTC().Format(time.RFC3339), a.Message),
		})
	}
	d.log.Info("resolved the alerts an earlier run left firing", "alerts", len(changes))
	d.transitions(changes)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
