// Package proc is what vram knows of a process from /proc: its identity
// (Stat: PID, start time, parent, state; ErrNoProcess when there is none),
// the terminal-safe form of the strings read there (Printable), and the
// checked path that signals processes vram identified earlier, and only them.
//
// A PID alone does not name a process: between the moment a command saw a
// process (in a GPU sample, a job's tree, a screen of vram top) and the
// moment it signals it, the process may have exited and its PID been given
// to an unrelated one. Every signal vram sends therefore goes through
// Signal, which
//
//  1. refuses what must never be signalled whatever its identity: PID 1 (and
//     anything not a process), vram itself, and a process whose start time
//     is unknown (it cannot be checked);
//  2. opens a handle on the PID first (a pidfd on Linux 5.3 and later);
//  3. re-reads the process's start time and refuses when it differs from the
//     one recorded when the process was chosen, or when the process is gone;
//  4. sends the signal through the handle.
//
// With a pidfd the handle refers to the process that existed at step 2, so
// a PID reused after step 3 is never hit: if the start time read at step 3
// matches, the pidfd names the checked process. Without pidfds (older
// kernels) the handle falls back to kill(2) and the window shrinks to the
// two system calls between steps 3 and 4.
//
// The outside world sits behind two small interfaces so that callers test
// the whole path without touching a real process: Stater (gpu.ProcFS and
// gpu.Sim implement it) and Signaller (Pidfd is the real one).
package proc

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Identity names one process across PID reuse: the PID and the start time.
// StartTicks (clock ticks after boot, exact) is compared when both sides
// know it; otherwise StartTime is.
type Identity struct {
	PID        int
	StartTicks uint64
	StartTime  time.Time
}

// Stater re-reads a process's /proc/PID/stat. A process that does not exist
// yields an error wrapping ErrNoProcess.
type Stater interface {
	Stat(pid int) (Stat, error)
}

// Handle is an open reference to a process that signals can be sent through.
type Handle interface {
	Signal(sig syscall.Signal) error
	Close() error
}

// Signaller opens handles on processes. Open of a PID with no process
// returns an error wrapping ErrGone.
type Signaller interface {
	Open(pid int) (Handle, error)
}

var (
	// ErrRefused is wrapped by every refusal: vram decided not to signal,
	// as opposed to the kernel failing the call.
	ErrRefused = errors.New("refused")
	// ErrGone is wrapped when the process has exited (or its PID now names
	// another process): there is nothing left to signal.
	ErrGone = errors.New("process gone")
)

// Refuse returns an error wrapping ErrRefused for a process vram must never
// signal: PID 1 or below, self (vram's own PID), or an unknown start time.
func Refuse(id Identity, self int) error {
	switch {
	case id.PID <= 1:
		return fmt.Errorf("PID %d is init (or not a process): vram never signals it: %w", id.PID, ErrRefused)
	case id.PID == self:
		return fmt.Errorf("PID %d is vram itself: %w", id.PID, ErrRefused)
	case id.StartTicks == 0 && id.StartTime.IsZero():
		return fmt.Errorf("PID %d is not visible in /proc (another PID namespace, or it exited), so its identity cannot be checked; try `sudo lsof /dev/nvidia*` on the host: %w", id.PID, ErrRefused)
	}
	return nil
}

// Same reports whether st describes the process id names.
func Same(id Identity, st Stat) bool {
	if st.PID != id.PID {
		return false
	}
	if id.StartTicks != 0 && st.StartTicks != 0 {
		return id.StartTicks == st.StartTicks
	}
	return !id.StartTime.IsZero() && id.StartTime.Equal(st.StartTime)
}

// Alive reports whether the process id names still exists (a zombie counts
// as gone: it holds nothing but its exit status).
func Alive(st Stater, id Identity) (bool, error) {
	cur, err := st.Stat(id.PID)
	if errors.Is(err, ErrNoProcess) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("re-read PID %d: %w", id.PID, err)
	}
	if !Same(id, cur) {
		return false, nil
	}
	return cur.State != "Z" && cur.State != "X", nil
}

// Signal sends sig to the process id names, after the checks described in
// the package documentation. A process that has exited, or whose PID now
// names another process, yields an error wrapping both ErrRefused and
// ErrGone; nothing is sent then.
func Signal(st Stater, sg Signaller, self int, id Identity, sig syscall.Signal) error {
	if err := Refuse(id, self); err != nil {
		return err
	}
	h, err := sg.Open(id.PID)
	if errors.Is(err, ErrGone) {
		return fmt.Errorf("PID %d has exited: nothing signalled: %w (%w)", id.PID, ErrRefused, ErrGone)
	}
	if err != nil {
		return fmt.Errorf("open PID %d: %w", id.PID, err)
	}
	defer h.Close()
	cur, err := st.Stat(id.PID)
	if errors.Is(err, ErrNoProcess) {
		return fmt.Errorf("PID %d has exited: nothing signalled: %w (%w)", id.PID, ErrRefused, ErrGone)
	}
	if err != nil {
		return fmt.Errorf("re-check PID %d before signalling: %v: %w", id.PID, err, ErrRefused)
	}
	if !Same(id, cur) {
		return fmt.Errorf("PID %d is now a different process (%s, started %s; expected start %s): nothing signalled: %w (%w)",
			id.PID, Printable(cur.Comm), cur.StartTime.Format(time.DateTime), id.StartTime.Format(time.DateTime), ErrRefused, ErrGone)
	}
	if err := h.Signal(sig); err != nil {
		switch {
		case errors.Is(err, syscall.EPERM):
			return fmt.Errorf("%s to PID %d: not permitted (it belongs to another user; run vram as that user or root): %w", SignalName(sig), id.PID, err)
		case errors.Is(err, syscall.ESRCH):
			return fmt.Errorf("%s to PID %d: it exited meanwhile: %w (%w)", SignalName(sig), id.PID, err, ErrGone)
		}
		return fmt.Errorf("%s to PID %d: %w", SignalName(sig), id.PID, err)
	}
	return nil
}

// SignalName is "SIGTERM", "SIGKILL", ... for the signals vram sends.
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// Pidfd is the real Signaller: a pidfd where the kernel has them, kill(2)
// otherwise.
var Pidfd Signaller = pidfdSignaller{}

type pidfdSignaller struct{}

func (pidfdSignaller) Open(pid int) (Handle, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return pidfd(fd), nil
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, ErrGone)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		return killHandle(pid), nil // kernel without pidfds, or a seccomp filter
	}
	return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
}

type pidfd int

func (fd pidfd) Signal(sig syscall.Signal) error {
	return unix.PidfdSendSignal(int(fd), unix.Signal(sig), nil, 0)
}
func (fd pidfd) Close() error { return unix.Close(int(fd)) }

type killHandle int

func (pid killHandle) Signal(sig syscall.Signal) error { return unix.Kill(int(pid), unix.Signal(sig)) }
func (killHandle) Close() error                        { return nil }
