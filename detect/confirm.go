package detect

import "time"

// DefaultHold is the time a Leak verdict must hold before a Confirm
// reports it.
const DefaultHold = 15 * time.Second

// Confirm turns a stream of verdicts into a confirmed call: a leak is
// confirmed once every verdict asked over at least Hold said Leak. A
// single verdict that says otherwise starts the wait again. It is for
// callers that act on a verdict while the job runs (an alert in vram top
// or the daemon): a verdict now and then can be a brief false call on a
// noisy floor (docs/detect.md measures how often), while a leak keeps
// being called. vram run, which reports only the verdict at the end of the
// job, does not need it. The zero value uses DefaultHold.
type Confirm struct {
	// Hold is how long the Leak verdicts must hold; 0 means DefaultHold.
	Hold time.Duration

	since   time.Time
	leaking bool
}

// Update records verdict v, asked at time at (the time of the newest
// sample, or the wall clock: any clock that only moves forward), and
// reports whether the leak is confirmed.
func (c *Confirm) Update(at time.Time, v Verdict) bool {
	if v.Kind != Leak {
		c.leaking = false
		return false
	}
	if !c.leaking {
		c.leaking, c.since = true, at
	}
	hold := c.Hold
	if hold <= 0 {
		hold = DefaultHold
	}
	return at.Sub(c.since) >= hold
}

// Reset forgets the verdicts seen so far.
func (c *Confirm) Reset() { c.leaking = false }
