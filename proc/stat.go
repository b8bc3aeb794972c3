package proc

import (
	"errors"
	"time"
)

// ErrNoProcess is wrapped by the errors of a Stater (and of gpu.ProcSource)
// for a PID with no process.
var ErrNoProcess = errors.New("no such process")

// Stat is the part of /proc/PID/stat that names a process and places it:
// its identity (PID and start time), parent, session, state and comm.
type Stat struct {
	PID, PPID, Session int
	State              string // R, S, D, Z, X, T, ...
	Comm               string
	// StartTicks is the start time in clock ticks since boot: with the PID
	// it identifies a process across PID reuse.
	StartTicks uint64
	// StartTime is StartTicks as a wall-clock time, when the reader knows
	// the boot time; zero otherwise.
	StartTime time.Time
}
