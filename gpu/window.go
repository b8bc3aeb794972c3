package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Stat summarises a series of byte counts over an interval.
type Stat struct {
	Min, Max, Last uint64
	sum            float64
	N              int // number of samples
}

// Add records one value.
func (s *Stat) Add(v uint64) {
	if s.N == 0 || v < s.Min {
		s.Min = v
	}
	if v > s.Max {
		s.Max = v
	}
	s.Last = v
	s.sum += float64(v)
	s.N++
}

// Mean is the arithmetic mean of the values, 0 when there are none.
func (s Stat) Mean() uint64 {
	if s.N == 0 {
		return 0
	}
	return uint64(s.sum / float64(s.N))
}

// DeviceStat is one device's used memory over an interval.
type DeviceStat struct {
	Identity
	Total uint64
	Used  Stat
}

// ProcessStat is one process's memory on one device over an interval.
type ProcessStat struct {
	Process Process // as of the last full sample that listed it
	Memory  Stat
}

// Interval is what Watch hands its caller once per print interval.
type Interval struct {
	Start, End time.Time
	Devices    []DeviceStat  // sampled devices, in index order
	Processes  []ProcessStat // by peak memory, largest first
	// Snapshot is the last full sample taken in the interval (nil when
	// processes are not sampled).
	Snapshot *Snapshot
	// MemorySamples and ProcessSamples count the samples behind the
	// figures: device memory is read at every sample, processes at every
	// full one.
	MemorySamples, ProcessSamples int
	Simulated                     bool
}

// WatchOptions configure Watch.
type WatchOptions struct {
	// Interval is how often an Interval is emitted (10 ms to 1 h).
	Interval time.Duration
	// SampleInterval is how often device memory is read (the fast path).
	// Default: the smaller of Interval and 5 ms. Must divide into
	// Interval; it is rounded so that it does.
	SampleInterval time.Duration
	// ProcessInterval is how often a full sample (process lists, /proc,
	// classification) is taken. Default 100 ms: a process list costs
	// about 0.26 ms of CPU on an H200 (driver 580), so sampling it at
	// 100 Hz alone would cost 2.6 % of a core. It may be longer than
	// Interval; intervals without a full sample then have no Processes.
	// Rounded to a multiple of SampleInterval.
	ProcessInterval time.Duration
	// MemoryOnly skips process sampling: only device memory is read.
	MemoryOnly bool
	// Count stops after that many intervals; 0 runs until ctx ends.
	Count int
	// Clock is how Watch waits between samples; the zero value is
	// ClockTimer.
	Clock Clock
}

// Clock selects how Watch waits for the next sample.
type Clock uint8

const (
	// ClockTimer waits on a time.Ticker: between samples the goroutine is
	// parked and its P runs the program's other goroutines. Each sample
	// costs a few thread wakeups in the Go runtime (the timer's thread,
	// the runtime's monitor thread, an idle thread woken to look for
	// work): at 200 samples a second that is most of the loop's CPU.
	ClockTimer Clock = iota
	// ClockSleep sleeps in the kernel until the next sample's absolute
	// deadline on CLOCK_MONOTONIC (clock_nanosleep, Linux), entered as a
	// raw system call so that the runtime neither hands the goroutine's P
	// to another thread nor wakes its monitor thread around it, and yields
	// once per sample so that other goroutines (signal delivery, context
	// cancellation) run and the runtime does not preempt it. One thread
	// wakes per sample. The price is that the P stays busy while the
	// goroutine sleeps: with one P, other goroutines run only between
	// samples (a 1 ms timer of another goroutine fires up to a sample
	// interval late). It is meant for a process whose only work is the
	// watch, with GOMAXPROCS 1 (with more Ps each yield wakes an idle
	// thread). It applies when SampleInterval is at most MaxSleepInterval,
	// and on Linux; otherwise Watch uses ClockTimer. docs/monitor.md has
	// the measurements behind this.
	ClockSleep
)

// MaxSleepInterval is the longest SampleInterval for which ClockSleep
// sleeps in the kernel. Above it the runtime would preempt the sleeping
// goroutine (it does so after 10 ms without a yield), and a timer costs
// little at that rate anyway.
const MaxSleepInterval = 10 * time.Millisecond

func (c Clock) String() string {
	switch c {
	case ClockTimer:
		return "timer"
	case ClockSleep:
		return "sleep"
	}
	return fmt.Sprintf("Clock(%d)", uint8(c))
}

// Limits of the print interval.
const (
	MinInterval = 10 * time.Millisecond
	MaxInterval = time.Hour
)

func (o *WatchOptions) normalize() error {
	if o.Interval < MinInterval || o.Interval > MaxInterval {
		return fmt.Errorf("interval %v out of range: must be between %v and %v", o.Interval, MinInterval, MaxInterval)
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = min(o.Interval, 5*time.Millisecond)
	}
	if o.SampleInterval < time.Millisecond || o.SampleInterval > o.Interval {
		return fmt.Errorf("sample interval %v out of range: must be between 1ms and the interval (%v)", o.SampleInterval, o.Interval)
	}
	if o.ProcessInterval == 0 {
		o.ProcessInterval = 100 * time.Millisecond
	}
	if o.ProcessInterval < o.SampleInterval || o.ProcessInterval > MaxInterval {
		return fmt.Errorf("process interval %v out of range: must be between the sample interval (%v) and %v", o.ProcessInterval, o.SampleInterval, MaxInterval)
	}
	if o.Count < 0 {
		return fmt.Errorf("count %d: must be 0 (forever) or more", o.Count)
	}
	if o.Clock > ClockSleep {
		return fmt.Errorf("clock %v: must be ClockTimer or ClockSleep", o.Clock)
	}
	return nil
}

// ErrStop may be returned by Watch's emit function to end the watch
// without an error.
var ErrStop = errors.New("stop watching")

// Watch samples on a clock and calls emit once per interval with the
// minimum, maximum and mean of every device's and process's memory over the
// interval. Device memory is read every SampleInterval, processes every
// ProcessInterval; a tick on which a full sample is due reads memory through
// it. Ticks that the clock drops while a sample or emit runs late are not
// made up: MemorySamples says how many samples were taken. Watch returns
// when ctx ends (nil), after Count intervals (nil), when emit returns an
// error (nil for ErrStop), or when sampling fails.
//
// The Interval passed to emit, and the slices in it, are reused for the
// next interval: emit must not keep them after it returns (Clone makes a
// copy that can be kept). emit runs on Watch's goroutine, between two
// samples: no channel or second goroutine stands between the loop and the
// caller.
//
// In steady state a memory-only tick allocates nothing, so at short
// intervals the cost is the wakeups themselves; opts.Clock says how the
// loop waits (ClockSleep is the cheap one for a process that only
// watches). With ClockSleep, ctx is checked once per sample, so Watch
// returns at most one SampleInterval after ctx ends.
func (s *Sampler) Watch(ctx context.Context, opts WatchOptions, emit func(*Interval) error) error {
	w, err := s.NewWatcher(opts)
	if err != nil {
		return err
	}
	var wait waiter
	if w.opts.Clock == ClockSleep && w.opts.SampleInterval <= MaxSleepInterval && haveSleepClock {
		c, err := newSleepClock(w.opts.SampleInterval)
		if err != nil {
			return err
		}
		wait = c
	} else {
		wait = newTimerClock(w.opts.SampleInterval)
	}
	defer wait.stop()
	emitted := 0
	done := ctx.Done()
	for {
		iv, err := w.Tick()
		if err != nil {
			return err
		}
		if iv != nil {
			if err := emit(iv); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
			emitted++
			if w.opts.Count > 0 && emitted >= w.opts.Count {
				return nil
			}
		}
		if ok, err := wait.wait(done); !ok || err != nil {
			return err
		}
	}
}

// waiter is the clock of Watch's loop: wait blocks until the next sample
// is due and reports true, or false as soon as done is closed (or, for a
// clock that cannot select on it, at its next wakeup).
type waiter interface {
	wait(done <-chan struct{}) (bool, error)
	stop()
}

// timerClock is ClockTimer.
type timerClock struct{ t *time.Ticker }

func newTimerClock(every time.Duration) *timerClock {
	return &timerClock{time.NewTicker(every)}
}

func (c *timerClock) wait(done <-chan struct{}) (bool, error) {
	select {
	case <-done:
		return false, nil
	case <-c.t.C:
		return true, nil
	}
}

func (c *timerClock) stop() { c.t.Stop() }

// Watcher is Watch without its clock: the caller calls Tick once every
// SampleInterval (Watch does it from its Clock; a daemon or a benchmark
// can drive it from its own loop). It is not safe for concurrent use, and
// it uses its Sampler: nothing else may sample through that Sampler
// meanwhile.
type Watcher struct {
	s                     *Sampler
	opts                  WatchOptions
	printTicks, procTicks int
	tick                  int
	cur                   intervalBuilder
	mem                   []MemorySample
}

// NewWatcher checks opts, fills in the defaults, and starts the first
// interval now (the Sampler's clock).
func (s *Sampler) NewWatcher(opts WatchOptions) (*Watcher, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	every := opts.SampleInterval
	w := &Watcher{
		s:          s,
		opts:       opts,
		printTicks: max(1, int((opts.Interval+every/2)/every)),
		procTicks:  max(1, int((opts.ProcessInterval+every/2)/every)),
		mem:        make([]MemorySample, 0, len(s.devs)),
	}
	w.cur.init(s)
	w.cur.reset(s.opts.Now())
	return w, nil
}

// Options returns the options with their defaults filled in.
func (w *Watcher) Options() WatchOptions { return w.opts }

// Tick takes the sample due at this tick: a full sample (processes) every
// ProcessInterval unless MemoryOnly, a memory-only sample otherwise. On the
// last tick of a print interval it returns the finished Interval; on the
// others it returns nil. The clock is read only on those last ticks (for
// the interval's end) and by full samples.
//
// The returned Interval and its slices are overwritten by the Tick after
// it: use them first, or keep a Clone.
func (w *Watcher) Tick() (*Interval, error) {
	tick := w.tick
	w.tick++
	last := (tick+1)%w.printTicks == 0
	var now time.Time
	if last {
		now = w.s.opts.Now()
	}
	if w.cur.done {
		w.cur.reset(w.cur.End)
	}
	if !w.opts.MemoryOnly && tick%w.procTicks == 0 {
		snap, err := w.s.Sample()
		if err != nil {
			return nil, err
		}
		w.cur.addSnapshot(snap)
	} else {
		var err error
		if w.mem, err = w.s.SampleMemory(w.mem); err != nil && len(w.mem) == 0 {
			return nil, fmt.Errorf("sample memory: %w", err)
		}
		w.cur.addMemory(w.mem)
	}
	if !last {
		return nil, nil
	}
	w.cur.End = now
	return w.cur.finish(), nil
}

// Clone returns a copy of iv that the Watcher does not overwrite.
func (iv *Interval) Clone() *Interval {
	c := *iv
	c.Devices = slices.Clone(iv.Devices)
	c.Processes = slices.Clone(iv.Processes)
	return &c
}

// intervalBuilder accumulates one Interval. Its slices and map are reused
// from one interval to the next, so that a tick allocates nothing once the
// first intervals have sized them.
type intervalBuilder struct {
	Interval
	ids    []Identity
	pos    []int // NVML index -> position in Devices; -1: not sampled
	procAt map[[2]uint32]int
	done   bool // finish was called: reset before the next sample
}

func (b *intervalBuilder) init(s *Sampler) {
	b.ids = s.ids
	b.Simulated = s.host.Info().Simulated
	b.Devices = make([]DeviceStat, len(s.ids))
	for _, id := range s.ids {
		for len(b.pos) <= id.Index {
			b.pos = append(b.pos, -1)
		}
	}
	for i, id := range s.ids {
		b.pos[id.Index] = i
	}
	b.procAt = map[[2]uint32]int{}
}

func (b *intervalBuilder) reset(start time.Time) {
	b.Start, b.End = start, time.Time{}
	for i, id := range b.ids {
		b.Devices[i] = DeviceStat{Identity: id}
	}
	clear(b.Processes) // drop the last interval's command lines
	b.Processes = b.Processes[:0]
	clear(b.procAt)
	b.Snapshot = nil
	b.MemorySamples, b.ProcessSamples = 0, 0
	b.done = false
}

// device returns the DeviceStat of NVML index i, nil when i is not sampled.
func (b *intervalBuilder) device(i int) *DeviceStat {
	if i < 0 || i >= len(b.pos) || b.pos[i] < 0 {
		return nil
	}
	return &b.Devices[b.pos[i]]
}

func (b *intervalBuilder) addMemory(ms []MemorySample) {
	for _, m := range ms {
		if d := b.device(m.Device); d != nil {
			d.Used.Add(m.Memory.Used)
			d.Total = m.Memory.Total
		}
	}
	b.MemorySamples++
}

func (b *intervalBuilder) addSnapshot(snap *Snapshot) {
	for _, ds := range snap.Devices {
		if ds.Err != nil {
			continue
		}
		if d := b.device(ds.Index); d != nil {
			d.Used.Add(ds.Memory.Used)
			d.Total = ds.Memory.Total
		}
	}
	for _, p := range snap.Processes {
		k := [2]uint32{uint32(p.Device), p.PID}
		i, ok := b.procAt[k]
		if !ok {
			i = len(b.Processes)
			b.procAt[k] = i
			b.Processes = append(b.Processes, ProcessStat{})
		}
		b.Processes[i].Process = p
		b.Processes[i].Memory.Add(p.Memory)
	}
	b.Snapshot = snap
	b.MemorySamples++
	b.ProcessSamples++
}

// finish sorts the processes (peak memory first) and hands out the
// Interval; the next sample starts a new one.
func (b *intervalBuilder) finish() *Interval {
	slices.SortStableFunc(b.Processes, func(a, c ProcessStat) int {
		if a.Memory.Max != c.Memory.Max {
			return cmp.Compare(c.Memory.Max, a.Memory.Max)
		}
		if a.Process.PID != c.Process.PID {
			return cmp.Compare(a.Process.PID, c.Process.PID)
		}
		return cmp.Compare(a.Process.Device, c.Process.Device)
	})
	b.done = true
	return &b.Interval
}
