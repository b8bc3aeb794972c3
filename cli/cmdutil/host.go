package cmdutil

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// MaxSimulate is the most GPUs --simulate takes.
const MaxSimulate = 64

// DefaultIdleWindow is --idle-window's default.
const DefaultIdleWindow = 30 * time.Second

// HostFlags are the flags that choose the host a command looks at and its
// GPUs, the same for every command that opens one:
//
//	--simulate N   a simulated host of N GPUs instead of the driver
//	--seed S       the simulated host's seed
//	--gpu LIST     these GPU indices only
//	--all-gpus     every GPU, ignoring CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES
//	--idle-window  (RegisterIdleWindow) how long without activity makes a process idle
//
// Open checks them, opens the host through the Factory and maps its errors
// into the user's terms.
type HostFlags struct {
	Simulate int
	Seed     int64
	GPUs     []int
	AllGPUs  bool
	// IdleWindow is the sampler's: --idle-window where the command has
	// it (which must then be positive), else what the command sets (0:
	// package gpu's default).
	IdleWindow time.Duration
	// AllowNoGPU lets Open return a host on which the visible-devices
	// variables select no GPU (vram status then says so); without it that
	// is an error.
	AllowNoGPU bool
	// RemoveStaleChannel removes the allocator statistics channel's files
	// of processes that are gone (gpu.OpenOptions.RemoveStaleChannel):
	// what the daemon does, running long as the user or root.
	RemoveStaleChannel bool

	cmd        *cobra.Command
	idleWindow bool // --idle-window is registered
}

// Register adds --simulate, --seed, --gpu and --all-gpus to cmd.
func (h *HostFlags) Register(cmd *cobra.Command) {
	h.cmd = cmd
	fl := cmd.Flags()
	fl.IntVar(&h.Simulate, "simulate", 0, "use a simulated host of `N` GPUs instead of the driver (synthetic processes; nothing real is signalled)")
	fl.Int64Var(&h.Seed, "seed", 1, "seed of the simulated host")
	fl.IntSliceVar(&h.GPUs, "gpu", nil, "only these GPU `indices` (comma-separated), ignoring CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES")
	fl.BoolVar(&h.AllGPUs, "all-gpus", false, "every GPU, ignoring CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES")
}

// RegisterIdleWindow adds --idle-window to cmd.
func (h *HostFlags) RegisterIdleWindow(cmd *cobra.Command) {
	h.idleWindow = true
	cmd.Flags().DurationVar(&h.IdleWindow, "idle-window", DefaultIdleWindow, "a process with no GPU activity for this long is flagged idle")
}

// Check returns a usage error for flag values Open would refuse, so that a
// command can check every flag before it starts anything.
func (h *HostFlags) Check() error {
	switch {
	case h.Simulate < 0 || h.Simulate > MaxSimulate:
		return Usagef("--simulate %d: must be between 1 and %d GPUs (0: the real driver)", h.Simulate, MaxSimulate)
	case len(h.GPUs) > 0 && h.AllGPUs:
		return Usagef("--gpu and --all-gpus: choose one")
	case h.IdleWindow < 0 || h.idleWindow && h.IdleWindow == 0:
		return Usagef("--idle-window %v: must be positive", h.IdleWindow)
	}
	return nil
}

// Host is a host opened by HostFlags.Open: the GPUs and the sampler of
// gpu.Open, and how to signal its processes.
type Host struct {
	*gpu.Opened
	Simulated bool
	// Signaller signals the host's processes through package proc: the
	// Factory's on a real host whose /proc can be read; on a simulated
	// host one that sends nothing (its PIDs may name real processes on
	// this machine); nil when /proc cannot be read (ProcErr), since no
	// identity can then be checked.
	Signaller proc.Signaller
}

// Info describes the host.
func (h *Host) Info() gpu.HostInfo { return h.Opened.Host.Info() }

// Close closes the host.
func (h *Host) Close() error { return h.Opened.Host.Close() }

// Open checks the flags and opens the host they name (f.OpenHost). A
// missing driver says what is missing and points to --simulate; a --gpu
// index the host does not have is a usage error; a selection of no GPU is
// an error unless AllowNoGPU.
func (h *HostFlags) Open(f *Factory) (*Host, error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	op, err := f.OpenHost(gpu.OpenOptions{
		Simulate: h.Simulate, Seed: h.Seed, GPUs: h.GPUs, AllGPUs: h.AllGPUs, IdleWindow: h.IdleWindow,
		OpenNVML: f.OpenNVML, ProcRoot: f.ProcRoot, LookupUser: f.LookupUser,
		Getenv: f.Getenv, Hostname: f.Hostname, Now: f.Now, ChannelDir: f.ChannelDir,
		RemoveStaleChannel: h.RemoveStaleChannel,
	})
	var ie *gpu.IndexError
	switch {
	case gpu.IsNoDriver(err):
		return nil, fmt.Errorf("%w; `%s --simulate N` runs on a simulated host of N GPUs", err, h.commandPath())
	case errors.As(err, &ie):
		return nil, Usagef("--gpu %d: this host has %d GPUs (0-%d)", ie.Index, ie.Count, ie.Count-1)
	case err != nil:
		return nil, err
	}
	if !h.AllowNoGPU && !op.Visible.All && len(op.Shown) == 0 {
		op.Host.Close()
		return nil, fmt.Errorf("%s selects no GPU; --all-gpus shows every GPU", op.Visible.Source)
	}
	host := &Host{Opened: op, Simulated: op.Host.Info().Simulated}
	switch {
	case host.Simulated:
		host.Signaller = noSignals{}
	case op.Procs != nil:
		host.Signaller = f.Signaller
	}
	return host, nil
}

func (h *HostFlags) commandPath() string {
	if h.cmd == nil {
		return "vram"
	}
	return h.cmd.CommandPath()
}

// noSignals is the signaller of a simulated host: it sends nothing.
type noSignals struct{}

func (noSignals) Open(int) (proc.Handle, error) { return noSignals{}, nil }
func (noSignals) Signal(syscall.Signal) error   { return nil }
func (noSignals) Close() error                  { return nil }
