package replay

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// DeviceFunc returns the device for one pass: a fresh simulated device
// (SimDevice), or the same real device every time.
type DeviceFunc func() (alloc.Device, error)

// SimDevice returns a DeviceFunc that makes a fresh simulated device of
// capacity bytes for every pass.
func SimDevice(capacity uint64) DeviceFunc {
	return func() (alloc.Device, error) {
		d, err := sim.New(sim.Config{Capacity: capacity})
		if err != nil {
			return nil, fmt.Errorf("simulated device: %w", err)
		}
		return d, nil
	}
}

// MinCapacityResult is the outcome of a bisection.
type MinCapacityResult struct {
	// Bytes is the smallest cap found to complete the trace; the true
	// threshold lies in (Bytes - Resolution, Bytes].
	Bytes      uint64
	Resolution uint64
	// Passes is the number of replays the bisection ran.
	Passes int
	// Found is false when the trace did not complete even under the upper
	// bound; Bytes is then that bound.
	Found bool
}

// Resolution returns the bisection's resolution for a trace of peak live
// bytes live: 0.1 % of live or 2 MiB, whichever is larger.
func Resolution(live uint64) uint64 { return max(live/1000, 2<<20) }

// Step reports one pass of the bisection to a progress callback.
type Step struct {
	Pass     int
	Cap      uint64
	Complete bool
	Lo, Hi   uint64 // the bracket after this pass
}

// upperBoundSteps are the multiples of hi that MinCapacity tries, in order,
// until the trace completes under one.
var upperBoundSteps = []float64{1, 1.02, 1.05, 1.1, 1.25, 1.5, 2}

// MinCapacity finds by bisection the smallest cap (max_bytes) under which
// the trace completes, for configuration cfg, between live-1 (which cannot
// complete) and hi (normally the reserved peak of a pass without a cap). It
// first checks that hi completes, and if it does not, tries 1.02, 1.05,
// 1.1, 1.25, 1.5 and 2 times hi before it gives up (Found false, Bytes the
// last bound tried). open returns a new Source over the whole
// trace, and a function that closes it, for each pass. step, if set, is
// called after every pass.
func MinCapacity(open func() (Source, func(), error), dev DeviceFunc, cfg alloc.Config, live, hi uint64, step func(Step)) (MinCapacityResult, error) {
	res := MinCapacityResult{Resolution: Resolution(live), Bytes: hi}
	if live == 0 {
		return res, fmt.Errorf("min capacity: the trace allocates nothing")
	}
	if hi < live {
		return res, fmt.Errorf("min capacity: upper bound %d is below the live peak %d", hi, live)
	}
	completes := func(capBytes uint64) (bool, error) {
		src, done, err := open()
		if err != nil {
			return false, err
		}
		defer done()
		d, err := dev()
		if err != nil {
			return false, err
		}
		c := cfg
		c.MaxBytes = capBytes
		c.MaxFraction = 0
		r, err := Replay(src, d, c, Options{})
		if err != nil {
			return false, fmt.Errorf("min capacity: pass under a cap of %d bytes: %w", capBytes, err)
		}
		res.Passes++
		return r.OOM == nil, nil
	}
	lo := live - 1
	// A cap changes how the allocator grows (page-mapped chunks are bounded
	// by the cap), so a trace may need a little more under a cap than it
	// reserved without one: raise the bound step by step before giving up.
	top := hi
	ok := false
	for _, f := range upperBoundSteps {
		h := uint64(float64(top) * f)
		var err error
		if ok, err = completes(h); err != nil {
			return res, err
		}
		if ok {
			hi = h
		} else {
			lo = max(lo, h)
		}
		if step != nil {
			step(Step{Pass: res.Passes, Cap: h, Complete: ok, Lo: lo, Hi: max(hi, h)})
		}
		if ok {
			break
		}
	}
	if !ok {
		res.Bytes = uint64(float64(top) * upperBoundSteps[len(upperBoundSteps)-1])
		return res, nil
	}
	for hi-lo > res.Resolution {
		mid := lo + (hi-lo)/2
		ok, err := completes(mid)
		if err != nil {
			return res, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
		if step != nil {
			step(Step{Pass: res.Passes, Cap: mid, Complete: ok, Lo: lo, Hi: hi})
		}
	}
	res.Bytes, res.Found = hi, true
	return res, nil
}
