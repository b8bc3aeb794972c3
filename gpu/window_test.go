package gpu

import (
	"fmt"
	"testing"
	"time"
)

// simWatcher is a Watcher over a simulated host of n GPUs whose clock
// moves only when the test says so; nows counts the Sampler's clock reads.
type simWatcher struct {
	now  time.Time
	nows int
	w    *Watcher
}

func newSimWatcher(t testing.TB, n int, opts WatchOptions) *simWatcher {
	t.Helper()
	sw := &simWatcher{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	simClock := func() time.Time { return sw.now }
	sim, err := NewSim(n, 1, simClock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: func() time.Time { sw.nows++; return sw.now }})
	if err != nil {
		t.Fatal(err)
	}
	if sw.w, err = s.NewWatcher(opts); err != nil {
		t.Fatal(err)
	}
	return sw
}

// tick advances the clock by one sample interval and ticks.
func (sw *simWatcher) tick(t testing.TB) *Interval {
	sw.now = sw.now.Add(sw.w.Options().SampleInterval)
	iv, err := sw.w.Tick()
	if err != nil {
		t.Fatal(err)
	}
	return iv
}

func TestWatcherTicks(t *testing.T) {
	tests := []struct {
		name                string
		opts                WatchOptions
		ticks               int
		intervals           int
		memPerLine          int
		procLines           []int // lines (0-based) that have a process sample
		clockReads          int   // the Sampler's clock: NewWatcher, line ends, full samples
		wantSampleInterval  time.Duration
		wantProcessInterval time.Duration
	}{
		{name: "10ms lines, 5ms samples, processes every 100ms",
			opts: WatchOptions{Interval: 10 * time.Millisecond}, ticks: 40, intervals: 20, memPerLine: 2,
			procLines: []int{0, 10}, clockReads: 1 + 20 + 2,
			wantSampleInterval: 5 * time.Millisecond, wantProcessInterval: 100 * time.Millisecond},
		{name: "memory only",
			opts: WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true}, ticks: 40, intervals: 20, memPerLine: 2,
			clockReads: 1 + 20, wantSampleInterval: 5 * time.Millisecond, wantProcessInterval: 100 * time.Millisecond},
		{name: "100ms lines, processes every line",
			opts: WatchOptions{Interval: 100 * time.Millisecond}, ticks: 60, intervals: 3, memPerLine: 20,
			procLines: []int{0, 1, 2}, clockReads: 1 + 3 + 3, wantSampleInterval: 5 * time.Millisecond, wantProcessInterval: 100 * time.Millisecond},
		{name: "sample at the interval",
			opts: WatchOptions{Interval: 20 * time.Millisecond, SampleInterval: 20 * time.Millisecond, ProcessInterval: 40 * time.Millisecond}, ticks: 6, intervals: 6, memPerLine: 1,
			procLines: []int{0, 2, 4}, clockReads: 1 + 6 + 3, wantSampleInterval: 20 * time.Millisecond, wantProcessInterval: 40 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw := newSimWatcher(t, 2, tt.opts)
			o := sw.w.Options()
			if o.SampleInterval != tt.wantSampleInterval || o.ProcessInterval != tt.wantProcessInterval {
				t.Errorf("options = %+v", o)
			}
			start := sw.now
			var lines []*Interval
			for range tt.ticks {
				if iv := sw.tick(t); iv != nil {
					if !iv.Start.Equal(start) || !iv.End.Equal(sw.now) {
						t.Errorf("line %d spans %v to %v, want %v to %v", len(lines), iv.Start, iv.End, start, sw.now)
					}
					start = iv.End
					lines = append(lines, iv.Clone())
				}
			}
			if len(lines) != tt.intervals {
				t.Fatalf("%d intervals, want %d", len(lines), tt.intervals)
			}
			procs := map[int]bool{}
			for _, i := range tt.procLines {
				procs[i] = true
			}
			for i, iv := range lines {
				if iv.MemorySamples != tt.memPerLine || !iv.Simulated || len(iv.Devices) != 2 {
					t.Errorf("line %d: %d memory samples, simulated %v, %d devices", i, iv.MemorySamples, iv.Simulated, len(iv.Devices))
				}
				for _, d := range iv.Devices {
					if d.Used.N != tt.memPerLine || d.Used.Min > d.Used.Max || d.Total != simTotal {
						t.Errorf("line %d GPU %d: %+v", i, d.Index, d)
					}
				}
				hasProcs := iv.ProcessSamples == 1 && len(iv.Processes) > 0 && iv.Snapshot != nil
				empty := iv.ProcessSamples == 0 && len(iv.Processes) == 0 && iv.Snapshot == nil
				if procs[i] && !hasProcs || !procs[i] && !empty {
					t.Errorf("line %d: %d process samples, %d processes; want a process sample: %v", i, iv.ProcessSamples, len(iv.Processes), procs[i])
				}
				for j := 1; j < len(iv.Processes); j++ {
					if iv.Processes[j].Memory.Max > iv.Processes[j-1].Memory.Max {
						t.Errorf("line %d: processes not by peak memory", i)
					}
				}
			}
			if sw.nows != tt.clockReads {
				t.Errorf("the clock was read %d times, want %d", sw.nows, tt.clockReads)
			}
		})
	}
}

// The Interval handed out is reused: the next line overwrites it in place,
// which is why Watch's emit must not keep it and Clone exists.
func TestWatcherReusesInterval(t *testing.T) {
	sw := newSimWatcher(t, 1, WatchOptions{Interval: 10 * time.Millisecond})
	sw.tick(t)
	first := sw.tick(t)
	kept := first.Clone()
	if len(first.Processes) == 0 {
		t.Fatal("no processes on the first line")
	}
	sw.tick(t)
	second := sw.tick(t)
	if second != first {
		t.Error("the second line is a new Interval: lines allocate")
	}
	if len(second.Processes) != 0 || len(kept.Processes) == 0 || kept.End.Equal(second.End) {
		t.Errorf("kept copy changed or line not reset: kept %d processes at %v, second %d at %v", len(kept.Processes), kept.End, len(second.Processes), second.End)
	}
}

// In steady state a tick allocates nothing unless a full sample is due: the
// memory-only path, the aggregation and the hand-out of a line reuse their
// buffers. Full samples build a Snapshot for the caller and do allocate.
func TestWatcherTickAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, tt := range []struct {
		name string
		opts WatchOptions
	}{
		{"memory only", WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true}},
		{"processes, between full samples", WatchOptions{Interval: 10 * time.Millisecond, ProcessInterval: time.Hour}},
		{"1s lines", WatchOptions{Interval: time.Second, SampleInterval: time.Millisecond, ProcessInterval: time.Hour}},
	} {
		t.Run(tt.name+"/sim", func(t *testing.T) {
			sw := newSimWatcher(t, 4, tt.opts)
			for range 50 { // size the buffers
				sw.tick(t)
			}
			// One run of 2000 ticks: AllocsPerRun divides with integers,
			// so a count per tick would hide a few allocations.
			if n := testing.AllocsPerRun(1, func() {
				for range 2000 {
					sw.tick(t)
				}
			}); n != 0 {
				t.Errorf("%v allocations in 2000 ticks, want 0", n)
			}
		})
		t.Run(tt.name+"/nvml-mock", func(t *testing.T) {
			s := mockSampler(t)
			w, err := s.NewWatcher(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 50 {
				if _, err := w.Tick(); err != nil {
					t.Fatal(err)
				}
			}
			if n := testing.AllocsPerRun(1, func() {
				for range 2000 {
					_, _ = w.Tick()
				}
			}); n != 0 {
				t.Errorf("%v allocations in 2000 ticks, want 0", n)
			}
		})
	}
}

// A Watcher driven by hand: a loop that owns its clock (a daemon, a test)
// ticks it once per sample interval and gets a line every Interval.
func ExampleWatcher() {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sim, _ := NewSim(1, 1, clock)
	s, _ := NewSampler(sim, SamplerOptions{Procs: sim, Now: clock})
	w, err := s.NewWatcher(WatchOptions{Interval: 50 * time.Millisecond, SampleInterval: 10 * time.Millisecond, ProcessInterval: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 20 {
		now = now.Add(w.Options().SampleInterval)
		iv, err := w.Tick()
		if err != nil {
			fmt.Println(err)
			return
		}
		if iv != nil { // valid until the next Tick; iv.Clone() keeps it
			fmt.Printf("%s: %d memory samples, %d process samples, %d processes\n",
				iv.End.Format("15:04:05.000"), iv.MemorySamples, iv.ProcessSamples, len(iv.Processes))
		}
	}
	// Output:
	// 09:00:00.050: 5 memory samples, 1 process samples, 7 processes
	// 09:00:00.100: 5 memory samples, 0 process samples, 0 processes
	// 09:00:00.150: 5 memory samples, 1 process samples, 7 processes
	// 09:00:00.200: 5 memory samples, 0 process samples, 0 processes
}
