package job_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/job"
)

// Retry on the fake batch job, whose memory is A + B·batch on a GPU of
// CAP: its PyTorch message states the figures (in use, free, the request)
// unless VRAM_FAKEJOB_BARE is set.
func TestRetry(t *testing.T) {
	// The batch that the capacity and one failure's need give: the need
	// scaled to the capacity, less the 10 % margin.
	scaled := func(batch int, capacity, need float64) int {
		return int(math.Floor(capacity / need * float64(batch) * 0.9))
	}
	const cap10 = 10 * gib
	type want struct {
		batch   int
		why     string
		outcome string
	}
	for _, tt := range []struct {
		name    string
		a, b    uint64
		env     []string
		noMem   bool
		envName string
		batch   int
		retries int
		stopped bool
		want    []want
		code    int
	}{
		{"oom then fits at the capacity's batch", gib, 4 * mib, nil, false, "", 4096, 3, false, []want{
			{4096, "first", "oom"}, {scaled(4096, cap10, gib+4096*4*mib), "capacity", "ok"}}, 0},
		{"batch in the environment", gib, 4 * mib, nil, false, "VRAM_BATCH", 4096, 3, false, []want{
			{4096, "first", "oom"}, {scaled(4096, cap10, gib+4096*4*mib), "capacity", "ok"}}, 0},
		{"without memory figures the message's figures serve", gib, 4 * mib, nil, true, "", 4096, 3, false, []want{
			{4096, "first", "oom"}, {scaled(4096, cap10, gib+4096*4*mib), "capacity", "ok"}}, 0},
		// 4 GiB + 4 MiB·batch: the first retry, scaled from 8192 (36 GiB),
		// is 2048 (12 GiB) and fails; the line through both needs gives
		// (10−4) GiB / 4 MiB = 1536, less the margin.
		{"a line through two failures", 4 * gib, 4 * mib, nil, false, "", 8192, 3, false, []want{
			{8192, "first", "oom"}, {scaled(8192, cap10, 4*gib+8192*4*mib), "capacity", "oom"}, {1536 * 9 / 10, "line", "ok"}}, 0},
		{"a message without sizes: halve", gib, 4 * mib, []string{"VRAM_FAKEJOB_BARE=1"}, true, "", 4096, 3, false, []want{
			{4096, "first", "oom"}, {2048, "halve", "ok"}}, 0},
		{"out of memory every time until the retries run out", 12 * gib, 4 * mib, nil, false, "", 64, 2, false, []want{
			{64, "first", "oom"}, {0, "capacity", "oom"}, {0, "halve", "oom"}}, 1},
		{"no retry asked", gib, 4 * mib, nil, false, "", 4096, 0, false, []want{{4096, "first", "oom"}}, 1},
		{"another failure is not retried", gib, 4 * mib, []string{"VRAM_FAKEJOB_FAIL_ABOVE=10"}, false, "", 64, 3, false, []want{{64, "first", "failed"}}, 1},
		{"a signal stops the retries", gib, 4 * mib, nil, false, "", 4096, 3, true, []want{{4096, "first", "oom"}}, 1},
		{"batch 1 is the end", 12 * gib, 4 * mib, nil, false, "", 1, 3, false, []want{{1, "first", "oom"}}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, cap10)
			args := []string{"batch", "{}"}
			if tt.envName != "" {
				args = []string{"batch"}
			}
			run := f.spec(args...)
			run.Stderr = &bytes.Buffer{}
			run.Env = append(run.Env, "VRAM_FAKEJOB_A="+itoa(int(tt.a)), "VRAM_FAKEJOB_B="+itoa(int(tt.b)), "VRAM_FAKEJOB_CAP="+itoa(cap10))
			run.Env = append(run.Env, tt.env...)
			if tt.noMem {
				run.Source, run.SourceNote = nil, "no NVML"
			}
			var progress bytes.Buffer
			res, err := job.Retry(context.Background(), job.RetrySpec{Args: run.Args, EnvName: tt.envName, Batch: tt.batch, Retries: tt.retries,
				Run: run, Stopped: func() bool { return tt.stopped }, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Attempts) != len(tt.want) {
				t.Fatalf("%d attempts %+v, want %d\n%s", len(res.Attempts), res.Attempts, len(tt.want), &progress)
			}
			for i, w := range tt.want {
				a := res.Attempts[i]
				if (w.batch != 0 && a.Batch != w.batch) || a.Why != w.why || a.Outcome != w.outcome {
					t.Errorf("attempt %d: batch %d (%s) %s, want %d (%s) %s", i+1, a.Batch, a.Why, a.Outcome, w.batch, w.why, w.outcome)
				}
				if i > 0 && a.Batch >= res.Attempts[i-1].Batch {
					t.Errorf("attempt %d: batch %d not below %d", i+1, a.Batch, res.Attempts[i-1].Batch)
				}
				if a.Outcome == "oom" && !tt.noMem && a.Peak == 0 {
					t.Errorf("attempt %d: no peak", i+1)
				}
			}
			if res.ExitCode != tt.code || res.Attempts[len(res.Attempts)-1].ExitCode != tt.code {
				t.Errorf("exit %d, want %d", res.ExitCode, tt.code)
			}
			if tt.stopped && !strings.Contains(progress.String(), "no further attempt") {
				t.Errorf("progress does not say why it stopped:\n%s", &progress)
			}
			var b bytes.Buffer
			if err := res.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			jsondoc.Test(t, "vram run --json", b.Bytes())
			var text bytes.Buffer
			res.WriteText(&text)
			if n := strings.Count(text.String(), "  attempt "); n != len(tt.want) {
				t.Errorf("report lists %d attempts, want %d:\n%s", n, len(tt.want), &text)
			}
		})
	}
}

// The job learns which attempt it is from VRAM_RUN_ATTEMPT.
func TestRetryTellsTheAttempt(t *testing.T) {
	f := newFake(t, 10*gib)
	var out syncBuffer
	run := f.spec("batch", "{}")
	run.Stderr = &bytes.Buffer{}
	run.Stdout = &out
	run.Env = append(run.Env, "VRAM_FAKEJOB_A="+itoa(gib), "VRAM_FAKEJOB_B="+itoa(4*mib), "VRAM_FAKEJOB_CAP="+itoa(10*gib), "VRAM_FAKEJOB_BARE=1")
	res, err := job.Retry(context.Background(), job.RetrySpec{Args: run.Args, Batch: 4096, Retries: 1, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Attempts) != 2 || !strings.Contains(out.String(), "attempt 1\nattempt 2\nbatch 2048 fits") {
		t.Errorf("attempts %+v, output %q", res.Attempts, out.String())
	}
}

func TestRetryRejectsBadSpecs(t *testing.T) {
	for _, s := range []job.RetrySpec{
		{},
		{Args: []string{"x", "{}"}, Batch: 0},
		{Args: []string{"x", "{}"}, Batch: 4, Retries: -1},
		{Args: []string{"x"}, Batch: 4},
	} {
		if _, err := job.Retry(context.Background(), s); err == nil {
			t.Errorf("%+v: no error", s)
		}
	}
}
