package serve

// Alerts: the rules of the configuration's alerts: section evaluated at
// each sample (package serve/alert), their transitions recorded, notified
// and streamed.

import (
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
	if snap != nil {
		for _, p := range snap.Processes {
			ap := alert.Process{GPU: p.DeviceUUID, PID: p.PID, StartTime: p.StartTime, Bytes: p.Memory, Flags: p.Flags}
			if !p.MemoryKnown {
				ap.Bytes = 0
			}
			switch t := d.procs[keyOf(p)]; {
			case t == nil:
				ap.Command = p.DisplayCommand()
			default:
				ap.Command = t.display
				if t.confirmed {
					ap.Leak, ap.Slope = true, t.verdict.Slope
				}
			}
			in.Processes = append(in.Processes, ap)
		}
	}
	changes := d.engine.Evaluate(in)
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
	return d.engine.Firing()
}
