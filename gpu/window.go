package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
func (s *Sampler) Watch(ctx context.Context, opts WatchOptions, emit func(*Interval) error) error {
	if err := opts.normalize(); err != nil {
		return err
	}
	sampleEvery := opts.SampleInterval
	printTicks := max(1, int((opts.Interval+sampleEvery/2)/sampleEvery))
	procTicks := max(1, int((opts.ProcessInterval+sampleEvery/2)/sampleEvery))

	ticker := time.NewTicker(sampleEvery)
	defer ticker.Stop()
	var (
		cur     = s.newInterval(s.opts.Now())
		mem     []MemorySample
		emitted int
	)
	for tick := 0; ; tick++ {
		now := s.opts.Now()
		if !opts.MemoryOnly && tick%procTicks == 0 {
			snap, err := s.Sample()
			if err != nil {
				return err
			}
			cur.addSnapshot(snap)
		} else {
			var err error
			if mem, err = s.SampleMemory(mem); err != nil && len(mem) == 0 {
				return fmt.Errorf("sample memory: %w", err)
			}
			cur.addMemory(mem)
		}
		if (tick+1)%printTicks == 0 {
			cur.End = now
			if err := emit(cur.finish()); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
			emitted++
			if opts.Count > 0 && emitted >= opts.Count {
				return nil
			}
			cur = s.newInterval(now)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// intervalBuilder accumulates one Interval.
type intervalBuilder struct {
	Interval
	devAt  map[int]int // NVML index -> position in Devices
	procAt map[[2]uint32]int
}

func (s *Sampler) newInterval(start time.Time) *intervalBuilder {
	b := &intervalBuilder{devAt: map[int]int{}, procAt: map[[2]uint32]int{}}
	b.Start = start
	b.Simulated = s.host.Info().Simulated
	for i, id := range s.ids {
		b.devAt[id.Index] = i
		b.Devices = append(b.Devices, DeviceStat{Identity: id})
	}
	return b
}

func (b *intervalBuilder) addMemory(ms []MemorySample) {
	for _, m := range ms {
		d := &b.Devices[b.devAt[m.Device]]
		d.Used.Add(m.Memory.Used)
		d.Total = m.Memory.Total
	}
	b.MemorySamples++
}

func (b *intervalBuilder) addSnapshot(snap *Snapshot) {
	for _, ds := range snap.Devices {
		if ds.Err != nil {
			continue
		}
		d := &b.Devices[b.devAt[ds.Index]]
		d.Used.Add(ds.Memory.Used)
		d.Total = ds.Memory.Total
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

func (b *intervalBuilder) finish() *Interval {
	iv := b.Interval
	sort.SliceStable(iv.Processes, func(i, j int) bool {
		a, c := iv.Processes[i], iv.Processes[j]
		if a.Memory.Max != c.Memory.Max {
			return a.Memory.Max > c.Memory.Max
		}
		if a.Process.PID != c.Process.PID {
			return a.Process.PID < c.Process.PID
		}
		return a.Process.Device < c.Process.Device
	})
	return &iv
}
