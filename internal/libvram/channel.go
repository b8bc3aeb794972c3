package libvram

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/cuda"
)

// EnvChannelInterval names the variable that sets how often the statistics
// channel is updated (a duration, 10ms to 10s; default 100ms).
const EnvChannelInterval = "VRAM_CHANNEL_INTERVAL"

// DefaultChannelInterval is the statistics channel's default period.
const DefaultChannelInterval = 100 * time.Millisecond

// ChannelOptions configure the statistics channel (package
// alloc/statchan): one file per device with an allocator, updated by one
// background goroutine every Interval and at once after an out-of-memory
// error, empty_cache, a reset of the peaks and a change of the cap.
type ChannelOptions struct {
	Dir      string        // "" turns the channel off
	Interval time.Duration // 0 is DefaultChannelInterval
	// Created and Removed are told of each file made and removed, so that
	// the process can remove what is left at exit (libvram does it from C,
	// where exit is seen).
	Created, Removed func(path string)
	// Warn receives the one message about a channel that cannot be
	// created (nil: standard error).
	Warn func(msg string)
}

// channel is the Host's statistics channel.
type channel struct {
	opt   ChannelOptions
	pid   int
	start uint64

	mu      sync.Mutex // guards what follows
	devs    [MaxDevices]*chanDevice
	running bool
	stop    chan struct{}
	done    chan struct{}
	err     error // the first failure to create a file
}

// chanDevice is one device's writer.
type chanDevice struct {
	mu    sync.Mutex // one read-and-publish at a time, so updates stay in order
	w     *statchan.Writer
	a     *alloc.Allocator
	total uint64
}

// EnableChannel turns on the statistics channel for the devices that get
// an allocator from now on (and those that have one). It fails when the
// process's start time cannot be read.
func (h *Host) EnableChannel(opt ChannelOptions) error {
	if opt.Dir == "" {
		return nil
	}
	if opt.Interval <= 0 {
		opt.Interval = DefaultChannelInterval
	}
	start, err := statchan.SelfStartTicks("/proc")
	if err != nil {
		return fmt.Errorf("vram: statistics channel: %w", err)
	}
	c := &channel{opt: opt, pid: os.Getpid(), start: start}
	h.mu.Lock()
	h.ch = c
	h.mu.Unlock()
	for _, d := range h.Devices() {
		c.add(h, d, h.devs[d].Load(), 0)
	}
	return nil
}

// ChannelFromEnv configures the channel from VRAM_CHANNEL_DIR (default
// /dev/shm; "off" turns it off) and VRAM_CHANNEL_INTERVAL, read with getenv.
func ChannelFromEnv(getenv func(string) string) (ChannelOptions, error) {
	opt := ChannelOptions{Dir: statchan.DirFromEnv(getenv(statchan.EnvDir))}
	if s := getenv(EnvChannelInterval); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Millisecond || d > 10*time.Second {
			return opt, fmt.Errorf("vram: %s=%q: want a duration from 10ms to 10s", EnvChannelInterval, s)
		}
		opt.Interval = d
	}
	return opt, nil
}

// add creates device d's file and starts the updates; total is the
// device's memory (0: unknown). It takes only c.mu, never h.mu.
func (c *channel) add(h *Host, d int, a *alloc.Allocator, total uint64) {
	if a == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.devs[d] != nil {
		return
	}
	hd := statchan.Header{PID: c.pid, Device: d, StartTicks: c.start, Backend: h.backend,
		Version: Version(), Config: a.Config().String(), PageMapped: a.Config().PageMapped, Interval: c.opt.Interval}
	if h.uuid != nil {
		hd.UUID, hd.UUIDKnown = h.uuid(d)
	}
	w, err := statchan.Create(c.opt.Dir, hd)
	if err != nil {
		if c.err == nil {
			c.err = err
			msg := fmt.Sprintf("vram: the statistics channel is off for device %d: %v; vram status and vram serve will not see this process's allocator figures", d, err)
			if c.opt.Warn != nil {
				c.opt.Warn(msg)
			} else {
				fmt.Fprintln(os.Stderr, msg)
			}
		}
		return
	}
	cd := &chanDevice{w: w, a: a, total: total}
	c.devs[d] = cd
	if c.opt.Created != nil {
		c.opt.Created(w.Path())
	}
	cd.publish(time.Now())
	if !c.running {
		c.running = true
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.loop(c.stop, c.done)
	}
}

func (c *channel) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.opt.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			for d := range c.devs {
				if cd := c.device(d); cd != nil {
					cd.publish(now)
				}
			}
		}
	}
}

func (c *channel) device(d int) *chanDevice {
	if c == nil || uint(d) >= MaxDevices {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.devs[d]
}

// publish reads the allocator's figures and writes them.
func (cd *chanDevice) publish(now time.Time) {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	st, fr := cd.a.StatsAndFreeReserve()
	cd.w.Publish(figures(st, fr, cd.a.Cap(), cd.total), now)
}

// figures are the channel's figures of one allocator.
func figures(st alloc.Stats, fr alloc.FreeReserve, capBytes, total uint64) statchan.Figures {
	return statchan.Figures{
		Allocated: st.AllocatedBytes.All.Current, AllocatedPeak: st.AllocatedBytes.All.Peak,
		Reserved: st.ReservedBytes.All.Current, ReservedPeak: st.ReservedBytes.All.Peak,
		Active: st.ActiveBytes.All.Current, ActivePeak: st.ActiveBytes.All.Peak,
		InactiveSplit: st.InactiveSplitBytes.All.Current, InactiveSplitPeak: st.InactiveSplitBytes.All.Peak,
		Requested: st.RequestedBytes.All.Current, RequestedPeak: st.RequestedBytes.All.Peak,
		FreeCached: int64(fr.Bytes), LargestFree: int64(fr.Largest),
		Allocations: st.Allocation.All.Current, Segments: st.Segment.All.Current,
		NumOOMs: st.NumOOMs, NumAllocRetries: st.NumAllocRetries,
		NumDeviceAlloc: st.NumDeviceAlloc, NumDeviceFree: st.NumDeviceFree,
		Cap: int64(capBytes), DeviceTotal: int64(total), MaxSplitSize: st.MaxSplitSize,
	}
}

// publishNow updates device d's file (d < 0: every device's) at once.
func (h *Host) publishNow(d int) {
	c := h.channel()
	if c == nil {
		return
	}
	now := time.Now()
	if d >= 0 {
		if cd := c.device(d); cd != nil {
			cd.publish(now)
		}
		return
	}
	for i := range c.devs {
		if cd := c.device(i); cd != nil {
			cd.publish(now)
		}
	}
}

func (h *Host) channel() *channel {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ch
}

// ChannelPaths lists the statistics channel's files, and the error that
// kept one from being made ("" if none).
func (h *Host) ChannelPaths() (paths []string, problem string) {
	c := h.channel()
	if c == nil {
		return nil, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cd := range c.devs {
		if cd != nil {
			paths = append(paths, cd.w.Path())
		}
	}
	if c.err != nil {
		problem = c.err.Error()
	}
	return paths, problem
}

// CloseChannel stops the updates and removes the channel's files. The
// process's allocators keep working; figures are no longer published.
func (h *Host) CloseChannel() error {
	h.mu.Lock()
	c := h.ch
	h.ch = nil
	h.mu.Unlock()
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.running {
		close(c.stop)
	}
	done := c.done
	devs := c.devs
	c.devs = [MaxDevices]*chanDevice{}
	c.mu.Unlock()
	if done != nil {
		<-done
	}
	var first error
	for _, cd := range devs {
		if cd == nil {
			continue
		}
		cd.mu.Lock()
		err := cd.w.Close()
		cd.mu.Unlock()
		if c.opt.Removed != nil {
			c.opt.Removed(cd.w.Path())
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cudaUUID is the UUID of a CUDA device ordinal, for the channel's header.
func cudaUUID(d int) ([16]byte, bool) {
	dev, err := cuda.GetDevice(d)
	if err != nil {
		return [16]byte{}, false
	}
	u, err := dev.UUID()
	if err != nil {
		return [16]byte{}, false
	}
	return u, true
}
