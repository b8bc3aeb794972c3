package gpu

// ClockSleep on Linux: why a raw clock_nanosleep and a yield per sample.
//
// At 200 samples a second what vram watch costs is not its work (under a
// microsecond a tick) but the threads the Go runtime wakes around each
// wait. With a time.Ticker the goroutine parks, the thread that waits for
// timers wakes at each expiry, the runtime's monitor thread (sysmon), asleep
// because every P was idle, is woken by the loop's next system call or cgo
// call, and an idle thread may be started to look for work: two to four
// thread switches per tick. Sleeping in an ordinary system call
// (unix.ClockNanosleep) is no better: the runtime marks the goroutine as in
// a system call, sysmon sees it there at two of its polls and, with one P,
// takes the P away and hands it to a new spinning thread, then resets its
// own polling to 20 µs; with a locked OS thread each of those hand-offs also
// moves the goroutine between threads.
//
// So the sleep is a raw system call: the runtime believes the goroutine is
// running, keeps the P on this thread and never hands it off. The
// consequences, and how each is handled:
//
//   - sysmon preempts a goroutine that has held its P for 10 ms without
//     passing through the scheduler (a signal, then a yield at the next
//     function call). The loop yields itself (runtime.Gosched) after every
//     sleep, which counts as a pass through the scheduler, so that never
//     happens while samples are at most 10 ms apart (MaxSleepInterval).
//     With one P the yield costs well under a microsecond: the goroutine
//     goes to the run queue and the same thread takes it back. With more
//     Ps the yield also wakes an idle thread to look for work, which is why
//     vram watch runs with GOMAXPROCS 1.
//   - While it sleeps the P runs nothing else. Other goroutines (the signal
//     handler's, a context's) run at the yield after each sleep, so a
//     SIGINT or a cancelled context ends Watch within one sample interval.
//   - A stop-the-world pause (garbage collection) signals the thread; the
//     sleep returns EINTR, the loop yields, and the pause proceeds. With
//     asynchronous preemption disabled (GODEBUG=asyncpreemptoff=1) a pause
//     can wait for the rest of one sleep, at most MaxSleepInterval.
//   - sysmon never sees every P idle, so it does not deep-sleep: it polls
//     about every 10 ms, a hundred wakeups a second of its own. That is
//     what is left on top of the loop's one wakeup per sample.
//
// Deadlines are absolute (TIMER_ABSTIME): the k-th sample is due at start +
// k × interval whatever each tick cost, so the cadence does not drift.
// When a sample or an emit overruns, the deadlines already past are
// skipped, as time.Ticker drops ticks, rather than made up in a burst.

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// haveSleepClock says that ClockSleep sleeps in the kernel here; where it
// does not, Watch uses ClockTimer.
const haveSleepClock = true

// sleepClock is ClockSleep: absolute-deadline sleeps on CLOCK_MONOTONIC.
type sleepClock struct {
	period int64     // ns
	next   int64     // CLOCK_MONOTONIC ns at which the next sample is due
	mono0  int64     // CLOCK_MONOTONIC ns read at base
	base   time.Time // read next to mono0; time.Since(base) is on the same clock
}

func newSleepClock(every time.Duration) (*sleepClock, error) {
	if every <= 0 {
		return nil, fmt.Errorf("sleep clock: interval %v: must be positive", every)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, fmt.Errorf("sleep clock: read CLOCK_MONOTONIC: %w", err)
	}
	c := &sleepClock{period: int64(every), base: time.Now(), mono0: ts.Nano()}
	c.next = c.mono0 + c.period
	return c, nil
}

// now is CLOCK_MONOTONIC in nanoseconds, without a system call: Go's
// monotonic clock on Linux is CLOCK_MONOTONIC read through the vDSO, so it
// differs from the kernel's reading only by the constant offset taken at
// the start.
func (c *sleepClock) now() int64 { return c.mono0 + int64(time.Since(c.base)) }

func (c *sleepClock) wait(done <-chan struct{}) (bool, error) {
	c.next = nextDeadline(c.next, c.now(), c.period)
	ts := unix.NsecToTimespec(c.next)
	for {
		_, _, errno := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME,
			uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		// Pass through the scheduler: other goroutines run, a pending
		// preemption or stop-the-world is honoured.
		runtime.Gosched()
		select {
		case <-done:
			return false, nil
		default:
		}
		switch errno {
		case 0:
			c.next += c.period
			return true, nil
		case unix.EINTR: // a signal; the deadline is absolute: sleep on
		default:
			return false, fmt.Errorf("sleep clock: clock_nanosleep: %w", errno)
		}
	}
}

func (c *sleepClock) stop() {}

// nextDeadline is next if it is still ahead of now, else the first deadline
// on the same grid (next + k × period) after now: the samples a slow tick
// overran are dropped, not made up.
func nextDeadline(next, now, period int64) int64 {
	if now < next {
		return next
	}
	return next + ((now-next)/period+1)*period
}
