package detect

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vramhq/vram/internal/units"
)

// Kind is the class of a verdict.
type Kind int

const (
	// Insufficient: too few windows, too short a span, or still warming up.
	Insufficient Kind = iota
	// NoLeak: the steady-state floor is not rising (or rose once and stopped).
	NoLeak
	// Leak: the steady-state floor keeps rising.
	Leak
)

// The verdict words: Kind.String's values, and the spelling of the leak
// verdict in every JSON document and table vram writes (vram run's report,
// the daemon's API, the dashboard). VerdictUnavailable is not a Kind: an
// output writes it when it had no memory figures to judge.
const (
	VerdictInsufficient = "insufficient"
	VerdictNoLeak       = "no-leak"
	VerdictLeak         = "leak"
	VerdictUnavailable  = "unavailable"
)

func (k Kind) String() string {
	switch k {
	case Insufficient:
		return VerdictInsufficient
	case NoLeak:
		return VerdictNoLeak
	case Leak:
		return VerdictLeak
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Verdict is the detector's answer. The trend figures (Slope, S, Z, P,
// Confidence, Horizon, Windows) describe the horizon the verdict rests on:
// for Leak, the shortest tested horizon that shows the leak (its slope is
// the rate now); otherwise the whole steady state.
type Verdict struct {
	Kind Kind
	// Slope is the Theil–Sen slope of the steady-state floor, bytes/s.
	Slope float64
	// S and Z are the Mann–Kendall statistic and its normal score.
	S int64
	Z float64
	// P is the one-sided Mann–Kendall p-value for "rising", multiplied by the
	// number of horizons tested (Bonferroni) and capped at 1.
	P float64
	// Confidence is 1 − P.
	Confidence float64
	// Windows and Horizon are the number of windows tested and the time they span.
	Windows int
	Horizon time.Duration
	// WarmUp is the leading time dropped as warm-up.
	WarmUp time.Duration
	// StepsUp and StepsDown count the one-off jumps of the floor (≥ StepMin
	// and well outside the window-to-window noise) found in the steady state;
	// they are taken out before the continuous trend is tested.
	StepsUp, StepsDown int
	// Floor is the floor of the newest window; Peak the highest peak of the
	// newest MinWindows windows. Bytes.
	Floor, Peak uint64
	// Reason says why, in one line.
	Reason string
}

// MiBPerMin returns Slope in MiB per minute.
func (v Verdict) MiBPerMin() float64 { return v.Slope * 60 / MiB }

// TimeToOOM projects when the memory would reach capacity if the recent peak
// kept rising at Slope. ok is false unless the verdict is Leak with a positive
// slope. A peak already at or above capacity gives 0.
func (v Verdict) TimeToOOM(capacity uint64) (d time.Duration, ok bool) {
	if v.Kind != Leak || !(v.Slope > 0) {
		return 0, false
	}
	if v.Peak >= capacity {
		return 0, true
	}
	sec := float64(capacity-v.Peak) / v.Slope
	if sec >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(sec * 1e9), true
}

func (v Verdict) String() string { return v.Kind.String() + ": " + v.Reason }

// traceSeries, when set (by tests only), sees the steady windows' times,
// despiked floors and segments of every verdict.
var traceSeries func(t, f []float64, seg []int)

// spikeRun is the longest run of windows that missed the floor which
// despike repairs.
const spikeRun = 2

// coarseSamples is the number of samples per window under which a window
// often misses the floor of a workload that rests at its floor for part of
// each step; the floors of such windows are then taken over pairs.
const coarseSamples = 12

// coarse reports whether the windows hold fewer than coarseSamples samples
// each, by their median.
func coarse(pts []window, tmp []float64) bool {
	per := tmp[:0]
	for _, w := range pts {
		per = append(per, float64(w.n)/float64(w.weight))
	}
	return median(per) < coarseSamples
}

// pairFloors replaces a floor by the next window's when that one is lower
// by more than thr, keeping the time of the one it takes: overlapping
// windows twice as long, one window apart, so that a window whose few
// samples all missed the floor borrows its neighbour's. On a rising floor
// the earlier window is the lower one and nothing changes; on a flat floor
// a miss survives only when both windows missed. Differences within thr
// (the noise) are left alone, so that noise stays independent from window
// to window, as the trend test assumes. The newest window keeps its own
// floor.
func pairFloors(t, f []float64, thr float64) {
	for i := 0; i+1 < len(f); i++ {
		if f[i]-f[i+1] > thr {
			t[i], f[i] = t[i+1], f[i+1]
		}
	}
}

// ratchetConfirm is how many windows must follow a step up, at its new
// level, before the ratchet counts it.
const ratchetConfirm = 2

// trend is the outcome of testing one horizon.
type trend struct {
	mk     mannKendall
	slope  float64
	n      int
	span   float64 // seconds from the first to the last window time
	growth float64 // slope × span
}

func (d *Detector) trendOf(t, x []float64, seg []int) trend {
	tr := d.mkTrend(x, seg)
	d.slopeOf(&tr, t, x, seg)
	return tr
}

// mkTrend is the Mann–Kendall half of trendOf: the slope is left to
// slopeOf, which costs O(n²) pairs and a median, so that a horizon whose
// test is not significant never pays for it.
func (d *Detector) mkTrend(x []float64, seg []int) trend {
	if cap(d.tmp) < len(x) {
		d.tmp = make([]float64, len(x))
	}
	return trend{mk: mkTest(x, seg, d.tmp), n: len(x)}
}

// mkTrendS is mkTrend with the test's S given.
func (d *Detector) mkTrendS(s int64, x []float64, seg []int) trend {
	if cap(d.tmp) < len(x) {
		d.tmp = make([]float64, len(x))
	}
	return trend{mk: mkTestS(s, x, seg, d.tmp), n: len(x)}
}

// slopeOf completes a trend made by mkTrend: the Theil–Sen slope, the span
// and the growth.
func (d *Detector) slopeOf(tr *trend, t, x []float64, seg []int) {
	tr.slope, d.pairs = theilSen(t, x, seg, d.pairs)
	if len(t) > 1 {
		tr.span = t[len(t)-1] - t[0]
	}
	tr.growth = tr.slope * tr.span
}

// Verdict analyses the windows seen so far. Its cost is O(MaxWindows²) at
// worst (the pairwise statistics), independent of the number of samples.
//
// Its scratch space (the pairwise slopes: 16 KB at 64 windows, 256 KB at
// 256) is borrowed from a pool for the call, not kept in the Detector: a
// daemon holds one Detector per process and asks each for a verdict only
// every few seconds, so per-Detector buffers would be mostly idle memory.
func (d *Detector) Verdict() Verdict {
	sc := scratchPool.Get().(*scratch)
	d.pairs, d.tmp, d.arena = sc.pairs, sc.tmp, &sc.arena
	pts := d.points(sc.pts)
	if len(pts) > len(d.wins) {
		sc.pts = pts
	}
	v := d.analyze(pts)
	sc.pairs, sc.tmp = d.pairs, d.tmp
	sc.arena.reset()
	d.pairs, d.tmp, d.arena = nil, nil, nil
	scratchPool.Put(sc)
	return v
}

// scratch is Verdict's scratch space (Detector.pairs and tmp, the
// windows with the open one, and the arena).
type scratch struct {
	pairs, tmp []float64
	pts        []window
	arena      arena
}

// arena hands out the series a verdict makes (the floors and their times,
// the despiked copy, the detrended one...) from two buffers kept in the
// scratch, since a daemon asks for tens of verdicts a second and these
// were most of what it allocated. What it hands out lives until the
// verdict ends (reset), and each slice's capacity is its length, so an
// append past it copies out instead of writing over the next one. When a
// buffer runs out the arena falls back to make and makes the buffer large
// enough for the next verdict.
type arena struct {
	f          []float64
	ints       []int
	fAt, intAt int // handed out so far
	fNeed      int // what the verdict asked for, in all
	intNeed    int
}

// floats returns n zeroed float64s.
func (a *arena) floats(n int) []float64 {
	if a == nil { // outside a Verdict
		return make([]float64, n)
	}
	return carve(a.f, &a.fAt, &a.fNeed, n)
}

// intSlice returns n zeroed ints.
func (a *arena) intSlice(n int) []int {
	if a == nil {
		return make([]int, n)
	}
	return carve(a.ints, &a.intAt, &a.intNeed, n)
}

// carve hands out the n elements of buf after *at (zeroed, capacity n),
// or a new slice when buf has not that many left; *need counts what was
// asked for.
func carve[T any](buf []T, at, need *int, n int) []T {
	*need += n
	if *at+n > len(buf) {
		return make([]T, n)
	}
	s := buf[*at : *at+n : *at+n]
	*at += n
	clear(s)
	return s
}

// reset takes back everything handed out, growing a buffer that ran out.
func (a *arena) reset() {
	if a.fNeed > len(a.f) {
		a.f = make([]float64, a.fNeed)
	}
	if a.intNeed > len(a.ints) {
		a.ints = make([]int, a.intNeed)
	}
	a.fAt, a.intAt, a.fNeed, a.intNeed = 0, 0, 0, 0
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (d *Detector) analyze(pts []window) Verdict {
	cfg := d.cfg
	var v Verdict
	n := len(pts)
	span := 0.0
	if n > 0 {
		span = pts[n-1].last - pts[0].first
	}
	if n < cfg.MinWindows || span < cfg.MinSpan.Seconds() {
		v.Reason = fmt.Sprintf("need %d windows of %v over at least %v; have %d over %v",
			cfg.MinWindows, cfg.Window, cfg.MinSpan, n, seconds(span))
		return v
	}
	if v, ok := d.flat(pts); ok {
		return v
	}
	t := d.arena.floats(n)
	f := d.arena.floats(n)
	for i, w := range pts {
		t[i], f[i] = w.t, w.floor
	}
	v.Floor = uint64(f[n-1])
	if coarse(pts, d.tmp) {
		pairFloors(t, f, 8*d.noise(t, f))
	}
	for _, w := range pts[max(0, n-cfg.MinWindows):] {
		v.Peak = max(v.Peak, uint64(w.peak))
	}

	// 1. Warm-up.
	if cap(d.tmp) < n {
		d.tmp = make([]float64, n)
	}
	// The noise of the floor, from the newer half (the warm-up's jumps
	// would inflate it).
	noise := d.noise(t[n/2:], f[n/2:])
	k := d.warmupEnd(t, f, max(cfg.MinGrowth, 6*noise))
	if k > 0 {
		v.WarmUp = seconds(t[k] - pts[0].first)
	}
	if n-k < cfg.MinWindows {
		v.Reason = fmt.Sprintf("still warming up: floor rose %s in %v", mib(f[n-1]-f[0]), seconds(t[n-1]-pts[0].first))
		return v
	}
	t, f = t[k:], f[k:]

	// 2. Spikes and steps, judged against the window-to-window noise.
	noise = d.noise(t, f)
	tau := max(cfg.StepMin, 8*noise)
	f = despike(d.arena.floats(len(f)), f, tau, spikeRun)
	// The newest windows cannot be told from a spike until later windows
	// come: hold back up to spikeRun of them that jump by more than tau.
	// A jump is measured against the typical rise over the same time, so
	// that the windows of a fast steady rise are neither held back nor
	// read as steps when irregular sampling spaces their floors unevenly.
	rate := typicalRate(t, f, d.tmp)
	for held := 0; held < spikeRun && len(f) > cfg.MinWindows && excess(t, f, len(f)-2, rate) > tau; held++ {
		t, f = t[:len(t)-1], f[:len(f)-1]
	}
	rate = typicalRate(t, f, d.tmp)
	delta := d.arena.floats(len(f) - 1)
	for i := range delta {
		delta[i] = excess(t, f, i, rate)
	}
	seg := d.arena.intSlice(len(f)) // steps split the floor into segments
	var bigUp, bigUpAt float64
	var upAt []float64
	for i, dx := range delta {
		seg[i+1] = seg[i]
		switch {
		case dx > tau:
			v.StepsUp++
			upAt = append(upAt, t[i+1])
			if dx > bigUp {
				bigUp, bigUpAt = dx, t[i+1]
			}
			seg[i+1]++
		case dx < -tau:
			v.StepsDown++
			seg[i+1]++
		}
	}

	if traceSeries != nil {
		traceSeries(t, f, seg)
	}

	// 3. The continuous trend inside segments, over nested horizons ending now.
	horizons := horizonsFor(len(f), firstHorizon)
	alpha := cfg.Alpha / float64(len(horizons))
	var best *trend
	var rejected []string
	rows := newKendallRows(f, seg)
	// The longest horizon is the whole steady state, which step 5 reports
	// when no horizon shows a leak: its trend is kept (whole), and whether
	// its slope was computed (wholeSloped).
	var whole trend
	wholeSloped := false
	for _, h := range horizons {
		th, fh, sh := t[len(t)-h:], f[len(f)-h:], seg[len(seg)-h:]
		tr := d.mkTrendS(rows.suffixS(len(f)-h), fh, sh)
		if h == len(f) {
			whole = tr
		}
		if tr.mk.P >= alpha {
			continue // not significant: the slope would not be looked at
		}
		d.slopeOf(&tr, th, fh, sh)
		if h == len(f) {
			whole, wholeSloped = tr, true
		}
		if tr.slope < cfg.MinSlope || tr.growth < cfg.MinGrowth {
			continue
		}
		if d.decelerating(th, fh, sh) {
			rejected = append(rejected, fmt.Sprintf("the rise over the last %v is leveling off", seconds(tr.span)))
			continue
		}
		if d.oneJump(fh, sh, alpha) {
			rejected = append(rejected, fmt.Sprintf("the rise over the last %v is one jump", seconds(tr.span)))
			continue
		}
		// Horizons go from short to long: keep the shortest that shows a
		// leak, whose slope is the rate now (a longer one may mix in the
		// flat time before a late leak).
		b := tr
		best = &b
		break
	}
	if best != nil {
		d.fill(&v, *best, len(horizons), Leak)
		v.Reason = fmt.Sprintf("floor rising %s/s (%.1f MiB/min) over the last %v, +%s, p=%.2g",
			mib(v.Slope), v.MiBPerMin(), v.Horizon, mib(best.growth), v.P)
		d.addOOM(&v)
		return v
	}

	// 4. A ratchet: repeated steps up that never come back down.
	// Only steps that later windows confirm count: a newest window that
	// missed the floor (coarse sampling under a sawtooth) reads as a step.
	confirmed := upAt
	for len(confirmed) > 0 && confirmed[len(confirmed)-1] > t[max(0, len(t)-1-ratchetConfirm)] {
		confirmed = confirmed[:len(confirmed)-1]
	}
	if len(confirmed) >= cfg.RatchetSteps && v.StepsDown == 0 && ongoing(confirmed, t[len(t)-1]) {
		if all := d.trendOf(t, f, nil); all.slope > 0 {
			d.fill(&v, all, 1, Leak)
			v.Reason = fmt.Sprintf("floor stepped up %d times and never down, %s/s (%.1f MiB/min) over %v, last step %v ago",
				len(confirmed), mib(v.Slope), v.MiBPerMin(), v.Horizon, seconds(t[len(t)-1]-confirmed[len(confirmed)-1]))
			d.addOOM(&v)
			return v
		}
	}

	// 5. No leak: report the whole steady state, inside segments (the
	// longest horizon, tested above).
	if !wholeSloped {
		d.slopeOf(&whole, t, f, seg)
	}
	d.fill(&v, whole, len(horizons), NoLeak)
	v.Reason = noLeakReason(v, bigUp, bigUpAt, rejected)
	return v
}

// noLeakReason explains the no-leak verdict v (Kind, Slope, figures and
// steps filled in): bigUp is the largest step up left out, at bigUpAt, and
// rejected the horizons that rose but were not called a leak.
func noLeakReason(v Verdict, bigUp, bigUpAt float64, rejected []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "floor not rising: %s/s over %v (p=%.2g)", mib(v.Slope), v.Horizon, v.P)
	if v.StepsUp+v.StepsDown > 0 {
		fmt.Fprintf(&b, "; %d one-off step(s) up and %d down left out", v.StepsUp, v.StepsDown)
		if bigUp > 0 {
			fmt.Fprintf(&b, ", largest +%s at %v", mib(bigUp), seconds(bigUpAt))
		}
	}
	if len(rejected) > 0 {
		fmt.Fprintf(&b, "; %s", rejected[0])
	}
	if v.WarmUp > 0 {
		fmt.Fprintf(&b, "; first %v ignored as warm-up", v.WarmUp)
	}
	return b.String()
}

// noFlatShortcut turns flat off, for the test that checks it against the
// general path.
var noFlatShortcut bool

// flat is analyze's verdict, found without the general path, when every
// floor of pts (at least MinWindows of them, over MinSpan) is the same:
// a process whose memory does not move, the common case on a node, which
// a daemon judges for hundreds of processes every few seconds. On such a
// floor every stage of the general path is a no-op that it pays O(n log n)
// for: no window stands above another, so no warm-up (the floor does not
// rise; the thresholds are ≥ 0), no spike, no window held back and no
// step; every horizon's S and tie-corrected variance are 0, so P is 0.5
// and none is significant (when Alpha ≤ 0.5); no step makes no ratchet
// (when RatchetSteps > 0); and the whole steady state's Theil–Sen slope is
// 0. What is left is step 5's report of the whole. ok is false where the
// shortcut does not apply; TestFlatMatchesGeneral checks it against the
// general path.
func (d *Detector) flat(pts []window) (v Verdict, ok bool) {
	n := len(pts)
	if noFlatShortcut || traceSeries != nil || d.cfg.Alpha > 0.5 || d.cfg.RatchetSteps <= 0 {
		return v, false
	}
	for _, w := range pts[1:] {
		if w.floor != pts[0].floor {
			return v, false
		}
	}
	v.Floor = uint64(pts[n-1].floor)
	for _, w := range pts[max(0, n-d.cfg.MinWindows):] {
		v.Peak = max(v.Peak, uint64(w.peak))
	}
	tests := len(horizonsFor(n, firstHorizon))
	d.fill(&v, trend{mk: mannKendall{P: 0.5}, n: n, span: pts[n-1].t - pts[0].t}, tests, NoLeak)
	v.Reason = noLeakReason(v, 0, 0, nil)
	return v, true
}

func (d *Detector) fill(v *Verdict, tr trend, tests int, k Kind) {
	v.Kind = k
	v.Slope = tr.slope
	v.S, v.Z = tr.mk.S, tr.mk.Z
	v.P = min(1, tr.mk.P*float64(tests))
	v.Confidence = 1 - v.P
	v.Windows = tr.n
	v.Horizon = seconds(tr.span)
}

func (d *Detector) addOOM(v *Verdict) {
	if d.cfg.Capacity == 0 {
		return
	}
	if left, ok := v.TimeToOOM(d.cfg.Capacity); ok {
		v.Reason += fmt.Sprintf("; out of memory (%s) in about %v at this rate", mib(float64(d.cfg.Capacity)), left.Round(time.Second))
	}
}

// warmupEnd returns the index of the first steady window. Leading windows
// are warm-up, for at most MaxWarmup from the first window, while either
//
//   - the floor's rise over the next three windows is more than minRise
//     and more than twice the rise over the three windows after: a rise
//     that is slowing down, the shape of a warm-up; or
//   - that rise is faster than WarmupRate, and either the series is
//     shorter than SteadyRise or the rise from window k on is not steady
//     (steadyRise): too early to tell a warm-up that will level off from
//     a fast leak, or a rise that is slowing down.
//
// A fast rise that has kept its pace while the series grew to SteadyRise
// is not a warm-up: the windows from there on are judged, and the trend
// test calls the leak. A steady leak does not slow down and stops the
// first rule at once.
func (d *Detector) warmupEnd(t, f []float64, minRise float64) int {
	n := len(f)
	limit := d.cfg.MaxWarmup.Seconds()
	rate := func(i, j int) float64 { return (f[j] - f[i]) / (t[j] - t[i]) }
	k := 0
	for k < n-1 && t[k]-t[0] < limit {
		j := min(k+3, n-1)
		if l := k + 6; l < n && f[j]-f[k] > minRise && rate(k, j) > 2*max(rate(j, l), 0) {
			k++
			continue
		}
		if rate(k, j) > d.cfg.WarmupRate && !(t[n-1]-t[0] >= d.cfg.SteadyRise.Seconds() && d.steadyRise(t[k:], f[k:])) {
			k++
			continue
		}
		break
	}
	return k
}

// steadyRise reports whether the floor x has risen without slowing down:
// the Theil–Sen slope over its newest third is at least three quarters of
// the slope over its oldest third. A warm-up that
// levels off fails it within a window or two of leveling off (the newest
// third then holds flat windows); a leak at a constant or growing rate
// passes it.
func (d *Detector) steadyRise(t, x []float64) bool {
	n := len(x)
	if n < 6 {
		return false
	}
	m := n / 3
	var s1, s3 float64
	s1, d.pairs = theilSen(t[:m], x[:m], nil, d.pairs)
	s3, d.pairs = theilSen(t[n-m:], x[n-m:], nil, d.pairs)
	return s1 > 0 && s3 >= 0.75*s1
}

// decelerating reports whether the rise in the second half of a horizon is
// under a quarter of the rise in its first half: the tail of a warm-up, or a
// leak that stopped, not a rise that continues.
func (d *Detector) decelerating(t, x []float64, seg []int) bool {
	h := len(x) / 2
	if h < 3 {
		return false
	}
	var s1, s2 float64
	s1, d.pairs = theilSen(t[:h], x[:h], seg[:h], d.pairs)
	s2, d.pairs = theilSen(t[len(t)-h:], x[len(x)-h:], seg[len(seg)-h:], d.pairs)
	return s1 > 0 && s2 < s1/4
}

// oneJump reports whether the rise of x is carried by its largest single
// jump inside a segment: with that jump replaced by the typical (median)
// increment, the trend is no longer significant at alpha.
func (d *Detector) oneJump(x []float64, seg []int, alpha float64) bool {
	big := -1
	inc := d.arena.floats(len(x))[:0]
	for i := 0; i+1 < len(x); i++ {
		if seg[i] != seg[i+1] {
			continue
		}
		inc = append(inc, x[i+1]-x[i])
		if big < 0 || x[i+1]-x[i] > x[big+1]-x[big] {
			big = i
		}
	}
	if big < 0 {
		return false
	}
	excess := x[big+1] - x[big] - median(inc)
	y := d.arena.floats(len(x))
	copy(y, x)
	for i := big + 1; i < len(y); i++ {
		y[i] -= excess
	}
	return mkTest(y, seg, d.tmp).P >= alpha
}

// firstHorizon is the shortest horizon tested, in windows.
const firstHorizon = 12

// horizonsFor returns the horizon lengths (in windows, newest last) tested on
// n steady windows: first, doubled while shorter than n, then n itself.
func horizonsFor(n, first int) []int {
	var hs []int
	for h := first; h < n; h *= 2 {
		hs = append(hs, h)
	}
	return append(hs, n)
}

// ongoing reports whether the steps up at times at are still happening: the
// time since the last one is at most twice the median gap between them.
func ongoing(at []float64, now float64) bool {
	if len(at) < 2 {
		return false
	}
	gaps := diffs(at)
	return now-at[len(at)-1] <= 2*median(gaps)
}

// despike repairs runs of at most r windows that stand more than tau above
// the windows on both sides of the run, lowering them to the higher of those
// two: windows whose samples all missed the moments the memory was at rest.
// Longer runs, a monotone rise, a step, windows below their neighbours (a
// low floor is a real reading) and the newest window (its right side is not
// known yet) are left as they are. Windows within tau of their neighbours
// are untouched, so noise keeps its independence from window to window.
// The result is written to out (len(f)) and returned.
func despike(out, f []float64, tau float64, r int) []float64 {
	copy(out, f)
	for l := 1; l <= r; l++ {
		for a := 1; a+l < len(f); a++ {
			lo := max(f[a-1], f[a+l])
			if slices.Min(f[a:a+l])-lo > tau {
				for i := a; i < a+l; i++ {
					out[i] = min(out[i], lo)
				}
			}
		}
	}
	return out
}

// noise is the noise scale of the floor x around its typical pace: a
// steady rise is taken out first, or the running median would follow it
// exactly and read a rising floor as noiseless.
func (d *Detector) noise(t, x []float64) float64 {
	rate := typicalRate(t, x, d.tmp)
	y := d.arena.floats(len(x))
	for i := range x {
		y[i] = x[i] - rate*(t[i]-t[0])
	}
	return noiseScale(y, d.tmp)
}

// typicalRate is the median of the window-to-window rates of x: the pace
// of a steady rise, about zero for a flat floor with steps.
func typicalRate(t, x, tmp []float64) float64 {
	r := tmp[:0]
	for i := 0; i+1 < len(x); i++ {
		if dt := t[i+1] - t[i]; dt > 0 {
			r = append(r, (x[i+1]-x[i])/dt)
		}
	}
	return median(r)
}

// excess is the change of x from window i to i+1 beyond what rate
// predicts over the time between them.
func excess(t, x []float64, i int, rate float64) float64 {
	return x[i+1] - x[i] - rate*(t[i+1]-t[i])
}

func diffs(x []float64) []float64 {
	if len(x) < 2 {
		return nil
	}
	out := make([]float64, len(x)-1)
	for i := range out {
		out[i] = x[i+1] - x[i]
	}
	return out
}

func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * 1e9).Round(time.Millisecond)
}

// mib formats bytes as MiB with a sign when negative.
var mib = units.MiB.FormatFloat
