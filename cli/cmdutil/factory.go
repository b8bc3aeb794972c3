package cmdutil

import (
	"context"
	"io"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/job"
	"github.com/vramhq/vram/proc"
)

// Factory is what the commands take from the outside world. Every NewCmd
// takes one; New returns the real one, and tests change its fields to
// fakes. Nothing in it is a package variable: two command trees built from
// two factories share nothing.
type Factory struct {
	// The streams the command tree reads and writes (the root's; a
	// command reads them with cmd.InOrStdin, OutOrStdout, ErrOrStderr).
	In  io.Reader
	Out io.Writer
	Err io.Writer

	// OpenHost opens a GPU host (gpu.Open); HostFlags.Open passes it the
	// flags and the fields below.
	OpenHost func(gpu.OpenOptions) (*gpu.Opened, error)
	// The outside world gpu.Open reads; nil or empty is the real one.
	OpenNVML   func() (gpu.Host, error)         // the driver
	ProcRoot   string                           // "/proc"; also vram run's process tree
	LookupUser func(uid uint32) (string, error) // the host's user database
	Getenv     func(string) (string, bool)      // os.LookupEnv
	Hostname   func() (string, error)           // os.Hostname
	// ChannelDir is the allocator statistics channel's directory
	// (gpu.OpenOptions.ChannelDir): "" is $VRAM_CHANNEL_DIR or /dev/shm,
	// "off" reads none.
	ChannelDir string

	// Now and Sleep are the clock.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error

	// Self is vram's own PID, never signalled.
	Self int
	// Signaller signals real processes after their identity is checked
	// again (proc.Pidfd). It must not be nil.
	Signaller proc.Signaller
	// Notify and Stop subscribe to signals sent to vram (os/signal's).
	Notify func(c chan<- os.Signal, sig ...os.Signal)
	Stop   func(c chan<- os.Signal)
	// IsTerminal reports whether a stream is a terminal (IsTerminal).
	IsTerminal func(stream any) bool
	// Foreground reports whether vram is in the foreground process group
	// of the terminal on fd.
	Foreground func(fd int) bool

	// MemorySource opens what vram run and vram fit read GPU memory from:
	// by default the driver (OpenNVML). An error means no memory figures;
	// its message says why.
	MemorySource func() (src job.Source, closeFn func(), err error)
	// Subreaper makes vram run the subreaper of its job's processes, so
	// that orphaned workers stay in the tree it watches.
	Subreaper bool
	// FallbackDirs are where vram run puts a result, in order, when its
	// file cannot be written at the end.
	FallbackDirs func() []string
}

// New returns the factory of the real world, on stdin, stdout and stderr.
func New() *Factory {
	f := &Factory{
		In:         os.Stdin,
		Out:        os.Stdout,
		Err:        os.Stderr,
		OpenHost:   gpu.Open,
		ProcRoot:   "/proc",
		Now:        time.Now,
		Sleep:      sleep,
		Self:       os.Getpid(),
		Signaller:  proc.Pidfd,
		Notify:     signal.Notify,
		Stop:       signal.Stop,
		IsTerminal: IsTerminal,
		Foreground: foreground,
		Subreaper:  true,
		FallbackDirs: func() []string {
			return []string{os.TempDir(), "."}
		},
	}
	f.MemorySource = func() (job.Source, func(), error) { return gpuSource(f.OpenNVML, f.channel()) }
	return f
}

// channel is the allocator statistics channel's reader for vram run and
// vram fit (nil when off).
func (f *Factory) channel() gpu.ChannelReader {
	dir := f.ChannelDir
	if dir == "" && f.Getenv != nil {
		dir, _ = f.Getenv(statchan.EnvDir)
	} else if dir == "" {
		dir = os.Getenv(statchan.EnvDir)
	}
	if dir = statchan.DirFromEnv(dir); dir == "" {
		return nil
	}
	return &statchan.Reader{Dir: dir, ProcRoot: f.ProcRoot}
}

// SimulatedSource is the memory source of vram run --simulate N: N
// simulated GPUs that carry only the processes running libvram on its
// simulated backend (VRAM_DEVICE=sim), read from the statistics channel.
func (f *Factory) SimulatedSource(n int) (job.Source, func(), error) {
	if n < 1 || n > MaxSimulate {
		return nil, nil, Usagef("--simulate %d: must be between 1 and %d GPUs", n, MaxSimulate)
	}
	sim, err := gpu.NewSimChannelOnly(n, nil)
	if err != nil {
		return nil, nil, err
	}
	ch := f.channel()
	if ch == nil {
		return nil, nil, Usagef("--simulate needs the statistics channel, which %s=off turns off", statchan.EnvDir)
	}
	procs, err := gpu.NewProcFS(f.ProcRoot, f.LookupUser)
	if err != nil {
		return nil, nil, err
	}
	sim.AdoptChannel(ch, procs)
	src, err := job.NewGPUSourceChannel(sim, f.channel())
	if err != nil {
		return nil, nil, err
	}
	return src, func() {}, nil
}

// SignalContext is signal.NotifyContext through f.Notify and f.Stop: ctx
// ends when one of sig arrives, or when stop is called.
func (f *Factory) SignalContext(parent context.Context, sig ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	c := make(chan os.Signal, 1)
	f.Notify(c, sig...)
	go func() {
		select {
		case <-c:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		f.Stop(c)
		cancel()
	}
}

// gpuSource is the driver as a memory source.
func gpuSource(openNVML func() (gpu.Host, error), ch gpu.ChannelReader) (job.Source, func(), error) {
	if openNVML == nil {
		openNVML = func() (gpu.Host, error) { return gpu.OpenNVML() }
	}
	h, err := openNVML()
	if err != nil {
		return nil, nil, err
	}
	src, err := job.NewGPUSourceChannel(h, ch)
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	return src, func() { h.Close() }, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// IsTerminal reports whether stream is a file on a terminal.
func IsTerminal(stream any) bool {
	fd, ok := stream.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(fd.Fd()), unix.TCGETS)
	return err == nil
}

// foreground reports whether fd is a terminal whose foreground process
// group is vram's.
func foreground(fd int) bool {
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}
