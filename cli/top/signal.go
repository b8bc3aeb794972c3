package top

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/gpu"
	procsig "github.com/vramhq/vram/proc"
)

// Signaller sends a signal to a process. The real one is KillSignaller;
// tests and simulated hosts use fakes that never touch a real process.
// Every signal goes through package proc's checked path (refusals, identity
// re-checked right before the signal).
type Signaller interface {
	Signal(pid int, sig syscall.Signal) error
}

// SignallerFunc adapts a function to Signaller.
type SignallerFunc func(pid int, sig syscall.Signal) error

// Signal calls f.
func (f SignallerFunc) Signal(pid int, sig syscall.Signal) error { return f(pid, sig) }

// KillSignaller signals real processes: through a pidfd opened before the
// identity re-check (procsig.Pidfd), or kill(2) on kernels without pidfds.
var KillSignaller Signaller = realSignaller{}

type realSignaller struct{}

// Signal is kill(2), for callers outside the checked path.
func (realSignaller) Signal(pid int, sig syscall.Signal) error { return unix.Kill(pid, sig) }

// Open makes realSignaller a procsig.Signaller: the checked path uses pidfds.
func (realSignaller) Open(pid int) (procsig.Handle, error) { return procsig.Pidfd.Open(pid) }

// procSignaller adapts a Signaller to package proc: one that already is a
// procsig.Signaller (the real one) is used as it is; a plain one gets a
// handle that signals by PID.
func procSignaller(sg Signaller) procsig.Signaller {
	if ps, ok := sg.(procsig.Signaller); ok {
		return ps
	}
	return pidOpener{sg}
}

type pidOpener struct{ sg Signaller }

func (o pidOpener) Open(pid int) (procsig.Handle, error) { return pidHandle{o.sg, pid}, nil }

type pidHandle struct {
	sg  Signaller
	pid int
}

func (h pidHandle) Signal(sig syscall.Signal) error { return h.sg.Signal(h.pid, sig) }
func (pidHandle) Close() error                      { return nil }

// ProcStater re-reads a process's identity right before it is signalled.
// gpu.ProcFS and gpu.Sim implement it.
type ProcStater interface {
	Stat(pid int) (gpu.ProcStat, error)
}

// target is the process the user asked to signal, as the monitor last saw
// it: the PID and the start time identify it across PID reuse.
type target struct {
	PID     int
	Start   time.Time
	Command string // display form (gpu.Printable): shown, never matched
	Memory  uint64
	Device  int
}

func (t target) identity() procsig.Identity { return procsig.Identity{PID: t.PID, StartTime: t.Start} }

// ErrRefused is wrapped by every refusal to send a signal: vram decided not
// to, as opposed to the kernel failing the call. It is procsig.ErrRefused.
var ErrRefused = procsig.ErrRefused

// checkTarget refuses targets that must never be signalled, whatever their
// identity: init, vram itself, and a process whose start time is unknown
// (the monitor could not read it, so it cannot check it).
func checkTarget(t target, self int) error { return procsig.Refuse(t.identity(), self) }

// signalChecked re-reads the target's start time, refuses when the PID now
// names another process (or none), and sends sig: procsig.Signal.
func signalChecked(st ProcStater, sg Signaller, self int, t target, sig syscall.Signal) error {
	return procsig.Signal(st, procSignaller(sg), self, t.identity(), sig)
}

func sigName(sig syscall.Signal) string { return procsig.SignalName(sig) }
