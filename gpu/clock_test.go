package gpu

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Both clocks give the same intervals: the samples per line, the minimum,
// maximum and mean, and a spike that lasts one 5 ms sample is in MAX of the
// 10 ms line that holds it and of no other.
func TestWatchClocksKeepPeaks(t *testing.T) {
	for _, tt := range []struct {
		name           string
		clock          Clock
		interval, samp time.Duration
		perLine        int
	}{
		{"timer", ClockTimer, 10 * time.Millisecond, 0, 2},
		{"sleep", ClockSleep, 10 * time.Millisecond, 0, 2},
		{"sleep at 10ms samples", ClockSleep, 20 * time.Millisecond, 10 * time.Millisecond, 2},
		{"sleep beyond MaxSleepInterval (timer)", ClockSleep, 40 * time.Millisecond, 20 * time.Millisecond, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDevice{mem: 10, procs: []DriverProcess{{PID: 1, Memory: 10, MemoryKnown: true}}}
			s, err := NewSampler(fakeHost{[]Device{d}}, SamplerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The third memory read is the first sample of the second line.
			s.devs[0] = &spikeDevice{fakeDevice: d, spikeAt: 3, spike: 90}
			var got []*Interval
			opts := WatchOptions{Interval: tt.interval, SampleInterval: tt.samp, Count: 3, Clock: tt.clock}
			if err := s.Watch(context.Background(), opts, func(iv *Interval) error {
				got = append(got, iv.Clone())
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 {
				t.Fatalf("%d lines, want 3", len(got))
			}
			for i, iv := range got {
				want := Stat{Min: 10, Max: 10, Last: 10, N: tt.perLine}
				if i == 1 {
					want.Max, want.Last = 90, 10
				}
				u := iv.Devices[0].Used
				if u.Min != want.Min || u.Max != want.Max || u.Last != want.Last || u.N != want.N || iv.MemorySamples != tt.perLine {
					t.Errorf("line %d: used %+v over %d samples, want min %d max %d last %d over %d", i, u, iv.MemorySamples, want.Min, want.Max, want.Last, want.N)
				}
				if !iv.End.After(iv.Start) {
					t.Errorf("line %d spans %v to %v", i, iv.Start, iv.End)
				}
			}
			if m := got[1].Devices[0].Used.Mean(); m != 50 {
				t.Errorf("second line mean = %d, want 50", m)
			}
		})
	}
}

// With ClockSleep the watching goroutine keeps its P while it sleeps. With
// one P, other goroutines must still run (they do at the yield after each
// sleep) and a context cancelled from one of them must end Watch. Nothing
// here depends on how fast the machine is: the other goroutine cancels
// after its own 20 timer wakeups and 3 lines, and Watch gives up with an
// error if that has not happened within 20 s.
func TestWatchSleepClockLetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s, err := NewSampler(fakeHost{[]Device{&fakeDevice{mem: 10}}}, SamplerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ticks, lines atomic.Int64
	go func() { // a timer-driven goroutine beside the watch
		for ticks.Load() < 20 || lines.Load() < 3 {
			time.Sleep(time.Millisecond)
			ticks.Add(1)
		}
		cancel()
	}()
	start := time.Now()
	err = s.Watch(ctx, WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true, Clock: ClockSleep}, func(*Interval) error {
		lines.Add(1)
		if time.Since(start) > 20*time.Second {
			return fmt.Errorf("after %d lines the other goroutine has run %d times: it is starved", lines.Load(), ticks.Load())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ticks.Load() < 20 || lines.Load() < 3 {
		t.Errorf("Watch returned before the cancel: %d lines, the other goroutine ran %d times", lines.Load(), ticks.Load())
	}
}

// An emit error ends Watch on either clock; ErrStop ends it without one.
func TestWatchClockStops(t *testing.T) {
	for _, clock := range []Clock{ClockTimer, ClockSleep} {
		s, err := NewSampler(fakeHost{[]Device{&fakeDevice{mem: 1}}}, SamplerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		err = s.Watch(context.Background(), WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true, Clock: clock}, func(*Interval) error {
			if n++; n == 2 {
				return ErrStop
			}
			return nil
		})
		if err != nil || n != 2 {
			t.Errorf("%v: err %v after %d lines, want nil after 2", clock, err, n)
		}
	}
}

// A process whose only work is watching sleeps in the kernel between
// samples, with one P (vram watch does this).
func ExampleClock() {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	sim, _ := NewSim(1, 1, time.Now)
	s, _ := NewSampler(sim, SamplerOptions{Procs: sim})
	opts := WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true, Count: 3, Clock: ClockSleep}
	err := s.Watch(context.Background(), opts, func(iv *Interval) error {
		fmt.Printf("GPU %d: %d memory samples in the line\n", iv.Devices[0].Index, iv.MemorySamples)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// GPU 0: 2 memory samples in the line
	// GPU 0: 2 memory samples in the line
	// GPU 0: 2 memory samples in the line
}
