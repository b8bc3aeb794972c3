package job

// The batch-size search. See Fit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vramhq/vram/internal/units"
)

// Placeholder marks where the candidate batch size goes in a fit command.
const Placeholder = "{}"

// Outcome is how a fit trial ended.
type Outcome string

// Trial outcomes.
const (
	Fits      Outcome = "fits"    // exit status 0, no OOM message
	TimeOut   Outcome = "timeout" // ran until the trial timeout without an OOM: counted as fitting
	OOMed     Outcome = "oom"     // an OOM message (the job failed, or caught it)
	OverLimit Outcome = "limit"   // vram's --limit ended it: too large
	Failed    Outcome = "failed"  // failed otherwise: the search stops
)

// FitSpec describes a batch-size search.
type FitSpec struct {
	// Args is the command; every Placeholder in it is replaced by the
	// candidate batch size. With EnvName, the size goes into that
	// environment variable instead (Args need not contain a placeholder).
	Args    []string
	EnvName string
	// Min and Max bound the batch size (defaults 1 and 65536).
	Min, Max int
	// Margin is taken off the largest batch that fits for the recommended
	// one (default 0.05).
	Margin float64
	// Tolerance is how close to the true maximum the search must come:
	// it stops when the largest fitting batch is within this fraction of
	// the smallest failing one (default 0.02; 0 < Tolerance < 1).
	Tolerance float64
	// Trial is the template of each trial's Spec (memory source, interval,
	// environment, Timeout as the trial timeout, output). Args and the
	// batch variable are set per trial.
	Trial Spec
	// Progress receives one line per trial as it starts and ends; nil
	// discards.
	Progress io.Writer
}

// Trial is one run of the search.
type Trial struct {
	Batch    int           `json:"batch"`
	Outcome  Outcome       `json:"outcome"`
	Peak     uint64        `json:"peak_bytes"`
	Duration time.Duration `json:"-"`
	Seconds  float64       `json:"seconds"`
	// Why says how the candidate was chosen: first, bisect (log-space
	// midpoint, without a prediction), model (the fitted line's
	// prediction), confirm (just above the largest fitting batch, when
	// the line says that is the maximum), probe-down (just below the
	// smallest failing one, when the line says more fits), extend (the
	// line followed only so far) or window (bisecting beyond a miss of
	// the line; see search.next and search.record).
	Why string `json:"why"`
	// Predicted is the fitted line's peak for this batch, 0 when no line.
	Predicted uint64  `json:"predicted_bytes,omitempty"`
	ExitCode  int     `json:"exit_code"`
	Result    *Result `json:"-"`
}

// Line is the least-squares fit peak ≈ A + B·batch over the fitting trials.
type Line struct {
	A, B float64 // bytes, bytes per batch element
	R2   float64
	N    int // points
}

// At is the line's peak for batch n.
func (l Line) At(n int) float64 { return l.A + l.B*float64(n) }

// FitResult is the answer of a search.
type FitResult struct {
	// Found is false when even Min does not fit, or when a trial failed
	// otherwise (Failure): the search has no answer then, and MaxBatch is
	// only the largest batch that fitted before.
	Found       bool
	MaxBatch    int // the largest batch that ran and fitted
	Recommended int // MaxBatch less the margin, at least Min
	// Bound is the smallest batch known not to fit (Max+1 when Max fits).
	Bound  int
	Trials []Trial
	Line   *Line // nil without memory figures or two fitting sizes
	// Capacity is the memory the job could use on its GPU, as the search
	// learned it (0 unknown), and CapacityFrom the evidence it rests on.
	Capacity     uint64
	CapacityFrom string
	// Stop says why the search ended.
	Stop string
	// Failure is the trial that failed otherwise, if any.
	Failure *Trial
	Elapsed time.Duration
}

// Ran counts the trials that were run.
func (r *FitResult) Ran() int { return len(r.Trials) }

// outcome classifies a trial's result.
func outcome(r *Result) Outcome {
	switch {
	case r.OOM.Detected || r.OOM.Caught:
		return OOMed
	case r.Limit.Hit:
		return OverLimit
	case r.TimedOut:
		return TimeOut
	case r.ExitCode == 0:
		return Fits
	}
	return Failed
}

// Fit searches the largest batch size that fits. Each trial runs the
// command as a child process through Run (the same supervision as vram
// run) and is classified: fits (status 0, no OOM message), timeout (ran to
// the trial timeout without an OOM: counted as fitting), oom (an OOM
// message, whether the job died of it or caught it), limit (vram's --limit
// in Trial ended it: too large), or failed (anything else: the search
// stops without an answer, Found is false, and the trial's output tail is
// in the result).
//
// The search keeps a bracket: lo, the largest batch that fitted, and hi,
// the smallest that did not; no size at or above hi is ever tried again.
// It first runs Min, to check that the command works. Without memory
// figures it then bisects the bracket in log space (the geometric
// midpoint; the top is Max+1 until a size fails), which finds any maximum
// in [1, 65536] to 2 % in at most 11 more trials. It stops when hi−1−lo
// is at most Tolerance·(hi−1) (lo is then within Tolerance of the true
// maximum), when hi = lo+1, or when Max fits.
//
// With memory figures it learns the capacity the job can use from its
// evidence (capacity.go), the smallest of:
//
//   - a stated cap: PyTorch's "N allowed" in an OOM message (a per-process
//     memory fraction) plus the process's non-PyTorch memory, or --limit;
//   - what a trial could have held: its memory plus the GPU's free memory
//     at its peak sample (other processes' memory is not free), or the
//     OOM message's "in use" plus "free";
//   - the peaks of trials that ran out of memory, when they are above
//     every fitting trial's peak and below 97 % of the other figures:
//     something the figures do not show stops the job there.
//
// It fits peak ≈ a + b·batch (least squares) over the trials that fitted
// (with one trial, or a line that does not rise: peak ∝ batch from the
// largest fitting trial, a lower bound of the maximum) and takes the
// largest batch that the line says fits in the capacity as the next
// candidate, kept half the tolerance inside the bracket (see search.next):
// a prediction of lo itself is confirmed just above lo, a failed one
// retried just below. When the line proves wrong by more than that (the
// confirmation fits, the retry below fails, a prediction that fitted
// leaves the refit line saying more fits, or a trial fits at the cap,
// where peaks stop growing), the search bisects a window of 30 % beyond
// the miss in log space, widening it while the maximum lies beyond. The
// answer itself is never predicted: MaxBatch always ran and fitted.
//
// The tests hold the search to 12 trials for every maximum in [1, 65536]
// without memory figures, to 8 on jobs whose memory grows linearly with
// the batch, under a cap inside the job, a --limit, or the whole GPU with
// other processes on it (fit_test.go), and to 8 on replays of the eight
// searches of ResNet-50 and GPT-2 recorded on the H200 under a cap inside
// the job and under --limit (fit_replay_test.go); a line trusted too far
// (see extrapolation) is not followed beyond 64 times the spread of its
// sizes.
func Fit(ctx context.Context, spec FitSpec) (*FitResult, error) {
	return fit(ctx, spec, runTrial)
}

// fit is Fit with the trial runner as a parameter (tests drive the search
// with an oracle).
func fit(ctx context.Context, spec FitSpec, runTrial func(context.Context, FitSpec, int) (*Result, error)) (*FitResult, error) {
	if spec.Min == 0 {
		spec.Min = 1
	}
	if spec.Max == 0 {
		spec.Max = 65536
	}
	if spec.Margin == 0 {
		spec.Margin = 0.05
	}
	if spec.Tolerance == 0 {
		spec.Tolerance = 0.02
	}
	switch {
	case len(spec.Args) == 0:
		return nil, errors.New("fit: no command")
	case spec.Min < 1 || spec.Max < spec.Min:
		return nil, fmt.Errorf("fit: batch range %d–%d: want 1 ≤ min ≤ max", spec.Min, spec.Max)
	case spec.Margin < 0 || spec.Margin >= 1:
		return nil, fmt.Errorf("fit: margin %g: want 0 ≤ margin < 1", spec.Margin)
	case spec.Tolerance <= 0 || spec.Tolerance >= 1:
		return nil, fmt.Errorf("fit: tolerance %g: want 0 < tolerance < 1", spec.Tolerance)
	case spec.EnvName == "" && !hasPlaceholder(spec.Args):
		return nil, fmt.Errorf("fit: the command has no %s for the batch size (or name a variable with --env)", Placeholder)
	}
	if spec.Progress == nil {
		spec.Progress = io.Discard
	}
	now := spec.Trial.Now
	if now == nil {
		now = time.Now
	}
	start := now()
	s := newSearch(spec.Min, spec.Max, spec.Tolerance)
	res := &FitResult{}
	lastCap := 0.0
	for !s.done() {
		if err := ctx.Err(); err != nil {
			res.Stop = "cancelled"
			break
		}
		c, why := s.next()
		tr := Trial{Batch: c, Why: why}
		if l, ok := s.line(); ok {
			tr.Predicted = uint64(max(0, l.At(c)))
		}
		n := s.ran + 1
		fmt.Fprintf(spec.Progress, "fit: trial %d: batch %d (%s), elapsed %s\n", n, c, why, round(now().Sub(start)))
		s.ran++
		r, err := runTrial(ctx, spec, c)
		if err != nil {
			return nil, fmt.Errorf("fit: trial %d (batch %d): %w", n, c, err)
		}
		tr.Result, tr.Duration, tr.ExitCode, tr.Peak = r, r.Duration, r.ExitCode, r.Peak.Bytes
		tr.Seconds = r.Duration.Seconds()
		tr.Outcome = outcome(r)
		if ctx.Err() != nil && tr.Outcome != Fits {
			res.Trials = append(res.Trials, tr)
			res.Stop = "cancelled"
			break
		}
		res.Trials = append(res.Trials, tr)
		peak := ""
		if r.Memory {
			peak = ", peak " + units.FormatBytes(tr.Peak)
		}
		fmt.Fprintf(spec.Progress, "fit: trial %d: batch %d %s%s in %s\n", n, c, tr.Outcome, peak, round(tr.Duration))
		if tr.Outcome == Failed {
			res.Failure = &res.Trials[len(res.Trials)-1]
			if r.Signal != 0 {
				res.Stop = fmt.Sprintf("batch %d was killed by %s and printed no OOM message", c, SignalName(r.Signal))
			} else {
				res.Stop = fmt.Sprintf("batch %d failed with exit status %d and no OOM message", c, r.ExitCode)
			}
			break
		}
		fits := tr.Outcome == Fits || tr.Outcome == TimeOut
		before := s.capacity()
		s.ev.learn(r, fits, spec.Trial.Limit)
		s.record(c, why, fits, float64(tr.Peak), fits && before > 0 && float64(tr.Peak) > before)
		if capacity, from := s.ev.capacity(); capacity > 0 && math.Abs(capacity-lastCap) > 0.01*capacity {
			fmt.Fprintf(spec.Progress, "fit: the job can use about %s (from %s)\n", units.FormatBytes(uint64(capacity)), from)
			lastCap = capacity
		}
	}
	res.Elapsed = now().Sub(start)
	res.Bound = s.hi
	if l, ok := s.line(); ok {
		res.Line = &l
	}
	capacity, from := s.ev.capacity()
	res.Capacity, res.CapacityFrom = uint64(capacity), from
	res.MaxBatch = s.lo
	// A trial that failed for another reason ends the search without an
	// answer: the batches above the ones that fitted were not tried to
	// the end, and the same failure may hit every size.
	if s.lo > 0 && res.Failure == nil {
		res.Found = true
		res.Recommended = max(spec.Min, int(math.Floor(float64(s.lo)*(1-spec.Margin))))
	}
	if res.Stop == "" {
		switch {
		case s.lo == 0:
			res.Stop = fmt.Sprintf("even the smallest batch, %d, does not fit", spec.Min)
		case s.lo >= spec.Max:
			res.Stop = fmt.Sprintf("the largest batch allowed, %d, fits", spec.Max)
		case s.hi > spec.Max:
			res.Stop = fmt.Sprintf("%d fits: within %.3g%% of the largest batch allowed, %d", s.lo, 100*spec.Tolerance, spec.Max)
		case s.hi == s.lo+1:
			res.Stop = fmt.Sprintf("%d fits and %d does not", s.lo, s.hi)
		default:
			res.Stop = fmt.Sprintf("%d fits and %d does not: within %.3g%% of the maximum", s.lo, s.hi, 100*spec.Tolerance)
		}
	}
	return res, nil
}

func hasPlaceholder(args []string) bool {
	for _, a := range args {
		if strings.Contains(a, Placeholder) {
			return true
		}
	}
	return false
}

// runTrial runs the command with batch n.
func runTrial(ctx context.Context, spec FitSpec, n int) (*Result, error) {
	t := spec.Trial
	b := strconv.Itoa(n)
	t.Args = make([]string, len(spec.Args))
	for i, a := range spec.Args {
		t.Args[i] = strings.ReplaceAll(a, Placeholder, b)
	}
	if spec.EnvName != "" {
		env := t.Env
		if env == nil {
			env = os.Environ()
		}
		t.Env = append(append([]string(nil), env...), spec.EnvName+"="+b)
	}
	return Run(ctx, t)
}

// trialCapacity is the memory the job could have used on the device of
// its peak: its own memory there plus the device's free memory, at the
// peak sample. 0 when unknown.
func trialCapacity(r *Result) float64 {
	if !r.Memory || r.Peak.Bytes == 0 || r.Peak.Device < 0 {
		return 0
	}
	d := r.Peak.Device
	for _, s := range r.Samples {
		if s.T == r.Peak.At {
			usable := r.Devices[d].Usable()
			free := usable - min(usable, s.Used[d])
			return float64(s.JobDev[d] + free)
		}
	}
	return 0
}

// search is the state of the batch search, apart from running trials.
type search struct {
	min, max int
	tol      float64
	lo, hi   int // largest fitting (0: none yet); smallest not fitting (max+1: none yet)
	ran      int // trials run
	// win is the window the search bisects once the line has been wrong
	// by more than the tolerance near the top (see next); winUp says on
	// which side of the prediction the maximum turned out to be.
	win   window
	winUp bool
	cap   float64 // the capacity after the last trial
	xs    []float64
	ys    []float64
	ev    evidence
}

// window is a range of sizes in log space: from anchor up (or down) by a
// factor.
type window struct {
	anchor int
	factor float64 // 0: no window
	// beyond counts the window's trials in a row that came out as the
	// line's miss did (fitted above it, failed below it). The maximum is
	// then likely beyond the window, which widens (its factor squared):
	// below a miss, at the first such trial (how much faster than the
	// line the memory grows has no bound); above one, at the second (the
	// cache PyTorch can give back under a cap is a bounded share of what
	// it reserves).
	beyond int
}

// windowFactor is how far beyond a wrong prediction the search first
// looks, as a factor of the size where the line was found wrong; its
// first trial is at the window's geometric midpoint, about 14 % away. A
// line fitted on trials below the top misses both ways on real jobs.
// Under a cap inside the job, PyTorch's allocator releases its cache and
// retries before it fails, so the job fits batches whose unpressured peak
// (what the samples measure, the cache included) is above the cap, by up
// to the cache's share of what it reserves (reserved/allocated 1.07–1.30
// in training steps on the H200). Under --limit, which counts that cache,
// the memory per sample grows with the batch (cuDNN's workspaces, the
// allocator's rounding), and a line through small sizes falls short at
// the top. ResNet-50 on the H200 (2026-12-02) missed by 15 % under a cap
// inside the job and by 13 % under --limit.
const windowFactor = 1.3

func newSearch(lo, hi int, tol float64) *search {
	return &search{min: lo, max: hi, tol: tol, hi: hi + 1}
}

// capacity is the search's estimate of the memory the job can use; 0
// unknown.
func (s *search) capacity() float64 {
	c, _ := s.ev.capacity()
	return c
}

func (s *search) done() bool {
	switch {
	case s.hi <= s.min: // the smallest batch does not fit
		return true
	case s.lo == 0:
		return false
	case s.lo >= s.max, s.hi-s.lo <= 1:
		return true
	}
	// Until a size fails, Max+1 is the top: no maximum is above Max.
	return float64(s.hi-1-s.lo) <= s.tol*float64(s.hi-1)
}

// logMid is the geometric midpoint of the bracket (lo, upper], rounded,
// always in it.
func logMid(lo, upper int) int {
	m := int(math.Round(math.Sqrt(float64(lo) * float64(upper))))
	return max(lo+1, min(m, upper))
}

// next chooses the next candidate and says why.
//
// Without a prediction it bisects the bracket in log space. With one it
// takes the prediction, kept a step inside the bracket: half the
// tolerance above the largest fitting size and below the smallest failing
// one. A prediction of the maximum itself is thus confirmed just above it,
// and a prediction that failed is retried just below, close enough that
// the other outcome ends the search.
//
// When that step too shows the line wrong (the confirmation fitted, or
// the retry below failed), the maximum is more than the tolerance away
// from the prediction, and the line is off near the top. So is it when a
// prediction fitted and the line, refit on it, puts the maximum more than
// a step higher: the line fell short, as a confirmation that fitted would
// have shown one trial later. And so is it when a trial fits holding more
// than the capacity the evidence gave: it ran at the cap, where the peaks
// stop growing with the batch (PyTorch's allocator released cache to
// fit), and no line through them can say how much more fits. The search
// then bisects, in log space, a window beyond the size where the line was
// found wrong (windowFactor; for a prediction that fell short, beyond
// where the refit line meets the cap): up from the largest fitting size,
// without the line from then on; or down from the smallest failing size,
// taking the line's prediction again whenever it falls a step below the
// smallest failing size (the trials that fit in the window refit the line
// close to the top). A window the maximum is beyond widens.
func (s *search) next() (int, string) {
	if s.lo == 0 {
		return s.min, "first"
	}
	upper := min(s.hi-1, s.max)
	mid := logMid(s.lo, upper)
	if s.win.factor > 0 && s.winUp {
		top := s.windowTop(upper)
		return logMid(s.lo, top), "window"
	}
	p, ok := s.predict()
	if !ok {
		return mid, "bisect"
	}
	floor := min(s.lo+s.step(s.lo), mid)
	ceil := upper
	if s.hi <= s.max {
		ceil = max(s.hi-s.step(s.hi), mid)
	}
	if s.win.factor > 0 && p > ceil {
		// The line is still above the smallest failing size.
		return logMid(max(s.lo, s.windowBottom(upper)-1), upper), "window"
	}
	// A line is not trusted beyond reach times the spread of the sizes it
	// was fitted on: over close sizes the rounding of the peaks makes its
	// slope uncertain.
	if l, ok := s.line(); ok && l.B > 0 {
		lo, hi := s.spread()
		if reach := hi + extrapolation*(hi-lo); float64(p) > reach && reach < float64(ceil) && reach > float64(floor) {
			return int(reach), "extend"
		}
	}
	switch {
	case p < floor:
		return floor, "confirm"
	case p > ceil:
		return ceil, "probe-down"
	}
	return p, "model"
}

// windowTop is the top of the window above the largest fitting size,
// at most upper. A window the search has come to the top of (its sizes
// all fitted) widens, its factor squared, until its top is more than the
// tolerance above the largest fitting size.
func (s *search) windowTop(upper int) int {
	for {
		top := upper
		if t := float64(s.win.anchor) * s.win.factor; t < float64(upper) {
			top = int(t)
		}
		if top >= upper || float64(top-s.lo) > s.tol*float64(top) {
			return max(top, s.lo+1)
		}
		s.win.factor *= s.win.factor
	}
}

// windowBottom is the bottom of the window below the smallest failing
// size, at least lo+1; a window whose sizes all failed widens the same
// way.
func (s *search) windowBottom(upper int) int {
	for {
		bottom := int(math.Ceil(float64(s.win.anchor) / s.win.factor))
		if bottom <= s.lo+1 || float64(upper-bottom) > s.tol*float64(upper) {
			return max(bottom, s.lo+1)
		}
		s.win.factor *= s.win.factor
	}
}

// record updates the search with a trial's outcome. atCap says that the
// trial fitted holding more than the capacity the evidence gave before it.
func (s *search) record(c int, why string, fits bool, peak float64, atCap bool) {
	_, lined := s.line()
	if fits {
		s.lo = max(s.lo, c)
		if peak > 0 {
			s.xs, s.ys = append(s.xs, float64(c)), append(s.ys, peak)
		}
	} else {
		s.hi = min(s.hi, c)
	}
	// A prediction is for the capacity it was made with: when the
	// evidence lowers the capacity (a cap found), the window opened on
	// the old one is dropped, and the next prediction is a new one. (The
	// capacity rises only with the peak of a trial that fitted, which is
	// what a window above allows for.)
	capacity := s.capacity()
	lowered := capacity < 0.99*s.cap
	s.cap = capacity
	if lowered {
		s.win = window{}
		return
	}
	switch {
	case s.win.factor > 0 && why == "window":
		if fits == s.winUp {
			s.win.beyond++
		} else {
			s.win.beyond = 0
		}
		if s.win.beyond == 2 || s.win.beyond == 1 && !s.winUp {
			s.win.factor *= s.win.factor
			s.win.beyond = 0
		}
	case s.win.factor > 0 && s.winUp == fits && (why == "confirm" || why == "probe-down"):
		// Already looking on this side.
	case why == "confirm" && fits, why == "probe-down" && !fits, atCap:
		// The step beyond the prediction came out as the prediction
		// said it would not; or the trial fitted at the cap, where the
		// peaks stop growing with the batch: the window, from here.
		s.win, s.winUp = window{anchor: c, factor: windowFactor}, fits
	case why == "model" && fits && lined && s.win.factor == 0:
		// A prediction of the line that fitted, when the line refit on
		// it puts the maximum more than a step higher (but within a
		// window): the line fell short by more than the step, as the
		// confirmation above it would show one trial later. Following
		// the refit line would creep up a few sizes a trial: near a cap
		// inside the job the peaks stop following the line (the allocator
		// gives back cache), and the job fits past where the line meets
		// the cap by up to that cache. The window, from there. (A
		// prediction by proportion, before there is a line, is a lower
		// bound: its refit rising says nothing about the line. An open
		// window keeps its own rules.)
		if p, ok := s.predict(); ok && p > c+s.step(c) && float64(p) < float64(c)*windowFactor {
			s.win, s.winUp = window{anchor: p, factor: windowFactor}, true
		}
	}
}

// step is half the tolerance at size n, at least 1: how far inside the
// bracket a prediction is kept (see next).
func (s *search) step(n int) int { return max(1, int(s.tol*float64(n)/2)) }

// extrapolation is how far the line is trusted beyond the sizes it was
// fitted on, in multiples of their spread.
const extrapolation = 64

// spread is the smallest and largest size the line is fitted on.
func (s *search) spread() (lo, hi float64) {
	xs := s.top()
	lo, hi = xs[0], xs[0]
	for _, i := range xs {
		lo, hi = min(lo, i), max(hi, i)
	}
	return lo, hi
}

// top returns the sizes of the largest fitting trials, at most linePoints.
func (s *search) top() []float64 {
	var out []float64
	for _, i := range s.topIdx() {
		out = append(out, s.xs[i])
	}
	return out
}

func (s *search) topIdx() []int {
	idx := make([]int, len(s.xs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(i, j int) bool { return s.xs[idx[i]] > s.xs[idx[j]] })
	return idx[:min(len(idx), linePoints)]
}

// linePoints is how many of the largest fitting sizes the line is fitted
// on: the memory near the maximum is what matters, and a line over the
// small sizes alone misses any curvature.
const linePoints = 3

// line fits peak = a + b·batch by least squares over the largest fitting
// trials.
func (s *search) line() (Line, bool) {
	idx := s.topIdx()
	n := len(idx)
	if n < 2 {
		return Line{}, false
	}
	var mx, my float64
	for _, i := range idx {
		mx += s.xs[i]
		my += s.ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy, syy float64
	for _, i := range idx {
		dx, dy := s.xs[i]-mx, s.ys[i]-my
		sxx += dx * dx
		sxy += dx * dy
		syy += dy * dy
	}
	if sxx == 0 {
		return Line{}, false
	}
	b := sxy / sxx
	l := Line{A: my - b*mx, B: b, N: n, R2: 1}
	if syy > 0 {
		l.R2 = sxy * sxy / (sxx * syy)
	}
	return l, true
}

// predict returns the largest batch the evidence says fits: by the fitted
// line when it rises, else by proportion from the largest fitting trial
// (capacity/peak times its size: a lower bound of the maximum when memory
// grows linearly from a non-negative base).
func (s *search) predict() (int, bool) {
	capacity := s.capacity()
	if capacity <= 0 || len(s.xs) == 0 {
		return 0, false
	}
	var p float64
	if l, ok := s.line(); ok && l.B > 0 {
		p = (capacity - l.A) / l.B
	} else {
		i := 0
		for j := range s.xs {
			if s.xs[j] > s.xs[i] {
				i = j
			}
		}
		if s.ys[i] <= 0 {
			return 0, false
		}
		p = capacity / s.ys[i] * s.xs[i]
	}
	return int(math.Floor(max(1, min(p, float64(s.max))))), true
}
