package job

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// oracle is a job whose peak is a + b·n + q·n², rounded up to a multiple of
// round, on a GPU of capacity bytes; it fits when the peak is at most
// frac·capacity (frac < 1 plays fragmentation: the job fails before the
// free memory is all used, so the line's prediction is optimistic).
type oracle struct {
	a, b, q  float64
	round    float64
	capacity float64
	frac     float64
	memory   bool
	trials   map[int]bool
}

func (o *oracle) peak(n int) float64 {
	p := o.a + o.b*float64(n) + o.q*float64(n)*float64(n)
	if o.round > 0 {
		p = math.Ceil(p/o.round) * o.round
	}
	return p
}

func (o *oracle) fits(n int) bool { return o.peak(n) <= o.frac*o.capacity }

// truth is the largest n in [lo, hi] that fits (0: none), by bisection on
// the monotone peak.
func (o *oracle) truth(lo, hi int) int {
	if !o.fits(lo) {
		return 0
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if o.fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (o *oracle) run(_ context.Context, _ FitSpec, n int) (*Result, error) {
	if o.trials[n] {
		return nil, fmt.Errorf("batch %d run twice", n)
	}
	o.trials[n] = true
	r := &Result{Memory: o.memory, Duration: time.Second, Peak: Peak{Device: -1}}
	held := min(o.peak(n), o.capacity)
	if o.memory {
		r.Devices = []Device{{Total: uint64(o.capacity)}}
		r.Samples = []Sample{{T: 0, Job: uint64(held), JobDev: []uint64{uint64(held)}, Used: []uint64{uint64(held)}}}
		r.Peak = Peak{Bytes: uint64(held), Device: 0}
	}
	if !o.fits(n) {
		r.ExitCode = 1
		r.OOM.Detected = true
	}
	return r, nil
}

func TestFitSearch(t *testing.T) {
	const lo, hi = 1, 65536
	budget := bits.Len(uint(hi-lo+1)) - 1 + 3 // log2(range) + 3
	capacity := 80.0 * gib
	type shape struct {
		name   string
		round  float64
		q      float64
		frac   float64
		memory bool
		budget int // trials allowed
	}
	shapes := []shape{
		{"linear", 0, 0, 1, true, budget},
		{"segments of 20 MiB", 20 * mib, 0, 1, true, budget},
		{"fragmentation 4 %", 2 * mib, 0, 0.96, true, budget},
		{"superlinear", 2 * mib, 1, 1, true, budget},
		// Without memory figures the search is plain doubling and
		// bisection: log2(T)+1 to climb, about log2(1/tolerance) more.
		{"no memory figures", 0, 0, 1, false, budget + 4},
	}
	for _, sh := range shapes {
		for _, target := range []int{1, 2, 3, 7, 100, 1000, 4097, 12345, 50000, 65535, 65536} {
			t.Run(fmt.Sprintf("%s/%d", sh.name, target), func(t *testing.T) {
				// Choose b so that the linear part reaches the capacity
				// just after target.
				a := 1.0 * gib
				b := (capacity - a) / (float64(target) + 0.5)
				q := sh.q * b / 1e5
				o := &oracle{a: a, b: b, q: q, round: sh.round, capacity: capacity, frac: sh.frac, memory: sh.memory, trials: map[int]bool{}}
				truth := o.truth(lo, hi)
				res, err := fit(context.Background(), FitSpec{Args: []string{"train", "{}"}, Min: lo, Max: hi}, o.run)
				if err != nil {
					t.Fatal(err)
				}
				if truth == 0 {
					if res.Found {
						t.Fatalf("found %d, but nothing fits", res.MaxBatch)
					}
					return
				}
				if !res.Found || res.MaxBatch > truth || float64(truth-res.MaxBatch) > 0.02*float64(truth) {
					t.Errorf("answer %d, truth %d: not within 2%%; trials %v", res.MaxBatch, truth, trialList(res))
				}
				if !o.trials[res.MaxBatch] || o.fits(res.MaxBatch) != true {
					t.Errorf("the answer %d was not run and confirmed", res.MaxBatch)
				}
				t.Logf("truth %d, answer %d, %d trials: %s", truth, res.MaxBatch, res.Ran(), trialList(res))
				if n := res.Ran(); n > sh.budget {
					t.Errorf("%d trials, budget %d: %v", n, sh.budget, trialList(res))
				}
				if want := max(lo, int(math.Floor(float64(res.MaxBatch)*0.95))); res.Recommended != want {
					t.Errorf("recommended %d, want %d", res.Recommended, want)
				}
			})
		}
	}
}

func trialList(r *FitResult) string {
	var b strings.Builder
	for _, t := range r.Trials {
		fmt.Fprintf(&b, "%d:%s/%s ", t.Batch, t.Why, t.Outcome)
	}
	return b.String()
}

func TestFitNothingFits(t *testing.T) {
	o := &oracle{a: 100 * gib, b: gib, capacity: 80 * gib, frac: 1, memory: true, trials: map[int]bool{}}
	res, err := fit(context.Background(), FitSpec{Args: []string{"x", "{}"}, Min: 4, Max: 64}, o.run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Trials) != 1 || !strings.Contains(res.Stop, "even the smallest batch, 4") {
		t.Errorf("found %v, trials %v, stop %q", res.Found, trialList(res), res.Stop)
	}
}

func TestFitSkipsWhatCannotFit(t *testing.T) {
	// Memory unknown at first: no line; then a line from three sizes makes
	// a far doubling pointless. Drive the search state directly.
	s := newSearch(1, 1024, 0.02)
	for _, n := range []int{1, 2, 4} {
		s.record(n, "double", true, float64(gib+uint64(n)*gib), 80*gib)
	}
	if !s.skip(128, "double") || s.skip(8, "double") || s.skip(128, "model") {
		t.Errorf("skip rule: 128 double %v, 8 double %v, 128 model %v", s.skip(128, "double"), s.skip(8, "double"), s.skip(128, "model"))
	}
}

func TestFitSpecErrors(t *testing.T) {
	o := &oracle{trials: map[int]bool{}}
	tests := []struct {
		spec FitSpec
		want string
	}{
		{FitSpec{}, "no command"},
		{FitSpec{Args: []string{"train"}}, "has no {}"},
		{FitSpec{Args: []string{"t", "{}"}, Min: 8, Max: 4}, "want 1 ≤ min ≤ max"},
		{FitSpec{Args: []string{"t", "{}"}, Margin: 1}, "margin"},
		{FitSpec{Args: []string{"t", "{}"}, Tolerance: -1}, "tolerance"},
	}
	for _, tt := range tests {
		_, err := fit(context.Background(), tt.spec, o.run)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want %q", tt.spec, err, tt.want)
		}
	}
}
