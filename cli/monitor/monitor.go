// Package monitor holds the vram status and vram watch commands: one screen
// of who holds GPU memory, and a sampled stream of it. Both sit on package
// gpu (NVML and /proc, or a simulated host with --simulate N) and only read.
//
// Output conventions (see docs/monitor.md for the schemas): human tables on
// stdout, warnings on stderr; --json is versioned (vram.status/v1,
// vram.watch/v1) with sizes in bytes and RFC 3339 times; --csv has a header
// row and a simulated column. A simulated host is labelled in every format.
//
// When NVML is missing the commands fail with one line that says what is
// missing and that --simulate N still works; nothing panics.
package monitor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
)

// Env is what the commands take from the outside world; tests replace it.
type Env struct {
	OpenHost   func() (gpu.Host, error)
	ProcRoot   string
	LookupUser func(uid uint32) (string, error) // nil: the host's user database
	Now        func() time.Time
	Getenv     func(string) (string, bool)
	Hostname   func() (string, error)
}

var env = Env{
	OpenHost: func() (gpu.Host, error) { return gpu.OpenNVML() },
	ProcRoot: "/proc",
	Now:      time.Now,
	Getenv:   os.LookupEnv,
	Hostname: os.Hostname,
}

// hostFlags are the flags status and watch share.
type hostFlags struct {
	simulate   int
	seed       int64
	allGPUs    bool
	gpus       []int
	idleWindow time.Duration
}

func (f *hostFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&f.simulate, "simulate", 0, "run against a simulated host of `N` GPUs (synthetic processes; no driver needed)")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the simulated host")
	fl.BoolVar(&f.allGPUs, "all-gpus", false, "show every GPU, ignoring CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES")
	fl.IntSliceVar(&f.gpus, "gpu", nil, "show only these GPU `indices` (comma-separated)")
	fl.DurationVar(&f.idleWindow, "idle-window", 30*time.Second, "a process with no GPU activity for this long is flagged idle")
}

// session is the open host with its sampler and selected GPUs, and the
// warnings to print.
type session struct {
	*gpu.Opened
	warnings []string
}

func (f *hostFlags) open() (*session, error) {
	if f.simulate < 0 || f.simulate > 64 {
		return nil, cmdutil.Usagef("--simulate %d: must be between 1 and 64 GPUs", f.simulate)
	}
	if f.idleWindow <= 0 {
		return nil, cmdutil.Usagef("--idle-window %v: must be positive", f.idleWindow)
	}
	op, err := gpu.Open(gpu.OpenOptions{
		Simulate: f.simulate, Seed: f.seed, GPUs: f.gpus, AllGPUs: f.allGPUs, IdleWindow: f.idleWindow,
		OpenNVML: env.OpenHost, ProcRoot: env.ProcRoot, LookupUser: env.LookupUser,
		Getenv: env.Getenv, Hostname: env.Hostname, Now: env.Now,
	})
	var ie *gpu.IndexError
	switch {
	case gpu.IsNoDriver(err):
		return nil, fmt.Errorf("%w; nothing to monitor here (`--simulate N` shows a simulated host of N GPUs; vram replay and the allocator's simulated device work without a GPU)", err)
	case errors.As(err, &ie):
		return nil, cmdutil.Usagef("--gpu %d: this host has %d GPUs (0-%d)", ie.Index, ie.Count, ie.Count-1)
	case err != nil:
		return nil, err
	}
	s := &session{Opened: op}
	if op.ProcErr != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("processes are not enriched from /proc: %v", op.ProcErr))
	}
	s.warnings = append(s.warnings, op.Warnings...)
	return s, nil
}

func warn(w io.Writer, msgs []string) {
	for _, m := range msgs {
		fmt.Fprintf(w, "vram: warning: %s\n", m)
	}
}

// Commands returns the monitor's top-level commands.
func Commands() []func() *cobra.Command {
	return []func() *cobra.Command{NewCmdStatus, NewCmdWatch}
}

var errNoDevices = errors.New("no GPU to show")

// bar draws used (#), reserved (=) and free (.) memory in width cells.
func bar(m gpu.Memory, width int) string {
	if m.Total == 0 {
		return "[" + strings.Repeat("?", width) + "]"
	}
	cells := func(v uint64) int { return int((v*uint64(width) + m.Total/2) / m.Total) }
	used := cells(m.Used)
	res := cells(m.Reserved)
	if used+res > width {
		res = max(0, width-used)
	}
	return "[" + strings.Repeat("#", used) + strings.Repeat("=", res) + strings.Repeat(".", width-used-res) + "]"
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"
