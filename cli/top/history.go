package top

import (
	"math"
	"slices"
	"time"

	"github.com/vramhq/vram/gpu"
)

// point is one sample of a memory series.
type point struct {
	t time.Time
	v uint64 // bytes
}

// series keeps the last cap points of one memory counter. Appending is
// amortised O(1): the slice grows to twice the capacity and is then cut back
// to the newest cap points.
type series struct {
	cap int
	pts []point
}

func newSeries(capacity int) *series { return &series{cap: capacity} }

func (s *series) add(t time.Time, v uint64) {
	s.pts = append(s.pts, point{t, v})
	if len(s.pts) >= 2*s.cap {
		s.pts = append(s.pts[:0:0], s.pts[len(s.pts)-s.cap:]...)
	}
}

// window returns the newest cap points, oldest first.
func (s *series) window() []point {
	if len(s.pts) > s.cap {
		return s.pts[len(s.pts)-s.cap:]
	}
	return s.pts
}

// procKey names one process on one device.
type procKey struct {
	dev int
	pid uint32
}

// procHist is one process's memory on one device. start is the process's
// start time when the history began: a PID reused by a new process starts a
// new history.
type procHist struct {
	start time.Time
	mem   *series
}

// history is what the monitor remembers between samples: each device's used
// memory and each listed process's memory, over the last cap samples.
// Processes that leave the driver's list are forgotten at the next sample.
type history struct {
	cap     int
	samples int // samples taken so far
	dev     map[int]*series
	proc    map[procKey]*procHist
}

func newHistory(capacity int) *history {
	return &history{cap: capacity, dev: map[int]*series{}, proc: map[procKey]*procHist{}}
}

// add records one snapshot.
func (h *history) add(snap *gpu.Snapshot) {
	h.samples++
	for _, d := range snap.Devices {
		if d.Err != nil {
			continue
		}
		s := h.dev[d.Index]
		if s == nil {
			s = newSeries(h.cap)
			h.dev[d.Index] = s
		}
		s.add(snap.Time, d.Memory.Used)
	}
	live := make(map[procKey]bool, len(snap.Processes))
	for _, p := range snap.Processes {
		k := procKey{p.Device, p.PID}
		live[k] = true
		ph := h.proc[k]
		if ph == nil || !ph.start.Equal(p.StartTime) {
			ph = &procHist{start: p.StartTime, mem: newSeries(h.cap)}
			h.proc[k] = ph
		}
		if p.MemoryKnown {
			ph.mem.add(snap.Time, p.Memory)
		}
	}
	for k := range h.proc {
		if !live[k] {
			delete(h.proc, k)
		}
	}
}

// Growth rate estimation.
//
// Memory of a healthy job saw-tooths (a training step allocates activations
// and frees them), so the slope of a least-squares line through raw samples
// depends on where in the cycle the window starts and ends. The floor of the
// saw-tooth is what rises when something leaks. growth therefore cuts the
// window into groups of consecutive samples, keeps each group's minimum (at
// the time it was seen), and returns the Theil–Sen slope of those minima: the
// median of the slopes between every pair. One outlier group moves the median
// little; half of the groups would have to be wrong to move it arbitrarily.

// Each group should be longer than one step of the workload (its floor is
// then the memory at rest), so groups are few: at most maxGrowthGroups, a
// sixth of the window each. Growth needs at least minGrowthPoints samples, so that there are
// minGrowthGroups groups of at least two samples each, spanning at least
// minGrowthSpan: a slope over a shorter span, extrapolated to a minute, is
// one training step's noise.
const (
	minGrowthGroups = 3
	maxGrowthGroups = 6
	minGrowthPoints = 2 * minGrowthGroups
	minGrowthSpan   = 10 * time.Second
)

// growth returns the robust slope of pts in bytes per second, and false when
// there are too few points or they span no time.
func growth(pts []point) (float64, bool) {
	n := len(pts)
	if n < minGrowthPoints || pts[n-1].t.Sub(pts[0].t) < minGrowthSpan {
		return 0, false
	}
	groups := min(maxGrowthGroups, max(minGrowthGroups, n/4))
	ts := make([]float64, 0, groups)
	vs := make([]float64, 0, groups)
	t0 := pts[0].t
	for g := 0; g < groups; g++ {
		lo, hi := g*n/groups, (g+1)*n/groups
		best := lo
		for i := lo + 1; i < hi; i++ {
			if pts[i].v < pts[best].v {
				best = i
			}
		}
		ts = append(ts, pts[best].t.Sub(t0).Seconds())
		vs = append(vs, float64(pts[best].v))
	}
	return theilSen(ts, vs)
}

// theilSen is the median of the slopes between every pair of points with
// distinct x.
func theilSen(x, y []float64) (float64, bool) {
	slopes := make([]float64, 0, len(x)*(len(x)-1)/2)
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			if dx := x[j] - x[i]; dx != 0 {
				slopes = append(slopes, (y[j]-y[i])/dx)
			}
		}
	}
	if len(slopes) == 0 {
		return 0, false
	}
	slices.Sort(slopes)
	m := len(slopes) / 2
	if len(slopes)%2 == 1 {
		return slopes[m], true
	}
	return (slopes[m-1] + slopes[m]) / 2, true
}

// resample maps the window pts onto cols columns spanning capacity sample
// slots, newest in the last column. A column covering several samples takes
// their maximum, so that peaks are never averaged away; a column covering
// part of one sample repeats it; a column older than the first sample is
// empty (ok false). The time axis is therefore fixed: the full width is
// always capacity samples.
func resample(pts []point, capacity, cols int) (vals []uint64, ok []bool) {
	vals, ok = make([]uint64, cols), make([]bool, cols)
	n := len(pts)
	if n == 0 || cols <= 0 {
		return vals, ok
	}
	capacity = max(capacity, n)
	first := capacity - n // slot of pts[0]
	for c := 0; c < cols; c++ {
		lo := c * capacity / cols
		hi := max((c+1)*capacity/cols, lo+1)
		for s := lo; s < hi; s++ {
			if s < first {
				continue
			}
			v := pts[s-first].v
			if !ok[c] || v > vals[c] {
				vals[c], ok[c] = v, true
			}
		}
	}
	return vals, ok
}

// mibPerMin converts a slope in bytes per second.
func mibPerMin(bps float64) float64 { return bps * 60 / (1 << 20) }

// finite reports whether f is a usable number.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
