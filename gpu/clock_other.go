//go:build !linux

package gpu

import (
	"errors"
	"time"
)

// haveSleepClock: ClockSleep is Linux only (clock_linux.go); elsewhere
// Watch uses ClockTimer.
const haveSleepClock = false

func newSleepClock(time.Duration) (waiter, error) {
	return nil, errors.New("sleep clock: not available on this system")
}
