package run_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/job/jobtest"
)

func TestRetryOOMFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--retry-oom", "3", "--", "train", "{}"}, "--retry-oom needs --batch B"},
		{[]string{"run", "--retry-oom", "-1", "--batch", "8", "--", "train", "{}"}, "--retry-oom -1: must be at least 0"},
		{[]string{"run", "--retry-oom", "1000", "--batch", "8", "--", "train", "{}"}, "at most 100 retries"},
		{[]string{"run", "--retry-oom", "3", "--batch", "8", "--", "train"}, "put {} where the batch size goes"},
		{[]string{"run", "--retry-oom", "3", "--batch", "0", "--", "train", "{}"}, "--batch 0: must be at least 1"},
		{[]string{"run", "--batch-env", "BS", "--", "train"}, "--batch-env BS needs --batch B"},
		{[]string{"run", "--batch", "8", "--batch-env", "A=B", "--", "train"}, `--batch-env "A=B": not a variable name`},
		{[]string{"run", "--retry-oom", "x", "--", "train"}, "--retry-oom"},
	} {
		te := &testEnv{}
		_, stderr, code := vram(t, te.env(nil, false), tt.args...)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

type attemptJSON struct {
	Batch    int    `json:"batch"`
	Why      string `json:"why"`
	Outcome  string `json:"outcome"`
	Peak     uint64 `json:"peak_bytes"`
	ExitCode int    `json:"exit_code"`
	Capacity uint64 `json:"capacity_bytes"`
	Need     uint64 `json:"need_bytes"`
}

// vram run --retry-oom on the fake batch job: memory 1 GiB + 4 MiB·batch
// (the largest batch that fits 10 GiB is 2304) and PyTorch's message.
func TestRunRetryOOM(t *testing.T) {
	// From 4096 (17 GiB): the capacity, 10 GiB, over the need, less 10 %.
	capBatch := int(math.Floor(4096 * 10.0 / 17 * 0.9))
	for _, tt := range []struct {
		name     string
		flags    []string
		job      []string
		env      map[string]string
		batches  []int
		outcomes []string
		code     int
	}{
		{"oom, then the capacity's batch fits", []string{"--retry-oom", "3", "--batch", "4096"}, []string{"batch", "{}"}, nil,
			[]int{4096, capBatch}, []string{"oom", "ok"}, 0},
		{"the batch in a variable", []string{"--retry-oom", "3", "--batch", "4096", "--batch-env", "VRAM_BATCH"}, []string{"batch"}, nil,
			[]int{4096, capBatch}, []string{"oom", "ok"}, 0},
		{"oom every time", []string{"--retry-oom", "2", "--batch", "64"}, []string{"batch", "{}"}, map[string]string{"VRAM_FAKEJOB_A": strconv.Itoa(12 * gib)},
			[]int{64, 47, 23}, []string{"oom", "oom", "oom"}, 1},
		{"another failure is not retried", []string{"--retry-oom", "3", "--batch", "64"}, []string{"batch", "{}"}, map[string]string{"VRAM_FAKEJOB_FAIL_ABOVE": "10"},
			[]int{64}, []string{"failed"}, 1},
		// --limit ends the job without a message: the need is unknown, the
		// batch is halved until it fits 5 GiB (1024 needs exactly 5 GiB:
		// the limit itself is hit).
		{"under --limit", []string{"--retry-oom", "4", "--batch", "4096", "--limit", "5GiB", "--grace", "1s"}, []string{"batch", "{}"}, map[string]string{"VRAM_FAKEJOB_CAP": strconv.Itoa(80 * gib)},
			[]int{4096, 2048, 1024, 512}, []string{"limit", "limit", "limit", "ok"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := jobtest.NewFileSource(dir, 10*gib)
			if tt.env["VRAM_FAKEJOB_CAP"] != "" {
				src = jobtest.NewFileSource(dir, 80*gib)
			}
			te := &testEnv{}
			t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
			t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
			t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(10*gib))
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			flags := append([]string{"run", "--interval", "10ms", "--json"}, tt.flags...)
			stdout, stderr, code := vram(t, te.env(src, false), fakeArgs(t, dir, flags, tt.job...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			out := stdout.String()
			js := out[strings.Index(out, "{\n"):] // after the job's own output
			jsondoc.Test(t, "vram run --json", []byte(js))
			var rep struct {
				ExitCode int           `json:"exit_code"`
				Attempts []attemptJSON `json:"attempts"`
			}
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var batches []int
			var outcomes []string
			for _, a := range rep.Attempts {
				batches, outcomes = append(batches, a.Batch), append(outcomes, a.Outcome)
			}
			if !equal(batches, tt.batches) || strings.Join(outcomes, " ") != strings.Join(tt.outcomes, " ") {
				t.Errorf("attempts %v %v, want %v %v\n%s", batches, outcomes, tt.batches, tt.outcomes, stderr)
			}
			if rep.ExitCode != tt.code {
				t.Errorf("JSON exit_code %d", rep.ExitCode)
			}
			for i, a := range rep.Attempts {
				line := "attempt     " + strconv.Itoa(i+1) + ": batch " + strconv.Itoa(a.Batch) + " (" + a.Why + "): " + a.Outcome
				if !strings.Contains(stderr.String(), line) {
					t.Errorf("the report lacks %q:\n%s", line, stderr)
				}
			}
			if len(rep.Attempts) > 1 && !strings.Contains(stderr.String(), "vram: retrying with batch "+strconv.Itoa(rep.Attempts[1].Batch)) {
				t.Errorf("no notice of the retry:\n%s", stderr)
			}
		})
	}
}

// A signal during an attempt (here SIGINT from the terminal, which vram
// does not forward: the job carries on and runs out of memory) means no
// further attempt.
func TestRunRetryStopsAtASignal(t *testing.T) {
	dir := t.TempDir()
	src := jobtest.NewFileSource(dir, 10*gib)
	te := &testEnv{}
	t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
	t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
	t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(10*gib))
	go func() {
		for {
			te.mu.Lock()
			c := te.sigs
			te.mu.Unlock()
			if c != nil {
				c <- syscall.SIGINT
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, stderr, code := vram(t, te.env(src, true), fakeArgs(t, dir, []string{"run", "--interval", "10ms", "--retry-oom", "3", "--batch", "4096"}, "batch", "{}")...)
	if code != 1 || !strings.Contains(stderr.String(), "no further attempt") || strings.Contains(stderr.String(), "attempt 2") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}

// --batch alone substitutes the batch and runs once, as without it.
func TestRunBatchWithoutRetry(t *testing.T) {
	dir := t.TempDir()
	src := jobtest.NewFileSource(dir, 10*gib)
	te := &testEnv{}
	t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
	t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
	t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(10*gib))
	stdout, stderr, code := vram(t, te.env(src, false), fakeArgs(t, dir, []string{"run", "--json", "--batch", "16"}, "batch", "{}")...)
	if code != 0 || !strings.Contains(stdout.String(), "batch 16 fits") || strings.Contains(stdout.String(), `"attempts"`) || strings.Contains(stderr.String(), "attempt") {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
