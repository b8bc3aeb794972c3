package top

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/vramhq/vram/gpu"
)

// Signaller sends a signal to a process. The real one is kill(2); tests and
// simulated hosts use fakes that never touch a real process.
type Signaller interface {
	Signal(pid int, sig syscall.Signal) error
}

// SignallerFunc adapts a function to Signaller.
type SignallerFunc func(pid int, sig syscall.Signal) error

// Signal calls f.
func (f SignallerFunc) Signal(pid int, sig syscall.Signal) error { return f(pid, sig) }

// KillSignaller signals real processes with kill(2).
var KillSignaller Signaller = SignallerFunc(syscall.Kill)

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

// ErrRefused is wrapped by every refusal to send a signal: vram decided not
// to, as opposed to the kernel failing the call.
var ErrRefused = errors.New("refused")

// checkTarget refuses targets that must never be signalled, whatever their
// identity: init, vram itself, and a process whose start time is unknown
// (the monitor could not read it, so it cannot check it).
func checkTarget(t target, self int) error {
	switch {
	case t.PID <= 1:
		return fmt.Errorf("PID %d is init (or not a process): vram never signals it: %w", t.PID, ErrRefused)
	case t.PID == self:
		return fmt.Errorf("PID %d is vram itself: %w", t.PID, ErrRefused)
	case t.Start.IsZero():
		return fmt.Errorf("PID %d is not visible in /proc (another PID namespace, or it exited), so its identity cannot be checked; try `sudo lsof /dev/nvidia*` on the host: %w", t.PID, ErrRefused)
	}
	return nil
}

// signalChecked re-reads the target's start time, refuses when the PID now
// names another process (or none), and sends sig. The window between the
// check and kill(2) is as short as two system calls; a pidfd would close it
// and is not used yet.
func signalChecked(st ProcStater, sg Signaller, self int, t target, sig syscall.Signal) error {
	if err := checkTarget(t, self); err != nil {
		return err
	}
	cur, err := st.Stat(t.PID)
	if errors.Is(err, gpu.ErrNoProcess) {
		return fmt.Errorf("PID %d has exited: nothing signalled: %w", t.PID, ErrRefused)
	}
	if err != nil {
		return fmt.Errorf("re-check PID %d before signalling: %v: %w", t.PID, err, ErrRefused)
	}
	if !cur.StartTime.Equal(t.Start) {
		return fmt.Errorf("PID %d is now a different process (%s, started %s; expected start %s): %w",
			t.PID, cur.Comm, cur.StartTime.Format(time.DateTime), t.Start.Format(time.DateTime), ErrRefused)
	}
	if err := sg.Signal(t.PID, sig); err != nil {
		switch {
		case errors.Is(err, syscall.EPERM):
			return fmt.Errorf("%s to PID %d: not permitted (it belongs to another user; run vram as that user or root): %w", sigName(sig), t.PID, err)
		case errors.Is(err, syscall.ESRCH):
			return fmt.Errorf("%s to PID %d: it exited meanwhile: %w", sigName(sig), t.PID, err)
		}
		return fmt.Errorf("%s to PID %d: %w", sigName(sig), t.PID, err)
	}
	return nil
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return fmt.Sprintf("signal %d", int(sig))
}
