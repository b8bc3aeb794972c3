package gpu

import (
	"errors"
	"time"
)

// procEntry is what the cache knows about one PID. A negative entry (err
// set) remembers that the PID had no readable process.
//
// What a sample reads of every listed process comes first and the details
// are kept in the entry, not behind a pointer: a sample reads the entry of
// each of the host's processes, and at thousands of processes what that
// costs is mostly the memory the entries occupy.
type procEntry struct {
	checked time.Time // when stat (or err) was read
	// dropped: the cache no longer holds this entry (replaced or pruned),
	// so a caller's pointer to it must be looked up again.
	dropped bool
	hasDet  bool // det holds the details (read once)
	jupyter bool // det's command line is a Jupyter kernel's
	// noProc: err is ErrNoProcess, and detNoProc: detErr is (errors.Is,
	// asked once per entry rather than at every sample).
	noProc, detNoProc bool
	err               error
	firstPPID         int // the parent when first seen: reparenting shows as a change
	// The entries of the process's parent and session leader as the last
	// sample found them, and the PIDs they were found for: hints for get,
	// since every sample looks them up for the orphan rule.
	parent, leader       *procEntry
	parentPID, leaderPID int
	stat                 ProcStat
	det                  ProcDetails
	detErr               error
}

// procCache caches /proc reads per (PID, start time). Not safe for
// concurrent use (the Sampler owns it).
type procCache struct {
	src     ProcSource
	refresh time.Duration
	m       map[int]*procEntry
	pruned  time.Time // the last pruneDue that said yes
}

func newProcCache(src ProcSource, refresh time.Duration) *procCache {
	return &procCache{src: src, refresh: refresh, m: map[int]*procEntry{}}
}

// get returns the entry for pid, re-reading /proc/PID/stat when the entry
// is older than the refresh period. A new start time means a new process
// behind a reused PID: its details are read afresh. A negative entry (err
// set) says the PID had no readable process; it is kept, not replaced,
// while the PID fails the same way. hint is the entry the caller
// last had for pid (nil when none): while it is still the cache's (not
// dropped), the map is not looked up.
func (c *procCache) get(pid int, now time.Time, hint *procEntry) *procEntry {
	e := hint
	if e == nil || e.dropped {
		e = c.m[pid]
	}
	if e != nil && now.Sub(e.checked) < c.refresh {
		return e
	}
	st, err := c.src.Stat(pid)
	if err != nil {
		noProc := errors.Is(err, ErrNoProcess)
		if e != nil && e.err != nil && e.noProc == noProc {
			e.err, e.checked = err, now // the same failure as before: the entry stays
			return e
		}
		ne := &procEntry{err: err, noProc: noProc, checked: now}
		c.replace(pid, e, ne)
		return ne
	}
	if e == nil || e.err != nil || e.stat.StartTicks != st.StartTicks {
		ne := &procEntry{firstPPID: st.PPID}
		c.replace(pid, e, ne)
		e = ne
	}
	e.stat, e.checked = st, now
	return e
}

// related is get of a PID that an entry names (its parent or session
// leader), given the entry found the last time it named one (*hint, for
// *hintPID), which it updates.
func (c *procCache) related(pid int, now time.Time, hint **procEntry, hintPID *int) *procEntry {
	h := *hint
	if *hintPID != pid {
		h = nil
	}
	e := c.get(pid, now, h)
	*hint, *hintPID = e, pid
	return e
}

// replace puts ne in old's place (old nil when pid had no entry).
func (c *procCache) replace(pid int, old, ne *procEntry) {
	if old != nil {
		old.dropped = true
	}
	c.m[pid] = ne
}

// details reads the expensive part once per entry (into e.det, or
// e.detErr).
func (c *procCache) details(e *procEntry) error {
	if !e.hasDet && e.detErr == nil {
		d, err := c.src.Details(e.stat.PID)
		if err != nil {
			e.detErr, e.detNoProc = err, errors.Is(err, ErrNoProcess)
		} else {
			e.det, e.hasDet, e.jupyter = d, true, isJupyter(d.Cmdline)
		}
	}
	return e.detErr
}

// pruneDue says whether a sample at now should prune: once per refresh
// period (an entry is dropped only after three, so pruning more often
// frees nothing sooner that matters).
func (c *procCache) pruneDue(now time.Time) bool {
	if !c.pruned.IsZero() && now.Sub(c.pruned) < c.refresh && !now.Before(c.pruned) {
		return false
	}
	c.pruned = now
	return true
}

// prune drops entries of PIDs that are not on a GPU and have not been
// looked at for three refresh periods.
func (c *procCache) prune(now time.Time, live map[int]bool) {
	for pid, e := range c.m {
		if !live[pid] && now.Sub(e.checked) > 3*c.refresh {
			e.dropped = true
			delete(c.m, pid)
		}
	}
}

// idleState is one device's activity history.
type idleState struct {
	method    IdleMethod
	utilSince time.Time // the next GetProcessUtilization's lastSeen
	obsStart  time.Time // when this sampler started watching
	utilRead  time.Time // when GetProcessUtilization was last called
	latest    map[uint32]ProcessUtilization
	utilGen   uint64 // counts the latest maps made (1 for the first)

	deviceSeen, deviceBusy time.Time
	deviceUtilUnknown      bool
	// pids is each PID's history, one entry per PID so that a sample
	// looks each process up once; round tells this sample's PIDs apart
	// for forget.
	pids   map[uint32]*pidIdle
	round  uint64
	marked int // entries of pids listed in this round
}

// pidIdle is what idleState remembers of one PID on its device.
type pidIdle struct {
	lastActive time.Time // the newest utilization sample showing activity
	// listed: firstSeen, memChanged and lastMem hold the PID's memory
	// history (an entry made by a utilization sample alone has none).
	listed                bool
	firstSeen, memChanged time.Time
	lastMem               uint64
	round                 uint64 // the sample (idleState.round) that listed it
	dropped               bool   // forgotten: no longer in idleState.pids
}

func newIdleState() *idleState {
	return &idleState{method: IdleByUtilization, pids: map[uint32]*pidIdle{}}
}

// pid returns the PID's entry, made when absent.
func (s *idleState) pid(pid uint32) *pidIdle {
	e := s.pids[pid]
	if e == nil {
		e = &pidIdle{}
		s.pids[pid] = e
	}
	return e
}

func (s *idleState) observeDevice(now time.Time, u Utilization) {
	s.round, s.marked = s.round+1, 0
	if s.deviceSeen.IsZero() {
		s.deviceSeen = now
	}
	if !u.Known {
		s.deviceUtilUnknown = true
	} else if u.GPU > 0 {
		s.deviceBusy = now
	}
}

// utilRefresh is how often GetProcessUtilization is called. The call is
// expensive (1.5 ms of CPU per call on an H200 with driver 580, most of it
// in the kernel) and the driver keeps about a second of samples, so one call
// a second sees every sample; between calls the last result is reused.
const utilRefresh = time.Second

// processUtilization returns the latest per-process sample of each PID,
// reading the driver's buffer at most once per utilRefresh. The driver
// buffers only about a second of samples (measured: the oldest sample is
// 0.8 s old on driver 580), so idleness is judged from what this sampler
// itself has watched: obsStart is the first call. When the driver says
// unsupported, the device switches to the memory method for good.
func (s *idleState) processUtilization(d Device, now time.Time) (map[uint32]ProcessUtilization, IdleMethod) {
	if s.method != IdleByUtilization {
		return nil, s.method
	}
	if !s.utilRead.IsZero() && now.Sub(s.utilRead) < utilRefresh {
		return s.latest, IdleByUtilization
	}
	if s.utilSince.IsZero() {
		s.utilSince = now.Add(-utilRefresh)
		s.obsStart = now
	}
	samples, err := d.ProcessUtilization(s.utilSince)
	if errors.Is(err, ErrNotSupported) {
		s.method = IdleByMemory
		return nil, s.method
	}
	if err != nil {
		return nil, IdleUnknown
	}
	s.utilRead = now
	// The map is the sampler's alone and read only until the next read
	// (a hint takes a value out of it, tagged with utilGen), so it is
	// cleared and refilled rather than made anew.
	latest := s.latest
	if latest == nil {
		latest = make(map[uint32]ProcessUtilization, len(samples))
	}
	clear(latest)
	for _, u := range samples {
		if u.SM > 0 || u.Memory > 0 {
			if e := s.pid(u.PID); u.Time.After(e.lastActive) {
				e.lastActive = u.Time
			}
		}
		if old, ok := latest[u.PID]; !ok || u.Time.After(old.Time) {
			latest[u.PID] = u
		}
		if u.Time.After(s.utilSince) {
			s.utilSince = u.Time
		}
	}
	s.latest = latest
	s.utilGen++
	return latest, IdleByUtilization
}

// isIdle records the process's memory (for the memory method) and says
// whether it has been idle for the window.
// e is the PID's entry as the caller last had it (nil when none); the
// entry used is returned, for the next call.
func (s *idleState) isIdle(p *Process, e *pidIdle, now time.Time, window time.Duration, method IdleMethod) (bool, *pidIdle) {
	if e == nil || e.dropped {
		e = s.pid(p.PID)
	}
	if e.round != s.round {
		e.round = s.round
		s.marked++
	}
	if !e.listed {
		e.listed, e.firstSeen, e.lastMem = true, now, p.Memory
	}
	if e.lastMem != p.Memory {
		e.lastMem, e.memChanged = p.Memory, now
	}
	switch method {
	case IdleByUtilization:
		start := s.obsStart
		if p.StartTime.After(start) {
			start = p.StartTime
		}
		if now.Sub(start) < window {
			return false, e // not watched (or not alive) for a whole window
		}
		last := e.lastActive
		return last.IsZero() || now.Sub(last) >= window, e
	case IdleByMemory:
		if s.deviceUtilUnknown {
			return false, e
		}
		since := e.firstSeen
		if c := e.memChanged; c.After(since) {
			since = c
		}
		if s.deviceBusy.After(since) {
			since = s.deviceBusy
		}
		return now.Sub(since) >= window, e
	}
	return false, e
}

// forget drops the history of PIDs this sample did not list on the device:
// isIdle marks those it did (it is called for every process listed).
func (s *idleState) forget() {
	if s.marked == len(s.pids) {
		return // every entry was listed
	}
	for pid, e := range s.pids {
		if e.round != s.round {
			e.dropped = true
			delete(s.pids, pid)
		}
	}
}
