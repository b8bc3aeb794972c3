package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// fakeProc writes a minimal proc file system: the boot time and one
// /proc/PID/stat per process.
func fakeProc(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1 2 3 4 5 6 7 8 9 10\nbtime 1764460800\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func writeStat(t *testing.T, root string, pid int, comm string, ticks uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194304 100 0 0 0 10 5 0 0 20 0 1 0 %d 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
		pid, comm, pid, pid, ticks)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recorder is a proc.Signaller that records the PIDs signalled.
type recorder struct{ sent []int }

type recorded struct {
	r   *recorder
	pid int
}

func (r *recorder) Open(pid int) (proc.Handle, error) { return recorded{r, pid}, nil }
func (h recorded) Signal(syscall.Signal) error        { h.r.sent = append(h.r.sent, h.pid); return nil }
func (recorded) Close() error                         { return nil }

// TestIdentityFromProcFS runs the checked path over a fake /proc read by
// gpu.ProcFS, the reader vram reclaim and vram top use.
func TestIdentityFromProcFS(t *testing.T) {
	root := fakeProc(t)
	writeStat(t, root, 4100, "python", 5000)
	fs, err := gpu.NewProcFS(root, func(uint32) (string, error) { return "alice", nil })
	if err != nil {
		t.Fatal(err)
	}
	seen, err := fs.Stat(4100)
	if err != nil {
		t.Fatal(err)
	}
	id := proc.Identity{PID: 4100, StartTime: seen.StartTime} // what a sample records

	sg := &recorder{}
	if err := proc.Signal(fs, sg, 1, id, syscall.SIGTERM); err != nil || len(sg.sent) != 1 {
		t.Fatalf("same process: err %v, sent %v", err, sg.sent)
	}
	// The process exits and its PID goes to another one, started later.
	writeStat(t, root, 4100, "sshd", 9000)
	err = proc.Signal(fs, sg, 1, id, syscall.SIGTERM)
	if !errors.Is(err, proc.ErrRefused) || !errors.Is(err, proc.ErrGone) || len(sg.sent) != 1 {
		t.Fatalf("reused PID: err %v, sent %v", err, sg.sent)
	}
	if alive, err := proc.Alive(fs, id); alive || err != nil {
		t.Errorf("Alive after reuse = %v, %v", alive, err)
	}
	// It is gone altogether.
	if err := os.RemoveAll(filepath.Join(root, "4100")); err != nil {
		t.Fatal(err)
	}
	err = proc.Signal(fs, sg, 1, id, syscall.SIGTERM)
	if !errors.Is(err, proc.ErrGone) || len(sg.sent) != 1 {
		t.Fatalf("exited: err %v, sent %v", err, sg.sent)
	}
}

// TestPidfdRealProcess signals a real child through the real path.
func TestPidfdRealProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	defer cmd.Process.Kill()
	fs, err := gpu.NewProcFS("/proc", nil)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	st, err := fs.Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	wrong := proc.Identity{PID: st.PID, StartTicks: st.StartTicks + 1}
	if err := proc.Signal(fs, proc.Pidfd, os.Getpid(), wrong, syscall.SIGKILL); !errors.Is(err, proc.ErrRefused) {
		t.Fatalf("signal with a wrong start time: err = %v, want a refusal", err)
	}
	id := proc.Identity{PID: st.PID, StartTicks: st.StartTicks, StartTime: st.StartTime}
	if err := proc.Signal(fs, proc.Pidfd, os.Getpid(), id, syscall.SIGKILL); err != nil {
		t.Fatalf("signal: %v", err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
}
