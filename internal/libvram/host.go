package libvram

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/cudadev"
	"github.com/vramhq/vram/alloc/sim"
	"github.com/vramhq/vram/internal/units"
)

// MaxDevices bounds the device indexes a Host serves.
const MaxDevices = 64

// Environment variables read by NewFromEnv.
const (
	EnvDevice      = "VRAM_DEVICE"       // "cuda" (default) or "sim"
	EnvSimCapacity = "VRAM_SIM_CAPACITY" // size of each simulated device, e.g. 8GiB
)

// Opener opens the backend of one device index.
type Opener func(device int) (alloc.Device, error)

// ErrStarted is returned by Configure once an allocator exists.
var ErrStarted = errors.New("the allocator is already in use: settings can change only before the first allocation")

// Host serves allocation calls for every device of one process.
type Host struct {
	open    Opener
	backend string

	devs [MaxDevices]atomic.Pointer[alloc.Allocator]
	keep keeper

	// uuid gives a device's UUID for the statistics channel (nil: none).
	uuid func(device int) ([16]byte, bool)

	mu      sync.Mutex // guards what follows, and the creation of allocators
	ch      *channel   // the statistics channel; nil when off
	conf    alloc.Config
	started bool
	caps    [MaxDevices]capSetting // SetCap calls made before the device's allocator exists
}

type capSetting struct {
	set      bool
	bytes    uint64
	fraction float64
}

// New returns a Host over the given backend (named for Info) with conf.
func New(open Opener, backend string, conf alloc.Config) *Host {
	return &Host{open: open, backend: backend, conf: conf,
		keep: keeper{period: keeperPeriod, idleAfter: keeperIdle}}
}

// NewFromEnv returns a Host configured from the environment, read with
// getenv: the backend from VRAM_DEVICE, the settings from VRAM_ALLOC_CONF.
// Inside a shared library, pass the C library's getenv: Go's copy of the
// environment is taken when the library is loaded, and misses what the
// program set after its start (Python's os.environ, for one).
func NewFromEnv(getenv func(string) string) (*Host, error) {
	conf, err := alloc.ParseConfig(getenv(alloc.EnvConfig))
	if err != nil {
		return nil, fmt.Errorf("vram: %s: %w", alloc.EnvConfig, err)
	}
	switch dev := getenv(EnvDevice); dev {
	case "", "cuda":
		h := New(openCUDA, "cuda", conf)
		h.uuid = cudaUUID
		return h, nil
	case "sim":
		capacity := uint64(sim.DefaultCapacity)
		if s := getenv(EnvSimCapacity); s != "" {
			if capacity, err = alloc.ParseSize(s); err != nil || capacity == 0 {
				return nil, fmt.Errorf("vram: %s=%q: want a size such as 8GiB", EnvSimCapacity, s)
			}
		}
		return New(SimOpener(capacity), "sim", conf), nil
	default:
		return nil, fmt.Errorf("vram: %s=%q: want cuda or sim", EnvDevice, dev)
	}
}

func openCUDA(device int) (alloc.Device, error) { return cudadev.Open(device) }

// SimOpener opens a simulated device of the given capacity for each index.
func SimOpener(capacity uint64) Opener {
	return func(int) (alloc.Device, error) {
		return sim.New(sim.Config{Capacity: capacity, AllowReleaseMapped: true})
	}
}

// Backend names the backend: "cuda" or "sim".
func (h *Host) Backend() string { return h.backend }

func checkDevice(device int) error {
	if device < 0 || device >= MaxDevices {
		return fmt.Errorf("vram: device %d is out of range [0, %d)", device, MaxDevices)
	}
	return nil
}

// allocator returns the device's allocator, creating it on first use.
func (h *Host) allocator(device int) (*alloc.Allocator, error) {
	if err := checkDevice(device); err != nil {
		return nil, err
	}
	if a := h.devs[device].Load(); a != nil {
		return a, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.devs[device].Load(); a != nil {
		return a, nil
	}
	dev, err := h.open(device)
	if err != nil {
		return nil, fmt.Errorf("vram: opening device %d: %w", device, err)
	}
	a, err := alloc.New(dev, h.conf)
	if err != nil {
		return nil, fmt.Errorf("vram: device %d: %w", device, err)
	}
	if c := h.caps[device]; c.set {
		if err := h.applyCapLocked(a, c); err != nil {
			return nil, fmt.Errorf("vram: device %d: %w", device, err)
		}
	}
	h.started = true
	h.devs[device].Store(a)
	if h.ch != nil {
		var total uint64
		if _, t, err := dev.MemInfo(); err == nil {
			total = t
		}
		h.ch.add(h, device, a, total)
	}
	return a, nil
}

// existing returns the device's allocator, or nil if it has none yet.
func (h *Host) existing(device int) (*alloc.Allocator, error) {
	if err := checkDevice(device); err != nil {
		return nil, err
	}
	return h.devs[device].Load(), nil
}

// Malloc allocates size bytes on device for stream s. Out-of-memory
// errors are *OutOfMemoryError.
func (h *Host) Malloc(size uint64, device int, s alloc.Stream) (uint64, error) {
	h.keep.touch()
	a := h.load(device)
	if a == nil {
		var err error
		if a, err = h.allocator(device); err != nil {
			return 0, err
		}
	}
	p, err := a.Malloc(size, s)
	if err != nil {
		var oom *alloc.OutOfMemoryError
		if errors.As(err, &oom) {
			h.publishNow(device) // the error's figures, before the framework reacts
			return 0, &OutOfMemoryError{Device: device, Err: oom}
		}
		return 0, fmt.Errorf("vram: allocating %s on device %d: %w", units.FormatBytes(size), device, err)
	}
	return p, nil
}

// load is the hot path's lookup: nil for a device index out of range or
// without an allocator.
func (h *Host) load(device int) *alloc.Allocator {
	if uint(device) >= MaxDevices {
		return nil
	}
	return h.devs[device].Load()
}

// Free returns ptr, allocated on device, to the cache.
func (h *Host) Free(ptr uint64, device int) error {
	h.keep.touch()
	a := h.load(device)
	if a == nil {
		if err := checkDevice(device); err != nil {
			return err
		}
		return fmt.Errorf("vram: free of %#x on device %d, which has allocated nothing", ptr, device)
	}
	if err := a.Free(ptr); err != nil {
		return fmt.Errorf("vram: free of %#x on device %d: %w", ptr, device, err)
	}
	return nil
}

// RecordStream marks ptr as used on stream s: its block is reused only
// after the work recorded on s by the time of its free has completed.
// device < 0 searches every device (PyTorch's hook does not say which).
func (h *Host) RecordStream(ptr uint64, device int, s alloc.Stream) error {
	if device >= 0 {
		a := h.load(device)
		if a == nil {
			return fmt.Errorf("vram: record_stream of %#x on device %d, which has allocated nothing", ptr, device)
		}
		if err := a.RecordStream(ptr, s); err != nil {
			return fmt.Errorf("vram: record_stream of %#x on device %d: %w", ptr, device, err)
		}
		return nil
	}
	for d := range h.devs {
		a := h.devs[d].Load()
		if a == nil {
			continue
		}
		err := a.RecordStream(ptr, s)
		if err == nil {
			return nil
		}
		if !errors.Is(err, alloc.ErrUnknownPointer) {
			return fmt.Errorf("vram: record_stream of %#x on device %d: %w", ptr, d, err)
		}
	}
	return fmt.Errorf("vram: record_stream of %#x: %w", ptr, alloc.ErrUnknownPointer)
}

// Configure replaces the settings with s (VRAM_ALLOC_CONF syntax). It
// fails with ErrStarted once any device has an allocator.
func (h *Host) Configure(s string) error {
	conf, err := alloc.ParseConfig(s)
	if err != nil {
		return fmt.Errorf("vram: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		if conf.String() == h.conf.String() {
			return nil
		}
		return fmt.Errorf("vram: configure %q: %w", s, ErrStarted)
	}
	h.conf = conf
	return nil
}

// Config returns the settings in force, in VRAM_ALLOC_CONF syntax.
func (h *Host) Config() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conf.String()
}

// SetFraction caps what device may reserve at fraction of its total
// memory, in (0, 1] (torch.cuda.set_per_process_memory_fraction); SetLimit
// caps it at bytes (0: none). The two are kept per device and combine
// with the caps of the settings (max_bytes, max_fraction): the smallest
// wins, so a cap that vram run set cannot be raised from inside the job.
// Before the device's allocator exists, the cap is kept and applied when
// it is created.
func (h *Host) SetFraction(device int, fraction float64) error {
	if !(fraction > 0 && fraction <= 1) {
		return fmt.Errorf("vram: memory fraction %v is not in (0, 1]", fraction)
	}
	return h.setCap(device, func(c *capSetting) { c.fraction = fraction })
}

// SetLimit caps what device may reserve at bytes (0: no byte cap beyond
// the settings'); see SetFraction.
func (h *Host) SetLimit(device int, bytes uint64) error {
	return h.setCap(device, func(c *capSetting) { c.bytes = bytes })
}

func (h *Host) setCap(device int, change func(*capSetting)) error {
	if err := checkDevice(device); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.caps[device]
	change(&c)
	c.set = true
	if a := h.devs[device].Load(); a != nil {
		if err := h.applyCapLocked(a, c); err != nil {
			return fmt.Errorf("vram: device %d: %w", device, err)
		}
		if cd := h.ch.device(device); cd != nil {
			defer cd.publish(time.Now())
		}
	}
	h.caps[device] = c
	return nil
}

// applyCapLocked sets a's cap to the smaller of c and the settings' caps.
func (h *Host) applyCapLocked(a *alloc.Allocator, c capSetting) error {
	return a.SetCap(minCap(h.conf.MaxBytes, c.bytes), minCap(h.conf.MaxFraction, c.fraction))
}

// minCap is the smaller of two caps where 0 means none.
func minCap[T uint64 | float64](x, y T) T {
	if x == 0 || (y != 0 && y < x) {
		return y
	}
	return x
}

// each calls f for device, or for every device with an allocator when
// device < 0.
func (h *Host) each(device int, f func(d int, a *alloc.Allocator) error) error {
	if device >= 0 {
		a, err := h.existing(device)
		if err != nil || a == nil {
			return err
		}
		return f(device, a)
	}
	var errs []error
	for d := range h.devs {
		if a := h.devs[d].Load(); a != nil {
			errs = append(errs, f(d, a))
		}
	}
	return errors.Join(errs...)
}

// EmptyCache releases the cached memory of device (< 0: every device).
func (h *Host) EmptyCache(device int) error {
	defer h.publishNow(device)
	return h.each(device, func(d int, a *alloc.Allocator) error {
		if _, err := a.EmptyCache(); err != nil {
			return fmt.Errorf("vram: empty_cache on device %d: %w", d, err)
		}
		return nil
	})
}

// ResetPeakStats resets the peaks of device (< 0: every device).
func (h *Host) ResetPeakStats(device int) error {
	defer h.publishNow(device)
	return h.each(device, func(_ int, a *alloc.Allocator) error { a.ResetPeakStats(); return nil })
}

// ResetAccumulatedStats resets the accumulated counts of device (< 0: every device).
func (h *Host) ResetAccumulatedStats(device int) error {
	defer h.publishNow(device)
	return h.each(device, func(_ int, a *alloc.Allocator) error { a.ResetAccumulatedStats(); return nil })
}

// Stats returns the statistics of device with torch.cuda.memory_stats()'s
// keys; zeros for a device that has allocated nothing.
func (h *Host) Stats(device int) (map[string]int64, error) {
	a, err := h.existing(device)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return h.idleStats().Map(), nil
	}
	return a.StatsMap(), nil
}

// idleStats are the statistics of an allocator that has done nothing.
func (h *Host) idleStats() alloc.Stats {
	h.mu.Lock()
	split := h.conf.MaxSplitSize
	h.mu.Unlock()
	s := alloc.Stats{MaxSplitSize: -1}
	if split != 0 {
		s.MaxSplitSize = int64(split)
	}
	return s
}

// Summary returns device's memory_summary() table.
func (h *Host) Summary(device int) (string, error) {
	a, err := h.existing(device)
	if err != nil {
		return "", err
	}
	if a == nil {
		return h.idleStats().Summary(), nil
	}
	return a.Summary(), nil
}

// Devices lists the device indexes that have an allocator.
func (h *Host) Devices() []int {
	var out []int
	for d := range h.devs {
		if h.devs[d].Load() != nil {
			out = append(out, d)
		}
	}
	return out
}

// Info describes the library and its state.
type Info struct {
	Version string `json:"version"`
	Backend string `json:"backend"`
	PID     int    `json:"pid"`
	Devices []int  `json:"devices"`
	Config  string `json:"config"`
	// Channel lists the statistics channel's files; ChannelError says
	// why one could not be made.
	Channel      []string `json:"channel"`
	ChannelError string   `json:"channel_error,omitempty"`
}

// Info returns the library's version, backend, devices and settings.
func (h *Host) Info() Info {
	devs := h.Devices()
	if devs == nil {
		devs = []int{}
	}
	paths, problem := h.ChannelPaths()
	if paths == nil {
		paths = []string{}
	}
	return Info{Version: Version(), Backend: h.backend, PID: os.Getpid(), Devices: devs, Config: h.Config(),
		Channel: paths, ChannelError: problem}
}

// Version is the module version and VCS revision of the build.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	parts := []string{}
	for _, p := range []string{v, rev + modified} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, " ")
}

// OutOfMemoryError is an allocation that failed for lack of memory. Its
// message begins as PyTorch's does.
type OutOfMemoryError struct {
	Device int
	Err    *alloc.OutOfMemoryError
}

func (e *OutOfMemoryError) Unwrap() error { return e.Err }

func (e *OutOfMemoryError) Error() string {
	o := e.Err
	var b strings.Builder
	fmt.Fprintf(&b, "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free.",
		torchSize(o.Requested), e.Device, torchSize(o.DeviceTotal), torchSize(o.DeviceFree))
	if o.Cap < o.DeviceTotal {
		fmt.Fprintf(&b, " %s allowed;", torchSize(o.Cap))
	}
	fmt.Fprintf(&b, " Of the allocated memory %s is allocated by vram, and %s is reserved by vram but unallocated.",
		torchSize(o.Allocated), torchSize(o.ReservedUnallocated))
	fmt.Fprintf(&b, " vram: %s", o.Error())
	return b.String()
}

// torchSize prints n as PyTorch's OOM message does (format_size: two
// decimals; bytes up to 1 KiB).
var torchSize = units.Torch.Format
