package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const lockEnv = "VRAM_STORE_LOCK_HOLDER"

// TestLockHolder is the child of TestLockAcrossProcesses: it opens the file
// with the lock, says so, and keeps it until its stdin closes or it is
// killed.
func TestLockHolder(t *testing.T) {
	path := os.Getenv(lockEnv)
	if path == "" {
		t.Skip("runs only as the child of TestLockAcrossProcesses")
	}
	s, err := Open(context.Background(), path, Options{Lock: true})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	if err := s.WriteTick(context.Background(), tickAt(t0, 1)); err != nil {
		fmt.Println("write:", err)
		os.Exit(2)
	}
	fmt.Println("locked")
	done := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // never outlive a lost parent
	}
	s.Close()
	os.Exit(0)
}

// startHolder runs TestLockHolder on path and waits until it holds the
// lock.
func startHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolder$", "-test.v=false")
	cmd.Env = append(os.Environ(), lockEnv+"="+path)
	if _, err := cmd.StdinPipe(); err != nil { // kept open: the child waits on it
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("the holder: %q, %v", line, err)
	}
	return cmd
}

func wantLocked(t *testing.T, err error, path string, pid int) {
	t.Helper()
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second open: %v, want a LockedError", err)
	}
	if le.PID != pid || le.Path != path || le.Lock != path+".lock" {
		t.Errorf("LockedError = %+v, want PID %d on %s", le, pid, path)
	}
	want := fmt.Sprintf("history file %s is in use by PID %d, which holds its lock %s.lock", path, pid, path)
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestLockAcrossProcesses holds the lock in a child process: a second
// writer here is refused with the child's PID, a reader is not; once the
// child is killed with SIGKILL the lock is gone with it and the file opens.
func TestLockAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	holder := startHolder(t, path)

	_, err := Open(ctx, path, Options{Lock: true})
	wantLocked(t, err, path, holder.Process.Pid)

	r, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatalf("a reader beside the writer: %v", err)
	}
	if pts, err := r.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Minute), 0); err != nil || len(pts) != 1 {
		t.Errorf("the reader sees %d points, %v; want the holder's tick", len(pts), err)
	}
	r.Close()

	holder.Process.Kill()
	holder.Wait()
	s, err := Open(ctx, path, Options{Lock: true})
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	defer s.Close()
	if b, err := os.ReadFile(path + ".lock"); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("lock file holds %q, %v; want this PID %d", b, err, os.Getpid())
	}
}

// TestLockInProcess opens one file twice in one process: the second
// writer is refused until the first is closed.
func TestLockInProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "history.db")
	first, err := Open(ctx, path, Options{Lock: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path, Options{Lock: true})
	wantLocked(t, err, path, os.Getpid())

	// Through a symbolic link it is the same file and the same lock.
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, link, Options{Lock: true})
	var le *LockedError
	if !errors.As(err, &le) || le.Lock != path+".lock" {
		t.Errorf("through a link: %v, want the lock %s.lock", err, path)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := Open(ctx, path, Options{Lock: true})
	if err != nil {
		t.Fatalf("after the first was closed: %v", err)
	}
	second.Close()
}

// TestLockReleasedOnFailedOpen: an Open that fails after taking the lock
// (here: the file is not a database) does not keep it.
func TestLockReleasedOnFailedOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), path, Options{Lock: true}); err == nil || !strings.Contains(err.Error(), "not a usable SQLite file") {
		t.Fatalf("open of junk: %v", err)
	}
	f, err := lock(path)
	if err != nil {
		t.Fatalf("the failed open kept the lock: %v", err)
	}
	f.Close()
}
