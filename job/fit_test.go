package job

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// oracle is a job whose peak is a + b·n + q·n², rounded up to a multiple of
// round, on a GPU of card bytes where other processes hold others. It runs
// out of memory when its peak passes frac times the memory it may use: the
// card's free memory, or a cap set inside the job (inner: PyTorch's
// per-process fraction, in terms of PyTorch's reserved memory; the job's
// CUDA context, ctx, comes on top), or vram's watchdog limit. frac < 1
// plays fragmentation: the job fails before the free memory is all used,
// so the figures are optimistic. Its OOM message states PyTorch's figures
// unless bare.
type oracle struct {
	a, b, q float64
	round   float64
	card    float64
	others  float64
	inner   float64 // 0: no cap inside the job
	ctx     float64
	limit   float64 // vram --limit; 0 none
	frac    float64
	memory  bool
	bare    bool // the OOM message states no figures
	trials  map[int]bool
}

func (o *oracle) peak(n int) float64 {
	p := o.a + o.b*float64(n) + o.q*float64(n)*float64(n)
	if o.round > 0 {
		p = math.Ceil(p/o.round) * o.round
	}
	return p
}

// usable is the most the job may hold.
func (o *oracle) usable() float64 {
	u := o.card - o.others
	if o.inner > 0 {
		u = min(u, o.inner+o.ctx)
	}
	if o.limit > 0 {
		u = min(u, o.limit)
	}
	return u
}

func (o *oracle) fits(n int) bool { return o.peak(n) <= o.frac*o.usable() }

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
	fits := o.fits(n)
	held := o.peak(n)
	if !fits {
		// It got as far as the memory it may use (less with
		// fragmentation), and no further.
		held = min(held, o.frac*o.usable())
	}
	if o.memory {
		r.Devices = []Device{{Total: uint64(o.card)}}
		r.Samples = []Sample{{T: 0, Job: uint64(held), JobDev: []uint64{uint64(held)}, Used: []uint64{uint64(held + o.others)}}}
		r.Peak = Peak{Bytes: uint64(held), Device: 0}
	}
	switch {
	case fits:
	case o.limit > 0 && o.peak(n) > o.limit && o.limit <= o.usable():
		r.ExitCode = 143
		r.Limit = LimitEvent{Hit: true, Bytes: uint64(o.limit), Cap: uint64(o.limit)}
	default:
		r.ExitCode = 1
		m := &Message{Framework: "pytorch", GPU: -1}
		if !o.bare {
			m.Tried = uint64(o.peak(n) - held)
			m.Capacity = uint64(o.card)
			m.Free = uint64(o.card - o.others - held)
			m.Holders = []Holder{{PID: 0, Bytes: uint64(held)}}
			m.Allocated = uint64(max(0, held-o.ctx-20*mib))
			m.Unallocated = 20 * mib
			if o.inner > 0 {
				m.Allowed = uint64(o.inner)
			}
		}
		r.OOM = OOM{Detected: true, Message: m}
	}
	return r, nil
}

// targets are true maxima spread over [1, 65536].
var targets = []int{1, 2, 3, 5, 7, 10, 33, 100, 170, 257, 1000, 1480, 4097, 12345, 30000, 50000, 65535, 65536}

func TestFitSearchWithMemoryFigures(t *testing.T) {
	const lo, hi = 1, 65536
	type shape struct {
		name                string
		round, q, frac      float64
		card, others, inner float64
		limit               float64
		bare                bool
		budget              int // trials allowed
	}
	shapes := []shape{
		{name: "linear, whole GPU", frac: 1, card: 80 * gib, budget: 8},
		{name: "segments of 20 MiB", round: 20 * mib, frac: 1, card: 80 * gib, budget: 8},
		{name: "other processes hold 30 GiB", round: 2 * mib, frac: 1, card: 80 * gib, others: 30 * gib, budget: 8},
		// The case: a 16 GiB fraction inside the job on a card
		// with 140 GiB free; the OOM message says "allowed".
		{name: "cap inside the job", round: 2 * mib, frac: 1, card: 140 * gib, inner: 16 * gib, budget: 8},
		// The same cap, but the message states no figures: only the
		// peaks of the failed trials tell.
		{name: "cap inside, bare message", round: 2 * mib, frac: 1, card: 140 * gib, inner: 16 * gib, bare: true, budget: 10},
		{name: "vram --limit", round: 2 * mib, frac: 1, card: 140 * gib, limit: 16 * gib, budget: 8},
		{name: "fragmentation 4 %", round: 2 * mib, frac: 0.96, card: 80 * gib, budget: 10},
		// Memory that grows faster than the batch (up to 65 % above the
		// line at the top) misleads the line: about as many trials as
		// bisection.
		{name: "superlinear", round: 2 * mib, q: 1, frac: 1, card: 80 * gib, budget: 13},
	}
	for _, sh := range shapes {
		for _, target := range targets {
			t.Run(fmt.Sprintf("%s/%d", sh.name, target), func(t *testing.T) {
				o := &oracle{round: sh.round, card: sh.card, others: sh.others, inner: sh.inner, ctx: 500 * mib,
					limit: sh.limit, frac: sh.frac, memory: true, bare: sh.bare, trials: map[int]bool{}}
				// Choose b so that the linear part reaches the usable
				// memory just after target.
				o.a = 1.0 * gib
				o.b = (o.usable() - o.a) / (float64(target) + 0.5)
				o.q = sh.q * o.b / 1e5
				spec := FitSpec{Args: []string{"train", "{}"}, Min: lo, Max: hi}
				spec.Trial.Limit = Limit{Bytes: uint64(sh.limit)}
				res, err := fit(context.Background(), spec, o.run)
				if err != nil {
					t.Fatal(err)
				}
				checkAnswer(t, res, lo, o.truth(lo, hi), o.trials, sh.budget)
				t.Logf("%d trials: %s", res.Ran(), trialList(res))
			})
		}
	}
}

// checkAnswer holds a search's answer to 2 % of truth, run and fitting,
// in at most budget trials.
func checkAnswer(t *testing.T, res *FitResult, minBatch, truth int, ran map[int]bool, budget int) {
	t.Helper()
	if truth == 0 {
		if res.Found {
			t.Fatalf("found %d, but nothing fits", res.MaxBatch)
		}
		return
	}
	if !res.Found || res.MaxBatch > truth || float64(truth-res.MaxBatch) > 0.02*float64(truth) {
		t.Errorf("answer %d, truth %d: not within 2%%; trials %v", res.MaxBatch, truth, trialList(res))
	}
	if !ran[res.MaxBatch] {
		t.Errorf("the answer %d was not run", res.MaxBatch)
	}
	if n := res.Ran(); n > budget {
		t.Errorf("%d trials, budget %d: %v", n, budget, trialList(res))
	}
	if want := max(minBatch, int(math.Floor(float64(res.MaxBatch)*0.95))); res.Recommended != want {
		t.Errorf("recommended %d, want %d", res.Recommended, want)
	}
}

// threshold is a job without memory figures that fits up to max.
type threshold struct {
	max    int
	trials map[int]bool
}

func (j *threshold) run(_ context.Context, _ FitSpec, n int) (*Result, error) {
	if j.trials[n] {
		return nil, fmt.Errorf("batch %d run twice", n)
	}
	j.trials[n] = true
	r := &Result{Peak: Peak{Device: -1}}
	if n > j.max {
		r.ExitCode, r.OOM = 1, OOM{Detected: true, Message: &Message{Framework: "pytorch", GPU: -1}}
	}
	return r, nil
}

// Without memory figures, after the first trial at Min the search bisects
// in log space: at most 12 trials for every true maximum in [1, 65536].
func TestFitSearchWithoutMemoryFigures(t *testing.T) {
	const lo, hi, budget = 1, 65536, 12
	step := 1
	if testing.Short() {
		step = 97
	}
	worst, worstAt := 0, 0
	for truth := 0; truth <= hi; truth += step {
		j := &threshold{max: truth, trials: map[int]bool{}}
		res, err := fit(context.Background(), FitSpec{Args: []string{"train", "{}"}, Min: lo, Max: hi}, j.run)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ran() > worst {
			worst, worstAt = res.Ran(), truth
		}
		if res.Trials[0].Batch != lo {
			t.Fatalf("truth %d: first trial at %d, want --min %d", truth, res.Trials[0].Batch, lo)
		}
		checkAnswer(t, res, lo, truth, j.trials, budget)
		if t.Failed() {
			t.Fatalf("truth %d", truth)
		}
	}
	t.Logf("most trials: %d (truth %d)", worst, worstAt)
}

// The table of the search over a few maxima and ranges.
func TestFitSearchWithoutMemoryFiguresRanges(t *testing.T) {
	tests := []struct {
		min, max, truth, budget int
	}{
		{1, 64, 0, 1},
		{1, 64, 64, 9},
		{8, 8, 8, 1},
		{16, 4096, 100, 10},
		{1, 1 << 20, 777777, 13},
	}
	for _, tt := range tests {
		j := &threshold{max: tt.truth, trials: map[int]bool{}}
		res, err := fit(context.Background(), FitSpec{Args: []string{"train", "{}"}, Min: tt.min, Max: tt.max}, j.run)
		if err != nil {
			t.Fatal(err)
		}
		truth := min(tt.truth, tt.max)
		if truth < tt.min {
			truth = 0
		}
		checkAnswer(t, res, tt.min, truth, j.trials, tt.budget)
		if truth > 0 && res.Recommended < tt.min {
			t.Errorf("%+v: recommended %d below min", tt, res.Recommended)
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
	o := &oracle{a: 100 * gib, b: gib, card: 80 * gib, frac: 1, memory: true, trials: map[int]bool{}}
	res, err := fit(context.Background(), FitSpec{Args: []string{"x", "{}"}, Min: 4, Max: 64}, o.run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Trials) != 1 || !strings.Contains(res.Stop, "even the smallest batch, 4") {
		t.Errorf("found %v, trials %v, stop %q", res.Found, trialList(res), res.Stop)
	}
}

// The search never tries a size at or above one that failed, and never
// one above what its capacity evidence allows by the fitted line.
func TestFitNeverTriesWhatItsEvidenceRulesOut(t *testing.T) {
	for _, target := range targets {
		o := &oracle{a: gib, round: 2 * mib, card: 140 * gib, inner: 16 * gib, ctx: 500 * mib, frac: 1, memory: true, trials: map[int]bool{}}
		o.b = (o.usable() - o.a) / (float64(target) + 0.5)
		res, err := fit(context.Background(), FitSpec{Args: []string{"train", "{}"}, Max: 65536}, o.run)
		if err != nil {
			t.Fatal(err)
		}
		smallestFailed := math.MaxInt
		learned := false
		for _, tr := range res.Trials {
			if tr.Batch >= smallestFailed {
				t.Errorf("target %d: tried %d after %d failed: %s", target, tr.Batch, smallestFailed, trialList(res))
			}
			// Once a message stated the cap, no candidate is predicted
			// by the line to need more than 1.25 times the cap.
			if learned && tr.Predicted > 0 && float64(tr.Predicted) > 1.25*o.usable() {
				t.Errorf("target %d: batch %d predicted %d bytes, cap %g: %s", target, tr.Batch, tr.Predicted, o.usable(), trialList(res))
			}
			if tr.Outcome != Fits {
				smallestFailed = min(smallestFailed, tr.Batch)
				learned = true
			}
		}
	}
}

func TestMessageCapacity(t *testing.T) {
	tests := []struct {
		name  string
		m     Message
		want  uint64
		exact bool
	}{
		{"allowed: the cap plus non-PyTorch memory", Message{Allowed: 16 * gib, Allocated: 15 * gib, Unallocated: gib / 2, Holders: []Holder{{0, 15*gib + gib/2 + 300*mib}}, Capacity: 140 * gib, Free: 100 * gib}, 16*gib + 300*mib, true},
		{"allowed beyond the GPU's free memory", Message{Allowed: 100 * gib, Allocated: 15 * gib, Holders: []Holder{{0, 16 * gib}}, Capacity: 140 * gib, Free: 10 * gib}, 26 * gib, true},
		{"allowed, more reserved than in use", Message{Allowed: 16 * gib, Allocated: 17 * gib, Holders: []Holder{{0, 16 * gib}}}, 16 * gib, true},
		{"allowed alone", Message{Allowed: 8 * gib}, 8 * gib, true},
		{"in use plus free", Message{Capacity: 80 * gib, Free: 2 * gib, Holders: []Holder{{1234, 30 * gib}, {0, 48 * gib}}}, 50 * gib, false},
		{"another process only", Message{Capacity: 80 * gib, Free: 2 * gib, Holders: []Holder{{1234, 30 * gib}}}, 0, false},
		{"free above capacity", Message{Capacity: gib, Free: 2 * gib, Holders: []Holder{{0, gib}}}, 0, false},
		{"no figures", Message{}, 0, false},
	}
	for _, tt := range tests {
		got, exact := MessageCapacity(tt.m)
		if got != tt.want || exact != tt.exact {
			t.Errorf("%s: %d, %v; want %d, %v", tt.name, got, exact, tt.want, tt.exact)
		}
	}
	// From a real message.
	m, ok := MatchLine("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 123.31 GiB is free. Including non-PyTorch memory, this process has 16.48 GiB memory in use. 16.00 GiB allowed; Of the allocated memory 15.70 GiB is allocated by PyTorch, and 238.00 MiB is reserved by PyTorch but unallocated.")
	if !ok {
		t.Fatal("no match")
	}
	got, exact := MessageCapacity(m)
	want := 16*gib + (16.48*gib - 15.70*gib - 238*mib)
	if !exact || math.Abs(float64(got)-want) > mib {
		t.Errorf("real message: %d, %v; want %.0f", got, exact, want)
	}
}

// FuzzMessageCapacity: whatever the line, the capacity read from it is
// never below a stated allowed figure unless the GPU's own figures bound
// it, and never more than the figures could add up to.
func FuzzMessageCapacity(f *testing.F) {
	f.Add("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 123.31 GiB is free. Including non-PyTorch memory, this process has 16.48 GiB memory in use. 16.00 GiB allowed; Of the allocated memory 15.70 GiB is allocated by PyTorch, and 238.00 MiB is reserved by PyTorch but unallocated.")
	f.Add("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 11.88 MiB is free. Including non-PyTorch memory, this process has 79.13 GiB memory in use. Of the allocated memory 78.40 GiB is allocated by PyTorch, and 226.56 MiB is reserved by PyTorch but unallocated.")
	f.Add("CUDA out of memory. Tried to allocate 99999999999999999999999 TiB. GPU 0 has a total capacity of 1e308 TiB of which 1e308 TiB is free. this process has 1e308 TiB memory in use. 1e308 TiB allowed;")
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := MatchLine(line)
		if !ok {
			return
		}
		c, exact := MessageCapacity(m)
		if exact != (m.Allowed > 0) {
			t.Fatalf("exact %v with allowed %d", exact, m.Allowed)
		}
		var inUse uint64
		for _, h := range m.Holders {
			if h.PID == 0 {
				inUse = h.Bytes
			}
		}
		if exact && c < m.Allowed && c != inUse+m.Free {
			t.Fatalf("capacity %d below allowed %d: %+v", c, m.Allowed, m)
		}
		if !exact && c != 0 && c != inUse+m.Free {
			t.Fatalf("capacity %d, in use %d + free %d", c, inUse, m.Free)
		}
	})
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
