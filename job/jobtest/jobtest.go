// Package jobtest provides fake jobs and a fake memory source for tests of
// package job and of the commands built on it, so that supervision, OOM
// diagnosis, limits and the batch search run without a GPU.
//
// A fake job is the test binary itself, re-executed with VRAM_FAKEJOB set:
// TestMain calls Main first, which runs the job named by the arguments and
// exits. A fake job "uses memory" by writing its byte count to a file named
// after its PID in the directory VRAM_FAKEJOB_DIR; FileSource reads that
// directory as a driver would list processes, ignoring PIDs that have
// exited, so the supervisor sees exactly what the job announced.
//
// Jobs (the arguments after the executable):
//
//	exit N                   exit with status N
//	stderr FILE N            copy FILE to standard error, exit N
//	remove PATH N            remove PATH and all it holds, exit N
//	mem BYTES MS             hold BYTES for MS milliseconds, exit 0
//	leak START STEP MS TOTAL hold START, add STEP every MS ms, for TOTAL ms, exit 0
//	signals                  print "ready", then on SIGINT, SIGTERM, SIGHUP,
//	                         SIGQUIT, SIGUSR1 or SIGUSR2 print "got NAME" and exit 42
//	stubborn BYTES           hold BYTES, ignore SIGTERM, run until killed
//	spawn N BYTES MS         start N children (mem BYTES MS), hold BYTES too,
//	                         wait for them, exit 0
//	batch N                  hold A+B·N bytes (VRAM_FAKEJOB_A, _B) for 100 ms
//	                         and exit 0 when that is at most VRAM_FAKEJOB_CAP;
//	                         otherwise hold up to the capacity, print PyTorch's
//	                         OOM message with the figures and exit 1;
//	                         above VRAM_FAKEJOB_FAIL_ABOVE (when set) it
//	                         fails otherwise: a Python ImportError, exit 1;
//	                         with VRAM_FAKEJOB_BARE=1 its OOM message states
//	                         no sizes ("CUDA error: out of memory")
//
// The batch job also reads N from the variable VRAM_BATCH when no argument
// is given, and prints "attempt K" first when VRAM_RUN_ATTEMPT is K.
package jobtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/job"
)

// Env is the variable that marks a fake job.
const Env = "VRAM_FAKEJOB"

// DirEnv names the directory where fake jobs announce their memory.
const DirEnv = "VRAM_FAKEJOB_DIR"

// Main runs a fake job and exits when the process is one; otherwise it
// returns. Call it first in TestMain.
func Main() {
	if os.Getenv(Env) == "" {
		return
	}
	os.Exit(run(os.Args[1:]))
}

// Command returns the arguments that start fake job args through the test
// binary, and the environment to give it (the current one plus the marker
// and dir).
func Command(dir string, args ...string) ([]string, []string) {
	env := append(os.Environ(), Env+"=1", DirEnv+"="+dir)
	return append([]string{os.Args[0]}, args...), env
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakejob: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

func atou(s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakejob: %q is not a number\n", s)
		os.Exit(2)
	}
	return n
}

// hold announces that this process holds b bytes.
func hold(b uint64) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return
	}
	name := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	tmp := name + ".tmp"
	os.WriteFile(tmp, []byte(strconv.FormatUint(b, 10)), 0o644)
	os.Rename(tmp, name)
}

func release() {
	if dir := os.Getenv(DirEnv); dir != "" {
		os.Remove(filepath.Join(dir, strconv.Itoa(os.Getpid())))
	}
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "fakejob: no job named")
		return 2
	}
	need := func(n int) {
		if len(args) != n+1 {
			fmt.Fprintf(os.Stderr, "fakejob: %s takes %d arguments\n", args[0], n)
			os.Exit(2)
		}
	}
	switch args[0] {
	case "exit":
		need(1)
		return atoi(args[1])
	case "stderr":
		need(2)
		f, err := os.Open(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		io.Copy(os.Stderr, f)
		return atoi(args[2])
	case "remove":
		need(2)
		if err := os.RemoveAll(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return atoi(args[2])
	case "mem":
		need(2)
		hold(atou(args[1]))
		time.Sleep(time.Duration(atoi(args[2])) * time.Millisecond)
		release()
		return 0
	case "leak":
		need(4)
		b, step := atou(args[1]), atou(args[2])
		period := time.Duration(atoi(args[3])) * time.Millisecond
		end := time.Now().Add(time.Duration(atoi(args[4])) * time.Millisecond)
		for time.Now().Before(end) {
			hold(b)
			time.Sleep(period)
			b += step
		}
		release()
		return 0
	case "signals":
		need(0)
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
		fmt.Println("ready")
		sig := <-ch
		fmt.Printf("got %s\n", job.SignalName(sig.(syscall.Signal)))
		return 42
	case "stubborn":
		need(1)
		signal.Ignore(syscall.SIGTERM)
		hold(atou(args[1]))
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	case "spawn":
		need(3)
		n := atoi(args[1])
		var cmds []*exec.Cmd
		for range n {
			c := exec.Command(os.Args[0], "mem", args[2], args[3])
			c.Stdout, c.Stderr = os.Stdout, os.Stderr
			if err := c.Start(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			cmds = append(cmds, c)
		}
		hold(atou(args[2]))
		for _, c := range cmds {
			c.Wait()
		}
		release()
		return 0
	case "batch":
		var n int
		switch len(args) {
		case 1:
			n = atoi(os.Getenv("VRAM_BATCH"))
		case 2:
			n = atoi(args[1])
		default:
			need(1)
		}
		return batch(n)
	}
	fmt.Fprintf(os.Stderr, "fakejob: unknown job %q\n", args[0])
	return 2
}

func envU(name string) uint64 {
	v, err := strconv.ParseUint(os.Getenv(name), 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakejob: %s=%q is not a number\n", name, os.Getenv(name))
		os.Exit(2)
	}
	return v
}

func batch(n int) int {
	if v := os.Getenv("VRAM_RUN_ATTEMPT"); v != "" {
		fmt.Printf("attempt %s\n", v)
	}
	if v := os.Getenv("VRAM_FAKEJOB_FAIL_ABOVE"); v != "" && uint64(n) > envU("VRAM_FAKEJOB_FAIL_ABOVE") {
		fmt.Fprintf(os.Stderr, "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    from model import Net\n")
		fmt.Fprintf(os.Stderr, "ImportError: cannot import name 'Net' from 'model' (batch %d)\n", n)
		return 1
	}
	a, b, capacity := envU("VRAM_FAKEJOB_A"), envU("VRAM_FAKEJOB_B"), envU("VRAM_FAKEJOB_CAP")
	need := a + b*uint64(n)
	if need <= capacity {
		hold(need)
		time.Sleep(100 * time.Millisecond)
		release()
		fmt.Printf("batch %d fits: %d bytes\n", n, need)
		return 0
	}
	// Hold what fits, then fail the way PyTorch does.
	held := capacity - capacity%(2<<20)
	hold(held)
	time.Sleep(60 * time.Millisecond)
	tried := need - held
	if os.Getenv("VRAM_FAKEJOB_BARE") == "1" {
		fmt.Fprintf(os.Stderr, "RuntimeError: CUDA error: out of memory\n")
		release()
		return 1
	}
	fmt.Fprintf(os.Stderr, "Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n")
	fmt.Fprintf(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s. GPU 0 has a total capacity of %s of which %s is free. Including non-PyTorch memory, this process has %s memory in use. Of the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n",
		torchSize(tried), torchSize(capacity), torchSize(capacity-held), torchSize(held), torchSize(held), torchSize(0))
	release()
	return 1
}

// torchSize formats like PyTorch's format_size.
var torchSize = units.Torch.Format

// FileSource is a job.Source over a directory where fake jobs announce
// their memory (one file per PID holding a decimal byte count), on one
// simulated device. PIDs that no longer run (or are zombies) are not
// listed, like a driver's process list. Others are processes outside any
// job that hold memory on the device (use PIDs of live processes, such
// as 1). Base is memory used on the device by nobody listed.
type FileSource struct {
	Dir    string
	Device job.Device
	Others []job.ProcMemory
	Base   uint64

	mu sync.Mutex
}

// NewFileSource returns a FileSource on dir with one device of total bytes.
func NewFileSource(dir string, total uint64) *FileSource {
	return &FileSource{Dir: dir, Device: job.Device{Index: 0, UUID: "GPU-fake-0", Name: "Fake GPU", Total: total}}
}

// Devices lists the one device.
func (s *FileSource) Devices() []job.Device { return []job.Device{s.Device} }

// Read lists the announced memory of live processes.
func (s *FileSource) Read(r *job.Reading) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Procs = r.Procs[:0]
	used := s.Base
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return fmt.Errorf("fake source: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.Dir, e.Name()))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		r.Procs = append(r.Procs, job.ProcMemory{PID: pid, Device: 0, Bytes: v})
		used += v
	}
	for _, o := range s.Others {
		r.Procs = append(r.Procs, o)
		used += o.Bytes
	}
	r.Used = []uint64{min(used, s.Device.Total)}
	return nil
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}
