package gpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
)

// SimProcsEnv names the variable that sets a simulated host's processes
// per GPU when OpenOptions.SimProcs is 0.
const SimProcsEnv = "VRAM_SIMULATE_PROCS"

// OpenOptions say which host Open opens and which of its GPUs it samples.
// The zero value opens the real driver and /proc and shows the GPUs that
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES leave visible.
type OpenOptions struct {
	// Simulate > 0 opens a simulated host (Sim) of that many GPUs with
	// this Seed instead of the driver; Sim is then also the ProcSource.
	Simulate int
	Seed     int64
	// SimProcs is the simulated host's processes per GPU (NewSimProcs);
	// 0 reads the VRAM_SIMULATE_PROCS variable, and without it every GPU
	// has its usual one to four. The variable exists for load tests of the
	// commands (vram serve --simulate 8 with 200 processes per GPU) and is
	// deliberately not a flag.
	SimProcs int
	// GPUs selects these NVML indices, ignoring the variables. An index
	// the host does not have is an *IndexError.
	GPUs []int
	// AllGPUs shows every GPU, ignoring the variables.
	AllGPUs bool
	// IdleWindow is the Sampler's (default 30 s).
	IdleWindow time.Duration
	// ChannelDir is the statistics channel's directory (package
	// alloc/statchan): "" reads VRAM_CHANNEL_DIR (default /dev/shm),
	// "off" reads none. The channel's processes are checked against
	// ProcRoot; on a simulated host, the processes that run libvram on
	// its simulated backend join the simulated devices (Sim.AdoptChannel).
	ChannelDir string
	// RemoveStaleChannel removes the channel files of processes that are
	// gone (killed before libvram could remove them, or whose PID now
	// names another process), where this process may: the owner's files,
	// or any with root (statchan.Reader.RemoveStale). vram serve sets it;
	// the one-shot commands leave the files alone.
	RemoveStaleChannel bool

	// The outside world; nil or empty means the real one.
	OpenNVML   func() (Host, error)             // the driver (OpenNVML)
	ProcRoot   string                           // "/proc"
	LookupUser func(uid uint32) (string, error) // the host's user database
	Getenv     func(string) (string, bool)      // os.LookupEnv
	Hostname   func() (string, error)           // os.Hostname
	Now        func() time.Time                 // time.Now
}

// Opened is a host opened by Open with a Sampler over the selected GPUs.
type Opened struct {
	Host    Host
	Sampler *Sampler
	// Procs enriches processes: Sim on a simulated host, ProcFS on the
	// real one, nil when /proc could not be opened (ProcErr says why).
	Procs   ProcSource
	ProcErr error
	// Hostname is the host's name ("simulated" for Sim; empty when it
	// cannot be read).
	Hostname string
	// Visible says how the GPUs were chosen; Source is "--gpu" for
	// OpenOptions.GPUs.
	Visible Visible
	// Shown are the sampled NVML indices, in selection order (possibly
	// none: the variables may select no GPU); Total counts the host's.
	Shown []int
	Total int
	// Warnings are visible-device entries that could not be mapped.
	Warnings []string
	// Channel reads the statistics channel (nil when off); the Sampler
	// uses it. Close the Host, not it.
	Channel ChannelReader
}

// IndexError is Open's error for a selected GPU the host does not have.
type IndexError struct {
	Index, Count int // the index asked for, the GPUs on the host
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("no GPU %d: this host has %d GPUs (0-%d)", e.Index, e.Count, e.Count-1)
}

// Open opens the host the vram commands monitor and picks their GPUs: the
// simulated host when o.Simulate > 0, else the driver (NVML) and /proc;
// then o.GPUs, or every GPU with o.AllGPUs, or those the visible-devices
// variables leave (ParseVisible). When the driver is missing the error
// wraps ErrNoDriver and says what is missing (the library, the kernel
// module, access to the device files); a command adds what the user can
// do instead. An unreadable /proc is not an error: processes then lack
// their /proc details and ProcErr says why. Close the result's Host.
func Open(o OpenOptions) (*Opened, error) {
	if o.OpenNVML == nil {
		o.OpenNVML = func() (Host, error) { return OpenNVML() }
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Getenv == nil {
		o.Getenv = os.LookupEnv
	}
	if o.Hostname == nil {
		o.Hostname = os.Hostname
	}
	op := &Opened{}
	if o.Simulate > 0 {
		per := o.SimProcs
		if v, ok := o.Getenv(SimProcsEnv); ok && per == 0 && v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxSimProcs {
				return nil, fmt.Errorf("%s=%q: want a number of processes per simulated GPU, 1 to %d", SimProcsEnv, v, MaxSimProcs)
			}
			per = n
		}
		sim, err := NewSimProcs(o.Simulate, per, o.Seed, o.Now)
		if err != nil {
			return nil, err
		}
		op.Host, op.Procs, op.Hostname = sim, sim, "simulated"
		if dir := channelDir(o); dir != "" {
			real, err := NewProcFS(o.ProcRoot, o.LookupUser)
			if err == nil {
				sim.AdoptChannel(&syncReader{r: statchan.Reader{Dir: dir, ProcRoot: o.ProcRoot, RemoveStale: o.RemoveStaleChannel}}, real)
			}
		}
	} else {
		h, err := o.OpenNVML()
		if err != nil {
			return nil, err
		}
		op.Host = h
		if pfs, err := NewProcFS(o.ProcRoot, o.LookupUser); err != nil {
			op.ProcErr = err
		} else {
			op.Procs = pfs
		}
		if n, err := o.Hostname(); err == nil {
			op.Hostname = n
		}
	}
	if err := op.selectGPUs(o); err != nil {
		op.Host.Close()
		return nil, err
	}
	if dir := channelDir(o); dir != "" {
		op.Channel = &syncReader{r: statchan.Reader{Dir: dir, ProcRoot: o.ProcRoot, RemoveStale: o.RemoveStaleChannel}}
	}
	var err error
	op.Sampler, err = NewSampler(op.Host, SamplerOptions{Procs: op.Procs, IdleWindow: o.IdleWindow, Devices: op.Shown, Now: o.Now, Channel: op.Channel})
	if err != nil {
		op.Host.Close()
		return nil, err
	}
	return op, nil
}

// channelDir is the statistics channel's directory for o ("" when off).
func channelDir(o OpenOptions) string {
	if o.ChannelDir != "" {
		return statchan.DirFromEnv(o.ChannelDir)
	}
	v, _ := o.Getenv(statchan.EnvDir)
	return statchan.DirFromEnv(v)
}

// syncReader is a statchan.Reader safe for concurrent use.
type syncReader struct {
	mu sync.Mutex
	r  statchan.Reader
}

func (s *syncReader) Read(dst []statchan.Record) ([]statchan.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Read(dst)
}

func (op *Opened) selectGPUs(o OpenOptions) error {
	devs, err := op.Host.Devices()
	if err != nil {
		return fmt.Errorf("list GPUs: %w", err)
	}
	op.Total = len(devs)
	ids := make([]Identity, 0, len(devs))
	for _, d := range devs {
		id, err := d.Identity()
		if err != nil {
			return fmt.Errorf("identify GPU: %w", err)
		}
		ids = append(ids, id)
	}
	switch {
	case len(o.GPUs) > 0:
		for _, i := range o.GPUs {
			if i < 0 || i >= len(ids) {
				return &IndexError{Index: i, Count: len(ids)}
			}
		}
		op.Visible = Visible{Indices: o.GPUs, Source: "--gpu"}
		op.Shown = o.GPUs
	case o.AllGPUs:
		op.Visible = Visible{All: true}
	default:
		op.Visible = ParseVisible(o.Getenv, ids)
		op.Warnings = op.Visible.Warnings
		if !op.Visible.All {
			op.Shown = op.Visible.Indices
		}
	}
	if op.Shown == nil {
		op.Shown = make([]int, 0, len(ids))
		for _, id := range ids {
			op.Shown = append(op.Shown, id.Index)
		}
	}
	return nil
}

// SelectionNote says which GPUs are shown when not all of them are, and
// how to see all; "" when every GPU is shown.
func (op *Opened) SelectionNote() string {
	if len(op.Shown) == op.Total {
		return ""
	}
	list := "none"
	if len(op.Shown) > 0 {
		idx := make([]string, len(op.Shown))
		for i, x := range op.Shown {
			idx[i] = strconv.Itoa(x)
		}
		list = strings.Join(idx, ",")
	}
	return fmt.Sprintf("showing GPUs %s of %d (%s); --all-gpus shows all", list, op.Total, op.Visible.Source)
}
