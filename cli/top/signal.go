package top

import (
	"syscall"
	"time"

	"github.com/vramhq/vram/proc"
)

// Signals go through package proc's checked path: Config.Signaller is a
// proc.Signaller (proc.Pidfd on a real host, one that sends nothing on a
// simulated one, a recording fake in tests) and Config.Procs the
// proc.Stater that re-reads a process's identity right before the signal.

// target is the process the user asked to signal, as the monitor last saw
// it: the PID and the start time identify it across PID reuse.
type target struct {
	PID     int
	Start   time.Time
	Command string // display form (gpu.Printable): shown, never matched
	Memory  uint64
	Device  int
}

func (t target) identity() proc.Identity { return proc.Identity{PID: t.PID, StartTime: t.Start} }

// checkTarget refuses targets that must never be signalled, whatever their
// identity: init, vram itself, and a process whose start time is unknown
// (the monitor could not read it, so it cannot check it).
func checkTarget(t target, self int) error { return proc.Refuse(t.identity(), self) }

// signalChecked re-reads the target's start time, refuses when the PID now
// names another process (or none), and sends sig: proc.Signal.
func signalChecked(st proc.Stater, sg proc.Signaller, self int, t target, sig syscall.Signal) error {
	return proc.Signal(st, sg, self, t.identity(), sig)
}

func sigName(sig syscall.Signal) string { return proc.SignalName(sig) }
