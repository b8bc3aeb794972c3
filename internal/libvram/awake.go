package libvram

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// keeper is the state of a Host's keeper goroutine (package doc, "Keeping
// the scheduler awake").
type keeper struct {
	active  atomic.Bool // a call came in since the keeper last looked
	running atomic.Bool // a keeper goroutine runs
	started atomic.Int64

	period    time.Duration
	idleAfter time.Duration
}

const (
	keeperPeriod = 2 * time.Millisecond
	keeperIdle   = 250 * time.Millisecond
)

// touch is called on every allocation and free.
func (k *keeper) touch() {
	if !k.active.Load() {
		k.active.Store(true)
	}
	if !k.running.Load() && k.running.CompareAndSwap(false, true) {
		k.started.Add(1)
		go k.loop()
	}
}

func (k *keeper) loop() {
	ts := syscall.NsecToTimespec(int64(k.period))
	idle := time.Duration(0)
	for {
		// A raw system call, so that the P counts as busy while it sleeps
		// (time.Sleep would park the goroutine and leave the P idle).
		_ = syscall.Nanosleep(&ts, nil)
		runtime.Gosched()
		if k.active.Load() {
			k.active.Store(false)
			idle = 0
			continue
		}
		idle += k.period
		if idle < k.idleAfter {
			continue
		}
		k.running.Store(false)
		// A call that came in after the last look, and saw running still
		// set, started nothing: go on for it.
		if !k.active.Load() || !k.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}
