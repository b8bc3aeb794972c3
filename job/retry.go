package job

// OOM recovery for vram run --retry-oom. See Retry.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/vramhq/vram/internal/units"
)

// RetrySpec describes a job run again with a smaller batch each time it
// runs out of memory.
type RetrySpec struct {
	// Args is the command; every Placeholder in it is replaced by the
	// attempt's batch size. With EnvName the size also goes into that
	// environment variable (Args need not contain a placeholder then).
	Args    []string
	EnvName string
	// Batch is the first attempt's batch size (at least 1).
	Batch int
	// Retries is how many times the job may be started again after an
	// out-of-memory failure (0: run once).
	Retries int
	// Margin is taken off the batch the evidence says fits (default 0.1).
	Margin float64
	// Run is the template of each attempt's Spec. Args and the batch
	// variable are set per attempt, and VRAM_RUN_ATTEMPT (1, 2, ...) is
	// added to the environment.
	Run Spec
	// Stopped reports whether vram received a signal: no attempt starts
	// after one. nil: never.
	Stopped func() bool
	// Progress receives one line per attempt as it ends; nil discards.
	Progress io.Writer
}

// Attempt is one run of the job under Retry.
type Attempt struct {
	Batch int `json:"batch"`
	// Why says how the batch was chosen: "first" (--batch), "line" (a
	// line fitted on the earlier attempts' memory needs and the
	// capacity), "capacity" (the last attempt's need scaled to the
	// capacity) or "halve" (no figures to go on).
	Why string `json:"why"`
	// Outcome: ok (exit status 0), oom (died of an out-of-memory error),
	// limit (vram's --limit ended it), failed (any other failure: not
	// retried).
	Outcome  string  `json:"outcome"`
	Peak     uint64  `json:"peak_bytes"`
	ExitCode int     `json:"exit_code"`
	Signal   string  `json:"signal,omitempty"`
	Seconds  float64 `json:"seconds"`
	// Capacity is the memory the job could use as the evidence before
	// this attempt said (0: unknown, and for the first attempt), and Need
	// the memory this attempt needed as far as its failure tells: the
	// memory it held plus the allocation that failed (0: unknown).
	Capacity uint64 `json:"capacity_bytes"`
	Need     uint64 `json:"need_bytes"`
}

// Attempt outcomes.
const (
	AttemptOK     = "ok"
	AttemptOOM    = "oom"
	AttemptLimit  = "limit"
	AttemptFailed = "failed"
)

// AttemptEnv is the variable that tells the job which attempt it is (1 for
// the first run).
const AttemptEnv = "VRAM_RUN_ATTEMPT"

// DefaultRetryMargin is taken off the batch the evidence says fits.
const DefaultRetryMargin = 0.1

func attemptOutcome(r *Result) string {
	switch {
	case r.OOM.Detected:
		return AttemptOOM
	case r.Limit.Hit:
		return AttemptLimit
	case r.ExitCode == 0:
		return AttemptOK
	}
	return AttemptFailed
}

// Retry runs the job with batch Batch and, each time it dies of running
// out of memory (an OOM message and a failed exit, or vram's --limit ended
// it), starts it again with a smaller batch, up to Retries times. It stops
// at the first attempt that exits 0 or fails otherwise, when batch 1 ran
// out of memory, when Stopped says a signal came, or when ctx is done. The
// returned Result is the last attempt's, with Attempts listing them all;
// its exit status is the last attempt's.
//
// The job is only started again: resuming its work is up to the job, from
// its own checkpoint.
//
// The next batch comes from what the failed attempts tell (nextBatch): the
// capacity learned as vram fit learns it (capacity.go: the figures of the
// OOM message, --limit, the job's memory plus the GPU's free memory), and
// each failure's need, the memory the process held plus the allocation
// that failed. With two or more needs at different batches, a line
// need ≈ a + b·batch fitted on them gives the batch that fits the
// capacity, when it rises from a base below the capacity; otherwise the
// smallest batch's need is scaled to the capacity (need ∝ batch), but
// after a scaled batch failed too, to no more than half the last batch.
// Margin is taken off. Without a capacity or a need, the batch is halved.
// The next batch is always below the last one.
func Retry(ctx context.Context, spec RetrySpec) (*Result, error) {
	switch {
	case len(spec.Args) == 0:
		return nil, errors.New("retry: no command")
	case spec.Batch < 1:
		return nil, fmt.Errorf("retry: batch %d: want at least 1", spec.Batch)
	case spec.Retries < 0:
		return nil, fmt.Errorf("retry: %d retries: want at least 0", spec.Retries)
	case spec.EnvName == "" && !hasPlaceholder(spec.Args):
		return nil, fmt.Errorf("retry: the command has no %s for the batch size (or name a variable)", Placeholder)
	}
	if spec.Margin == 0 {
		spec.Margin = DefaultRetryMargin
	}
	if spec.Progress == nil {
		spec.Progress = io.Discard
	}
	stopped := func() bool { return ctx.Err() != nil || (spec.Stopped != nil && spec.Stopped()) }
	var (
		attempts []Attempt
		ev       evidence
		pts      []needPoint
		last     *Result
	)
	batch, why, capacity := spec.Batch, "first", 0.0
	for n := 1; ; n++ {
		run := spec.Run
		run.Env = append(batchEnv(run.Env, spec.EnvName, batch), AttemptEnv+"="+strconv.Itoa(n))
		fs := FitSpec{Args: spec.Args, Trial: run}
		r, err := runTrial(ctx, fs, batch)
		if err != nil {
			if last != nil {
				// A later attempt could not start: the earlier
				// attempts still stand.
				return nil, fmt.Errorf("retry: attempt %d (batch %d): %w", n, batch, err)
			}
			return nil, err
		}
		last = r
		a := Attempt{Batch: batch, Why: why, Outcome: attemptOutcome(r), Peak: r.Peak.Bytes, ExitCode: r.ExitCode,
			Seconds: r.Duration.Seconds(), Capacity: uint64(capacity)}
		if r.Signal != 0 {
			a.Signal = SignalName(r.Signal)
		}
		retriable := a.Outcome == AttemptOOM || a.Outcome == AttemptLimit
		if retriable {
			ev.learn(r, false, spec.Run.Limit)
			if need := attemptNeed(r); need > 0 {
				a.Need = uint64(need)
				pts = append(pts, needPoint{batch, need})
			}
		}
		attempts = append(attempts, a)
		peak := ""
		if r.Memory {
			peak = ", peak " + units.FormatBytes(a.Peak)
		}
		fmt.Fprintf(spec.Progress, "vram: attempt %d: batch %d: %s (exit status %d%s) after %s\n", n, batch, a.Outcome, a.ExitCode, peak, round(r.Duration))
		if !retriable {
			break
		}
		if stopped() {
			fmt.Fprintf(spec.Progress, "vram: a signal was received: no further attempt\n")
			break
		}
		if n > spec.Retries {
			if spec.Retries > 0 {
				fmt.Fprintf(spec.Progress, "vram: out of memory after %d retries: giving up\n", spec.Retries)
			}
			break
		}
		if batch == 1 {
			fmt.Fprintf(spec.Progress, "vram: batch 1 ran out of memory: no smaller batch to try\n")
			break
		}
		var from string
		capacity, from = ev.capacity()
		batch, why = nextBatch(batch, capacity, pts, spec.Margin)
		switch why {
		case "halve":
			fmt.Fprintf(spec.Progress, "vram: retrying with batch %d (half: no memory figures to go on)\n", batch)
		default:
			fmt.Fprintf(spec.Progress, "vram: retrying with batch %d (%s: the job can use about %s, from %s)\n", batch, why, units.FormatBytes(uint64(capacity)), from)
		}
	}
	last.Attempts = attempts
	return last, nil
}

// batchEnv is env (nil: vram's environment) with name=batch added; env
// itself when name is "".
func batchEnv(env []string, name string, batch int) []string {
	if env == nil {
		env = os.Environ()
	}
	out := append([]string(nil), env...)
	if name != "" {
		out = append(out, name+"="+strconv.Itoa(batch))
	}
	return out
}

// needPoint is a failed attempt's batch and the memory it needed at least.
type needPoint struct {
	batch int
	need  float64
}

// attemptNeed is the memory a failed attempt needed at least, in the terms
// of the samples: what its process held when the allocation failed (the
// message's "in use", else the peak) plus the allocation that failed. 0
// when the message states no request.
func attemptNeed(r *Result) float64 {
	m := r.OOM.Message
	if m == nil || m.Tried == 0 {
		return 0
	}
	var held uint64
	for _, h := range m.Holders {
		if h.PID == 0 {
			held = h.Bytes
		}
	}
	if r.Memory {
		held = max(held, r.Peak.Bytes)
	}
	if held == 0 {
		return 0
	}
	return float64(held + m.Tried)
}

// nextBatch chooses the batch after last ran out of memory, from the
// capacity (0 unknown) and the needs of the failed attempts, and says
// why: "line", "capacity" or "halve". The result is in [1, last-1].
func nextBatch(last int, capacity float64, pts []needPoint, margin float64) (int, string) {
	half := max(1, last/2)
	if capacity <= 0 || len(pts) == 0 {
		return half, "halve"
	}
	var p float64
	why := "capacity"
	s := &search{}
	for _, pt := range pts {
		s.xs, s.ys = append(s.xs, float64(pt.batch)), append(s.ys, pt.need)
	}
	line := false
	if l, ok := s.line(); ok && l.B > 0 && l.A >= 0 && l.A < capacity {
		p, why, line = (capacity-l.A)/l.B, "line", true
	} else {
		// The smallest batch's need: with memory a + b·batch and a > 0,
		// the need per element is largest there, the safest scale.
		pt := pts[0]
		for _, q := range pts {
			if q.batch < pt.batch {
				pt = q
			}
		}
		p = capacity / pt.need * float64(pt.batch)
	}
	n := int(math.Floor(p * (1 - margin)))
	if n >= last || math.IsNaN(p) {
		// The figures say the failed batch fits: they are wrong about
		// this job, so fall back to halving.
		return half, "halve"
	}
	if !line && len(pts) > 1 && n > half {
		// A scaled need already proved too small (a process that fails
		// holds about the capacity, so its need is little more than the
		// capacity): do not trust it for less than halving.
		return half, "halve"
	}
	return max(1, n), why
}
