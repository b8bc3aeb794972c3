package store

// One writer per history file: an flock(2) on a lock file beside it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LockedError is Open's error, with Options.Lock, when another Store holds
// the file's lock: another process (a second vram serve on the same file)
// or this one.
type LockedError struct {
	Path string // the history file
	Lock string // its lock file
	// PID is the holder's process ID as it wrote it in the lock file; 0
	// when the file does not say (the holder is still writing it).
	PID int
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "PID " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("history file %s is in use by %s, which holds its lock %s", e.Path, holder, e.Lock)
}

// lockName is the lock file of the history file at path: path + ".lock",
// beside the file a symbolic link at path points to.
func lockName(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return path + ".lock"
}

// lock takes the exclusive lock of the history file at path and writes
// this process's PID into the lock file. The lock is an flock(2) on the
// open lock file: the kernel drops it when the file is closed or the
// process dies however it dies, so a stale lock file (left by kill -9)
// holds nothing, and a second Store, in this process or another, is
// refused while the first is open. The lock file itself stays in place.
func lock(path string) (*os.File, error) {
	name := lockName(path)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history file %s: lock: %w", path, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		pid := holderPID(f)
		f.Close()
		return nil, &LockedError{Path: path, Lock: name, PID: pid}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("history file %s: lock %s: %w", path, name, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("history file %s: lock %s: %w", path, name, err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("history file %s: lock %s: %w", path, name, err)
	}
	return f, nil
}

// holderPID reads the PID the lock's holder wrote. A holder that has just
// taken the lock may not have written it yet: a few short retries.
func holderPID(f *os.File) int {
	buf := make([]byte, 32)
	for try := 0; ; try++ {
		n, _ := f.ReadAt(buf, 0)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && pid > 0 {
			return pid
		}
		if try == 4 {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}
