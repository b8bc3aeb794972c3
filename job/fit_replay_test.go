package job

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"
)

// The searches of scripts/gpu/fit_check.sh on the H200 (2026-12-02),
// replayed: a fake job whose peak at each batch interpolates the peaks the
// real trials measured, and that fits up to a true maximum the real
// trials bracket. The figures come from the runs' own files
// (docs/gpu-runs/2026-12-02/RUN/NAME.json and NAME.err), not from copies:
// fit/ (the four searches side by side on the GPU, with the search before
// the windows) and fit-2/ (the four alone on the GPU, with the first
// window search).
const replayRoot = "../docs/gpu-runs/2026-12-02"

// point is a batch and the peak its trial measured.
type point struct {
	batch int
	peak  float64
}

// replayJob is a recorded job: fitting and failing trials' peaks, the cap
// that stopped it (PyTorch's allowed figure plus the non-PyTorch memory of
// the OOM message, or vram's --limit), and what the GPU had free.
type replayJob struct {
	name        string
	fits, fails []point // by batch
	max         int     // the largest batch that fits
	allowed     float64 // the cap inside the job (0: none)
	other       float64 // the OOM message's non-PyTorch memory
	limit       float64 // vram --limit (0: none)
	upper       float64 // the job's memory plus the GPU's free memory at each peak
	total       float64
	trials      map[int]bool
}

// interp is the peak at n, linear between the measured points, level
// beyond the first, and along the last segment beyond the last.
func interp(ps []point, n int) float64 {
	x := float64(n)
	if len(ps) == 1 || n <= ps[0].batch {
		return ps[0].peak
	}
	for i := 1; i < len(ps); i++ {
		if n <= ps[i].batch {
			a, b := ps[i-1], ps[i]
			return a.peak + (b.peak-a.peak)*(x-float64(a.batch))/float64(b.batch-a.batch)
		}
	}
	a, b := ps[len(ps)-2], ps[len(ps)-1]
	return b.peak + (b.peak-a.peak)*(x-float64(b.batch))/float64(b.batch-a.batch)
}

func (j *replayJob) run(_ context.Context, _ FitSpec, n int) (*Result, error) {
	if j.trials[n] {
		return nil, fmt.Errorf("batch %d run twice", n)
	}
	j.trials[n] = true
	fits := n <= j.max
	held := interp(j.fails, n)
	if fits {
		held = interp(j.fits, n)
		if j.limit > 0 {
			held = min(held, j.limit) // a trial that fitted stayed under the limit
		}
	}
	h := uint64(held)
	r := &Result{Memory: true, Duration: time.Second,
		Devices: []Device{{Total: uint64(j.total)}},
		Samples: []Sample{{T: 0, Job: h, JobDev: []uint64{h}, Used: []uint64{uint64(held + j.total - j.upper)}}},
		Peak:    Peak{Bytes: h, Device: 0}}
	switch {
	case fits:
	case j.limit > 0:
		r.ExitCode = 143
		r.Limit = LimitEvent{Hit: true, Bytes: h, Cap: uint64(j.limit)}
	default:
		r.ExitCode = 1
		r.OOM = OOM{Detected: true, Message: &Message{Framework: "pytorch", GPU: 0, Allowed: uint64(j.allowed),
			Holders: []Holder{{PID: 0, Bytes: h}}, Allocated: uint64(held - j.other - 20*mib), Unallocated: 20 * mib,
			Capacity: uint64(j.total), Free: uint64(j.upper - held)}}
	}
	return r, nil
}

// canUse matches vram fit's progress lines "fit: the job can use about
// 29.82 GiB (from ...)".
var canUse = regexp.MustCompile(`fit: the job can use about ([0-9.]+) GiB \(from (.+)\)$`)

// loadReplay reads run name's trials and progress. max is the true maximum
// to replay: it must agree with the recorded outcomes.
func loadReplay(t *testing.T, run, name string, max int, total float64) *replayJob {
	t.Helper()
	dir := filepath.Join(replayRoot, run)
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Command []string `json:"command"`
		Trials  []struct {
			Batch   int     `json:"batch"`
			Outcome Outcome `json:"outcome"`
			Peak    float64 `json:"peak_bytes"`
		} `json:"trials"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	j := &replayJob{name: name, max: max, total: total, upper: total, trials: map[int]bool{}}
	for _, tr := range doc.Trials {
		p := point{tr.Batch, tr.Peak}
		fits := tr.Outcome == Fits || tr.Outcome == TimeOut
		if fits != (tr.Batch <= max) {
			t.Fatalf("%s: batch %d %s, but the replay's maximum is %d", name, tr.Batch, tr.Outcome, max)
		}
		if fits {
			j.fits = append(j.fits, p)
		} else {
			j.fails = append(j.fails, p)
		}
	}
	for _, ps := range [][]point{j.fits, j.fails} {
		sort.Slice(ps, func(a, b int) bool { return ps[a].batch < ps[b].batch })
	}
	// The cap: --cap-gib in the command (PyTorch's fraction), or --limit.
	for i, a := range doc.Command {
		if a == "--cap-gib" && i+1 < len(doc.Command) {
			v, err := strconv.ParseFloat(doc.Command[i+1], 64)
			if err != nil {
				t.Fatal(err)
			}
			j.allowed = v * gib
		}
	}
	e, err := os.ReadFile(filepath.Join(dir, name+".err"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range regexp.MustCompile(`\n`).Split(string(e), -1) {
		m := canUse.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "the job's memory and the GPU's free memory":
			j.upper = min(j.upper, v*gib)
		case "the figures of the out-of-memory message (allowed)":
			j.other = v*gib - j.allowed
		case "--limit":
			j.limit = v * gib
		}
	}
	if j.allowed > 0 && j.other <= 0 {
		t.Fatalf("%s: a cap inside the job, but no capacity from the OOM message in %s.err", name, name)
	}
	if j.allowed == 0 && j.limit == 0 {
		t.Fatalf("%s: neither --cap-gib nor --limit", name)
	}
	return j
}

// h200 is the H200's memory as nvidia-smi reports it (143771 MiB).
const h200 = 143771 * mib

// replays are the recorded searches: the run's directory, the search's
// name, the true maxima its recorded outcomes allow (every one is
// replayed), and the trials the search took on the GPU.
var replays = []struct {
	run, name string
	max       []int
	recorded  int
}{
	// fit/: side by side on the GPU, the search before the windows.
	{"fit", "resnet50_cap", []int{92, 93}, 11},   // 92 fitted, 94 ran out of memory
	{"fit", "resnet50_limit", []int{70, 71}, 10}, // 70 fitted, 72 passed the limit
	{"fit", "gpt2_cap", []int{11}, 5},            // 11 fitted, 12 ran out of memory
	{"fit", "gpt2_limit", []int{10}, 4},          // 10 fitted, 11 passed the limit
	// fit-2/: alone on the GPU, the first window search.
	{"fit-2", "resnet50_cap", []int{93}, 11},  // 93 fitted, 94 ran out of memory
	{"fit-2", "resnet50_limit", []int{71}, 7}, // 71 fitted, 72 passed the limit
	{"fit-2", "gpt2_cap", []int{11}, 5},       // 11 fitted, 12 ran out of memory
	{"fit-2", "gpt2_limit", []int{10}, 4},     // 10 fitted, 11 passed the limit
}

// TestFitReplaysH200 holds the search to 8 trials on the searches of the
// H200 checks (ResNet-50 and GPT-2, each under a cap inside the job and
// under --limit), for every true maximum the recorded trials allow, with
// the right answer, and never a batch at or above one that failed.
func TestFitReplaysH200(t *testing.T) {
	for _, tt := range replays {
		for _, max := range tt.max {
			t.Run(fmt.Sprintf("%s/%s/%d", tt.run, tt.name, max), func(t *testing.T) {
				j := loadReplay(t, tt.run, tt.name, max, h200)
				spec := FitSpec{Args: []string{"train", "{}"}}
				spec.Trial.Limit = Limit{Bytes: uint64(j.limit)}
				res, err := fit(context.Background(), spec, j.run)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d trials (recorded %d): %s", res.Ran(), tt.recorded, trialList(res))
				checkAnswer(t, res, 1, max, j.trials, 8)
				failed := math.MaxInt
				for _, tr := range res.Trials {
					if tr.Batch >= failed {
						t.Errorf("tried %d after %d failed", tr.Batch, failed)
					}
					if tr.Outcome != Fits {
						failed = min(failed, tr.Batch)
					}
				}
			})
		}
	}
}

// noisyJob is a job whose memory is harder than the oracle's: it grows
// faster than linearly, its peaks carry noise, and under a cap inside the
// job it fits past its unpressured peak (PyTorch's allocator giving back
// a cache share r of what it reserves), its peak then staying at the cap.
type noisyJob struct {
	ctx, a, b, k, r, noise float64
	allowed, limit         float64
	trials                 map[int]bool
	seed                   uint64
}

func (j *noisyJob) unpressured(n int) float64 {
	x := float64(n)
	return j.ctx + j.a + j.b*x*(1+j.k*x)
}

func (j *noisyJob) fits(n int) bool {
	if j.limit > 0 {
		return j.unpressured(n) <= j.limit
	}
	return j.a+j.b*float64(n)*(1+j.k*float64(n))/j.r <= j.allowed
}

func (j *noisyJob) run(_ context.Context, _ FitSpec, n int) (*Result, error) {
	if j.trials[n] {
		return nil, fmt.Errorf("batch %d run twice", n)
	}
	j.trials[n] = true
	j.seed = j.seed*6364136223846793005 + 1442695040888963407
	wobble := 1 + j.noise*(float64(j.seed>>11)/(1<<53)*2-1)
	fits := j.fits(n)
	held := j.unpressured(n) * wobble
	switch {
	case j.limit > 0 && !fits:
		held = j.limit + 50*mib // sampled just after it passed the limit
	case j.limit > 0:
		held = min(held, j.limit)
	default:
		held = min(held, (j.allowed+j.ctx)*wobble)
	}
	h := uint64(held)
	r := &Result{Memory: true, Duration: time.Second, Devices: []Device{{Total: h200}},
		Samples: []Sample{{JobDev: []uint64{h}, Job: h, Used: []uint64{h}}}, Peak: Peak{Bytes: h}}
	switch {
	case fits:
	case j.limit > 0:
		r.ExitCode = 143
		r.Limit = LimitEvent{Hit: true, Bytes: h, Cap: uint64(j.limit)}
	default:
		r.ExitCode = 1
		r.OOM = OOM{Detected: true, Message: &Message{Framework: "pytorch", GPU: 0, Allowed: uint64(j.allowed),
			Holders: []Holder{{PID: 0, Bytes: h}}, Allocated: uint64(max(0, held-j.ctx-20*mib)), Unallocated: 20 * mib,
			Capacity: h200, Free: uint64(h200 - held)}}
	}
	return r, nil
}

// TestFitNoisyJobs: on jobs the line fits badly, the search still finds
// the maximum to the tolerance, never runs a size twice nor one at or
// above a size that failed, and stays within 15 trials (600 jobs: 7.83
// trials on average, 13 at most; the search before the windows needed
// 8.3 and 18).
func TestFitNoisyJobs(t *testing.T) {
	hist := map[int]int{}
	for i := 0; i < 600; i++ {
		seed := uint64(i)*2654435761 + 1
		pick := func(vs ...float64) float64 {
			seed = seed*6364136223846793005 + 1442695040888963407
			return vs[int(seed>>33)%len(vs)]
		}
		j := &noisyJob{ctx: 0.6 * gib, a: pick(0.2, 0.5, 2) * gib, b: pick(2, 10, 95, 900) * mib,
			r: pick(1, 1.1, 1.2, 1.3), noise: pick(0, 0.005, 0.02), trials: map[int]bool{}, seed: seed}
		spec := FitSpec{Args: []string{"train", "{}"}}
		capacity := pick(8, 16, 40) * gib
		if pick(0, 1) == 1 {
			j.limit = capacity
			spec.Trial.Limit = Limit{Bytes: uint64(j.limit)}
		} else {
			j.allowed = capacity
		}
		// The memory per sample at the linear maximum is up to 65 % above
		// the line's slope (as the oracle's superlinear shape).
		j.k = pick(0, 0, 0.1, 0.3, 0.65) * j.b / (capacity - j.a)
		truth := 0
		for n := 1; n <= 65536 && j.fits(n); n++ {
			truth = n
		}
		res, err := fit(context.Background(), spec, j.run)
		if err != nil {
			t.Fatalf("%+v: %v", *j, err)
		}
		checkAnswer(t, res, 1, truth, j.trials, 15)
		failed := math.MaxInt
		for _, tr := range res.Trials {
			if tr.Batch >= failed {
				t.Errorf("%+v: tried %d after %d failed: %s", *j, tr.Batch, failed, trialList(res))
			}
			if tr.Outcome != Fits {
				failed = min(failed, tr.Batch)
			}
		}
		if t.Failed() {
			t.Fatalf("job %+v, truth %d: %s", *j, truth, trialList(res))
		}
		hist[res.Ran()]++
	}
	t.Logf("trials: %v", hist)
}
