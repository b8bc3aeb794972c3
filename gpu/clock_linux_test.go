package gpu

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Each wait sleeps to an absolute deadline start + k × period: it never
// returns before it, and deadlines only move forward in whole periods.
func TestSleepClockDeadlines(t *testing.T) {
	const period = 5 * time.Millisecond
	c, err := newSleepClock(period)
	if err != nil {
		t.Fatal(err)
	}
	start := c.now()
	for i := range 20 {
		prev := c.next
		if ok, err := c.wait(nil); !ok || err != nil {
			t.Fatalf("wait %d: %v, %v", i, ok, err)
		}
		now := c.now()
		deadline := c.next - int64(period) // the one it slept to
		if deadline < prev || (deadline-c.mono0)%int64(period) != 0 {
			t.Fatalf("wait %d slept to %d ns after the start, not a later multiple of %v", i, deadline-c.mono0, period)
		}
		if now < deadline {
			t.Fatalf("wait %d returned %v before its deadline", i, time.Duration(deadline-now))
		}
	}
	if got := time.Duration(c.now() - start); got < 20*period-period {
		t.Errorf("20 waits took %v, want at least %v", got, 19*period)
	}
}

// A tick that overruns drops the deadlines already past instead of making
// them up in a burst, as time.Ticker does.
func TestNextDeadline(t *testing.T) {
	const p = 5
	for _, tt := range []struct{ next, now, want int64 }{
		{next: 10, now: 7, want: 10},  // on time
		{next: 10, now: 10, want: 15}, // exactly at it: already past
		{next: 10, now: 11, want: 15}, // late by less than a period
		{next: 10, now: 24, want: 25}, // three deadlines overrun: skipped
		{next: 10, now: 25, want: 30},
	} {
		if got := nextDeadline(tt.next, tt.now, p); got != tt.want {
			t.Errorf("nextDeadline(%d, %d, %d) = %d, want %d", tt.next, tt.now, p, got, tt.want)
		}
	}
}

// After a slow tick the clock sleeps to a deadline after the moment it was
// called, on the grid of the start (a stall of the machine may make it a
// later one, never an earlier one).
func TestSleepClockDropsOverrun(t *testing.T) {
	const period = 5 * time.Millisecond
	c, err := newSleepClock(period)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.wait(nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3*period + period/2) // a slow sample
	before := c.now()
	if _, err := c.wait(nil); err != nil {
		t.Fatal(err)
	}
	deadline := c.next - int64(period)
	if deadline <= before {
		t.Errorf("after an overrun the wait slept to %v before it was called: a missed tick was made up", time.Duration(before-deadline))
	}
	if (deadline-c.mono0)%int64(period) != 0 {
		t.Errorf("deadline %d ns after the start is off the grid of %v", deadline-c.mono0, period)
	}
}

func TestSleepClockDone(t *testing.T) {
	c, err := newSleepClock(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	if ok, err := c.wait(done); ok || err != nil {
		t.Errorf("wait on a closed done = %v, %v; want false, nil", ok, err)
	}
	if _, err := newSleepClock(0); err == nil || err.Error() != "sleep clock: interval 0s: must be positive" {
		t.Errorf("newSleepClock(0): err = %v", err)
	}
}

// BenchmarkWatchClock is what one sample of vram watch --interval 10ms
// --memory-only costs in CPU on each clock, on a fake device (no driver):
// Watch runs for b.N samples 5 ms apart with one P, as vram watch does,
// and the process's user + system CPU time and context switches (getrusage,
// every thread of the test binary) are divided by b.N. ns/op is the 5 ms
// period and says nothing; cpu-ns/op and ctxsw/op are the figures. They
// include the runtime's monitor thread and are noisy on a shared machine:
// compare the two clocks in one run.
func BenchmarkWatchClock(b *testing.B) {
	for _, clock := range []Clock{ClockTimer, ClockSleep} {
		b.Run(clock.String(), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			s, err := NewSampler(fakeHost{[]Device{&fakeDevice{mem: 1}}}, SamplerOptions{})
			if err != nil {
				b.Fatal(err)
			}
			opts := WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true, Clock: clock, Count: (b.N + 1) / 2}
			var r0, r1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
			b.ResetTimer()
			if err := s.Watch(context.Background(), opts, func(*Interval) error { return nil }); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
			ticks := float64(2 * opts.Count)
			cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
			b.ReportMetric(float64(cpu.Nanoseconds())/ticks, "cpu-ns/op")
			b.ReportMetric(float64(r1.Nvcsw+r1.Nivcsw-r0.Nvcsw-r0.Nivcsw)/ticks, "ctxsw/op")
		})
	}
}
