package job

// The batch-size search. See Fit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
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
	Fits    Outcome = "fits"    // exit status 0, no OOM message
	TimeOut Outcome = "timeout" // ran until the trial timeout without an OOM: counted as fitting
	OOMed   Outcome = "oom"     // an OOM message (the job failed, or caught it)
	Skipped Outcome = "skipped" // not run: the fitted line says it certainly does not fit
	Failed  Outcome = "failed"  // failed otherwise: the search stops
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
	// Why says how the candidate was chosen: first, double, bisect,
	// model (the fitted line's prediction) or confirm (just above the
	// largest fitting batch, when the line says that is the maximum).
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
	Bound    int
	Trials   []Trial
	Line     *Line  // nil without memory figures or two fitting sizes
	Capacity uint64 // memory the job could use on its GPU, from the samples; 0 unknown
	// Stop says why the search ended.
	Stop string
	// Failure is the trial that failed otherwise, if any.
	Failure *Trial
	Elapsed time.Duration
}

// Ran counts the trials that were run (not skipped).
func (r *FitResult) Ran() int {
	n := 0
	for _, t := range r.Trials {
		if t.Outcome != Skipped {
			n++
		}
	}
	return n
}

// Fit searches the largest batch size that fits. Each trial runs the
// command as a child process through Run (the same supervision as vram
// run) and is classified: fits (status 0, no OOM message), timeout (ran to
// the trial timeout without an OOM: counted as fitting), oom (an OOM
// message, whether the job died of it or caught it), or failed (anything
// else: the search stops without an answer, Found is false, and the
// trial's output tail is in the result).
//
// The search keeps a bracket: lo, the largest batch that fitted, and hi,
// the smallest that did not. It first runs Min, then climbs by doubling
// until a trial does not fit, then bisects. It stops when hi−1−lo is at
// most Tolerance·(hi−1) (lo is then within Tolerance of the true
// maximum), when hi = lo+1, or when Max fits.
//
// With memory figures it also fits peak ≈ a + b·batch (least squares)
// over the trials that fitted and estimates the capacity the job can use
// (the smallest, over those trials, of the job's memory plus the GPU's
// free memory at its peak). The line is used in two ways:
//
//   - Prediction: instead of doubling or bisecting, the next candidate is
//     the largest batch the line says fits, (capacity − a)/b, clamped
//     into the bracket; when that is lo itself, the candidate is just
//     above lo (lo plus half the tolerance) to confirm the maximum. A
//     prediction step that does not halve the bracket counts as weak;
//     after two weak steps in a row one plain doubling or bisection step
//     is taken, so a wrong line costs at most about twice the plain
//     search.
//   - Skipping: a doubling or bisection candidate is not run when the
//     line, fitted on at least three sizes with R² ≥ 0.9, puts its peak
//     at 1.25 times the capacity or more; it is recorded as skipped and
//     taken as the top of the bracket. The answer itself is never
//     predicted: MaxBatch always ran and fitted.
//
// When the memory grows linearly with the batch, as it does for most
// training steps, the line finds the maximum in a handful of trials; the
// tests hold the search to log2(Max−Min+1)+3 trials and 2 % of the true
// maximum on such jobs (fit_test.go).
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
		if s.skip(c, why) {
			tr.Outcome = Skipped
			res.Trials = append(res.Trials, tr)
			fmt.Fprintf(spec.Progress, "fit: batch %d skipped: the fitted line puts its peak at %s, the GPU has %s for the job\n",
				c, units.FormatBytes(tr.Predicted), units.FormatBytes(uint64(s.capacity)))
			s.record(c, why, false, 0, 0)
			continue
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
		switch {
		case r.OOM.Detected || r.OOM.Caught:
			tr.Outcome = OOMed
		case r.TimedOut && !r.OOM.Detected:
			tr.Outcome = TimeOut
		case r.ExitCode == 0:
			tr.Outcome = Fits
		default:
			tr.Outcome = Failed
		}
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
		s.record(c, why, fits, float64(tr.Peak), trialCapacity(r))
	}
	res.Elapsed = now().Sub(start)
	res.Bound = s.hi
	if l, ok := s.line(); ok {
		res.Line = &l
	}
	res.Capacity = uint64(s.capacity)
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
	lo, hi   int    // largest fitting (0: none yet); smallest not fitting (max+1: none yet)
	ran      int    // trials run (not skipped)
	mode     string // "up" or "down": probing from the side a prediction landed on
	steps    int    // probes so far in mode
	xs, ys   []float64
	capacity float64 // smallest capacity seen in fitting trials; 0 unknown
}

func newSearch(lo, hi int, tol float64) *search {
	return &search{min: lo, max: hi, tol: tol, hi: hi + 1}
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
	return s.hi <= s.max && float64(s.hi-1-s.lo) <= s.tol*float64(s.hi-1)
}

// next chooses the next candidate and says why.
func (s *search) next() (int, string) {
	if s.lo == 0 {
		return s.min, "first"
	}
	upper := min(s.hi-1, s.max)
	step := func(base int) int { return max(1, int(s.tol*float64(base)/2)) << (2 * min(s.steps, 20)) }
	p, ok := s.predict()
	switch {
	case s.mode == "down":
		if c := s.hi - step(s.hi); c > s.lo {
			return c, "probe-down"
		}
	case s.mode == "up" || ok && p <= s.lo:
		if c := min(s.lo+step(s.lo), upper, 2*s.lo); c > s.lo {
			return c, "probe-up"
		}
	case ok && p <= upper:
		return p, "model"
	case ok && s.hi > s.max:
		return upper, "model"
	}
	if s.hi > s.max {
		return min(2*s.lo, s.max), "double"
	}
	return s.lo + (s.hi-s.lo)/2, "bisect"
}

// record updates the search with a trial's outcome.
func (s *search) record(c int, why string, fits bool, peak, capacity float64) {
	if fits {
		s.lo = max(s.lo, c)
		if peak > 0 {
			s.xs, s.ys = append(s.xs, float64(c)), append(s.ys, peak)
		}
		if capacity > 0 && (s.capacity == 0 || capacity < s.capacity) {
			s.capacity = capacity
		}
	} else {
		s.hi = min(s.hi, c)
	}
	// After a prediction, probe from the side it landed on, in steps of
	// half the tolerance growing fourfold, until the outcome flips: a
	// line that is a few percent off costs two or three trials, one that
	// is far off costs a logarithmic number.
	switch {
	case why == "model" && fits, why == "probe-up" && fits:
		if s.mode == "up" {
			s.steps++
		} else {
			s.mode, s.steps = "up", 0
		}
	case why == "model" && !fits, why == "probe-down" && !fits:
		if s.mode == "down" {
			s.steps++
		} else {
			s.mode, s.steps = "down", 0
		}
	default:
		s.mode, s.steps = "", 0
	}
}

// line fits peak = a + b·batch by least squares over the fitting trials.
func (s *search) line() (Line, bool) {
	n := len(s.xs)
	if n < 2 {
		return Line{}, false
	}
	var mx, my float64
	for i := range s.xs {
		mx += s.xs[i]
		my += s.ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy, syy float64
	for i := range s.xs {
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

// predict returns the largest batch the line says fits.
func (s *search) predict() (int, bool) {
	l, ok := s.line()
	if !ok || l.B <= 0 || s.capacity <= 0 {
		return 0, false
	}
	p := (s.capacity - l.A) / l.B
	return int(math.Floor(max(1, min(p, float64(s.max))))), true
}

// skip reports whether candidate c certainly does not fit by the line.
func (s *search) skip(c int, why string) bool {
	if why != "double" && why != "bisect" {
		return false
	}
	l, ok := s.line()
	distinct := map[float64]bool{}
	for _, x := range s.xs {
		distinct[x] = true
	}
	return ok && len(distinct) >= 3 && l.R2 >= 0.9 && l.B > 0 && s.capacity > 0 && l.At(c) >= 1.25*s.capacity
}
