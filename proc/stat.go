package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

// ErrNoProcess is wrapped by the errors of a Stater (and of gpu.ProcSource)
// for a PID with no process.
var ErrNoProcess = errors.New("no such process")

// UserHZ is the kernel's clock tick rate as /proc reports it (USER_HZ is
// 100 on every Linux architecture that runs NVIDIA GPUs): StartTicks are in
// these.
const UserHZ = 100

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

// Started returns the wall-clock time of ticks clock ticks after boot.
func Started(boot time.Time, ticks uint64) time.Time {
	return boot.Add(time.Duration(ticks) * time.Second / UserHZ)
}

// ReadStat reads /proc/PID/stat under root ("/proc" normally). StartTime is
// left zero: the boot time is the caller's (Started). buf is scratch space
// the caller may pass again on the next call to save an allocation (nil is
// fine); ReadStat returns it, grown when needed. A PID with no process
// (or one that exits during the read) yields ErrNoProcess itself, so that
// the caller names the PID as it sees fit.
func ReadStat(root string, pid int, buf []byte) (Stat, []byte, error) {
	path := root + "/" + strconv.Itoa(pid) + "/stat"
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, buf, ErrNoProcess
		}
		return Stat{}, buf, fmt.Errorf("read %s: %w", path, err)
	}
	buf = buf[:cap(buf)]
	if len(buf) < 1024 {
		buf = make([]byte, 1024)
	}
	n, err := f.Read(buf)
	f.Close()
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return Stat{}, buf, ErrNoProcess
		}
		return Stat{}, buf, fmt.Errorf("read %s: %w", path, err)
	}
	st, err := ParseStat(buf[:n])
	if err != nil {
		return Stat{}, buf, fmt.Errorf("%s: %w", path, err)
	}
	return st, buf, nil
}

// ParseStat parses the text of /proc/PID/stat. The command name may contain
// spaces and parentheses, so the fields are counted from the last ')'.
// StartTime is left zero.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return Stat{}, errors.New("malformed stat: no (comm)")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("malformed stat: pid: %w", err)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : closing])}
	// Fields after ")": state(3) ppid(4) pgrp(5) session(6) tty(7)
	// tpgid(8) flags(9) minflt(10) cminflt(11) majflt(12) cmajflt(13)
	// utime(14) stime(15) cutime(16) cstime(17) priority(18) nice(19)
	// threads(20) itrealvalue(21) starttime(22).
	fields := bytes.Fields(b[closing+1:])
	if len(fields) < 20 {
		return Stat{}, fmt.Errorf("malformed stat: %d fields after comm, want at least 20", len(fields))
	}
	if len(fields[0]) != 1 {
		return Stat{}, fmt.Errorf("malformed stat: state %q", fields[0])
	}
	st.State = string(fields[0])
	if st.PPID, err = strconv.Atoi(string(fields[1])); err != nil {
		return Stat{}, fmt.Errorf("malformed stat: ppid: %w", err)
	}
	if st.Session, err = strconv.Atoi(string(fields[3])); err != nil {
		return Stat{}, fmt.Errorf("malformed stat: session: %w", err)
	}
	if st.StartTicks, err = strconv.ParseUint(string(fields[19]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("malformed stat: starttime: %w", err)
	}
	return st, nil
}
