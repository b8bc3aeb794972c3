package job_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/job"
	"github.com/vramhq/vram/job/jobtest"
)

func TestMain(m *testing.M) {
	jobtest.Main()
	os.Exit(m.Run())
}

const (
	mib = 1 << 20
	gib = 1 << 30
)

// syncBuffer is a bytes.Buffer safe for the job's writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fake is a fake job with its memory source.
type fake struct {
	dir string
	src *jobtest.FileSource
}

func newFake(t *testing.T, total uint64) *fake {
	dir := t.TempDir()
	return &fake{dir: dir, src: jobtest.NewFileSource(dir, total)}
}

// spec runs fake job args with memory figures, sampled every 10 ms.
func (f *fake) spec(args ...string) job.Spec {
	cmd, env := jobtest.Command(f.dir, args...)
	return job.Spec{Args: cmd, Env: env, Source: f.src, Interval: 10 * time.Millisecond, Grace: 300 * time.Millisecond}
}

func run(t *testing.T, spec job.Spec) *job.Result {
	t.Helper()
	res, err := job.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestExitStatusKept(t *testing.T) {
	for _, code := range []int{0, 1, 3, 127, 255} {
		f := newFake(t, 80*gib)
		res := run(t, f.spec("exit", itoa(code)))
		if res.ExitCode != code || res.Signal != 0 {
			t.Errorf("exit %d: got status %d signal %v", code, res.ExitCode, res.Signal)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestKilledBySignal(t *testing.T) {
	f := newFake(t, 80*gib)
	sigs := make(chan os.Signal, 1)
	var out syncBuffer
	spec := f.spec("stubborn", "1048576")
	spec.Signals, spec.Stdout = sigs, &out
	go func() {
		waitFor(t, &out, "ready")
		sigs <- syscall.SIGKILL
	}()
	res := run(t, spec)
	if res.ExitCode != 128+9 || res.Signal != syscall.SIGKILL {
		t.Errorf("status %d signal %v, want 137 SIGKILL", res.ExitCode, res.Signal)
	}
}

// waitFor polls b until it contains s (or 10 s pass).
func waitFor(t *testing.T, b *syncBuffer, s string) {
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Errorf("no %q in %q", s, b.String())
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSignalsForwarded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		t.Run(job.SignalName(sig), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, 80*gib)
			sigs := make(chan os.Signal, 1)
			var out, warn syncBuffer
			spec := f.spec("signals")
			spec.Signals, spec.Stdout, spec.Warn = sigs, &out, &warn
			go func() {
				waitFor(t, &out, "ready")
				sigs <- sig
			}()
			res := run(t, spec)
			if want := "got " + job.SignalName(sig); !strings.Contains(out.String(), want) {
				t.Errorf("job output %q, want %q", out.String(), want)
			}
			if res.ExitCode != 42 {
				t.Errorf("exit status %d, want 42", res.ExitCode)
			}
			if !strings.Contains(warn.String(), "forwarded") {
				t.Errorf("no notice of the forwarded signal: %q", warn.String())
			}
		})
	}
}

func TestPeakOfTheTree(t *testing.T) {
	f := newFake(t, 80*gib)
	res := run(t, f.spec("spawn", "2", itoa(300*mib), "600"))
	if res.ExitCode != 0 {
		t.Fatalf("exit %d; tail %q", res.ExitCode, res.Tail)
	}
	if res.Peak.Bytes != 900*mib {
		t.Errorf("peak %d MiB, want 900 (parent and two children)", res.Peak.Bytes/mib)
	}
	if len(res.Procs) != 3 {
		t.Errorf("%d processes seen, want 3: %+v", len(res.Procs), res.Procs)
	}
	if res.Peak.Device != 0 || res.Peak.PIDDev != 300*mib || res.Peak.PID == 0 {
		t.Errorf("peak %+v", res.Peak)
	}
	for _, p := range res.Procs {
		if p.Peak != 300*mib || p.Command == "" {
			t.Errorf("process %+v", p)
		}
	}
	if len(res.Samples) < 20 {
		t.Errorf("only %d samples in 600 ms at 10 ms", len(res.Samples))
	}
}

// fastLeak tunes the detector for jobs of a few seconds.
var fastLeak = detect.Config{Window: 100 * time.Millisecond, MinWindows: 8, MinSpan: time.Second,
	WarmupRate: 1e15, MaxWarmup: time.Second, MinGrowth: 4 * mib, StepMin: 64 * mib}

func TestLeakVerdict(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want detect.Kind
	}{
		{"leaking", []string{"leak", itoa(100 * mib), itoa(2 * mib), "20", "2500"}, detect.Leak},
		{"flat", []string{"leak", itoa(100 * mib), "0", "20", "2500"}, detect.NoLeak},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, 80*gib)
			spec := f.spec(tt.args...)
			spec.Leak = fastLeak
			res := run(t, spec)
			if res.Leak.Kind != tt.want {
				t.Fatalf("verdict %v, want %v", res.Leak, tt.want)
			}
			if tt.want == detect.Leak && (res.Leak.Slope < 50*mib || res.Leak.Slope > 150*mib) {
				t.Errorf("slope %.1f MiB/s, want about 100", res.Leak.Slope/mib)
			}
			if !res.SteadyKnown {
				t.Errorf("no steady state")
			}
		})
	}
}

func TestLimitTermThenKill(t *testing.T) {
	f := newFake(t, 80*gib)
	var warn syncBuffer
	spec := f.spec("stubborn", itoa(600*mib))
	spec.Limit, spec.Warn = job.Limit{Bytes: 500 * mib}, &warn
	start := time.Now()
	res := run(t, spec)
	if !res.Limit.Hit || !res.Limit.Killed || res.Signal != syscall.SIGKILL || res.ExitCode != 137 {
		t.Fatalf("limit %+v, status %d signal %v", res.Limit, res.ExitCode, res.Signal)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("killed after %v, before the 300 ms grace", d)
	}
	if res.OOM.Cause != job.CauseLimit || res.OOM.Detected {
		t.Errorf("oom %+v, want the limit as the cause", res.OOM)
	}
	for _, w := range []string{"ending it", "SIGTERM", "SIGKILL"} {
		if !strings.Contains(warn.String(), w) {
			t.Errorf("no %q in the notices %q", w, warn.String())
		}
	}
	var text bytes.Buffer
	res.WriteText(&text)
	if !strings.Contains(text.String(), "vram ended the job") || !strings.Contains(text.String(), "ignored SIGTERM") {
		t.Errorf("report does not say the limit ended the job:\n%s", text.String())
	}
}

func TestLimitWarnsThenTerminates(t *testing.T) {
	f := newFake(t, 1000*mib)
	var warn syncBuffer
	spec := f.spec("leak", itoa(400*mib), itoa(10*mib), "20", "5000")
	spec.Limit, spec.Warn = job.Limit{Percent: 50}, &warn
	res := run(t, spec)
	if !res.Limit.Hit || res.Limit.Killed || res.Signal != syscall.SIGTERM {
		t.Fatalf("limit %+v, signal %v", res.Limit, res.Signal)
	}
	if res.Limit.Cap != 500*mib || res.Limit.Bytes < 500*mib {
		t.Errorf("limit %+v", res.Limit)
	}
	if !res.Limit.Warned || !strings.Contains(warn.String(), "warning") {
		t.Errorf("no 90%% warning: %q", warn.String())
	}
	if i, j := strings.Index(warn.String(), "warning"), strings.Index(warn.String(), "ending it"); i < 0 || j < i {
		t.Errorf("warning does not come before the end: %q", warn.String())
	}
}

// TestLimitHeadroom: a job whose allocator enforces the limit itself may
// hold its CUDA context beyond it; past both it is ended.
func TestLimitHeadroom(t *testing.T) {
	f := newFake(t, 80*gib)
	spec := f.spec("stubborn", itoa(600*mib))
	spec.Limit, spec.Grace = job.Limit{Bytes: 500 * mib}, 100*time.Millisecond
	spec.LimitHeadroom = func() uint64 { return 200 * mib }
	spec.Timeout = 1500 * time.Millisecond
	res := run(t, spec)
	if res.Limit.Hit || !res.TimedOut {
		t.Fatalf("600 MiB under a 500 MiB limit with 200 MiB of headroom: limit %+v, timed out %v", res.Limit, res.TimedOut)
	}

	var warn syncBuffer
	spec = f.spec("stubborn", itoa(800*mib))
	spec.Limit, spec.Grace, spec.Warn = job.Limit{Bytes: 500 * mib}, 100*time.Millisecond, &warn
	spec.LimitHeadroom = func() uint64 { return 200 * mib }
	res = run(t, spec)
	if !res.Limit.Hit || res.Limit.Cap != 500*mib {
		t.Fatalf("800 MiB: limit %+v", res.Limit)
	}
	if !strings.Contains(warn.String(), "for the CUDA context") {
		t.Errorf("notice does not name the headroom: %q", warn.String())
	}
}

func TestTimeout(t *testing.T) {
	f := newFake(t, 80*gib)
	spec := f.spec("stubborn", "1")
	// The timeout leaves the fake job time to start and ignore SIGTERM even
	// on a loaded machine under the race detector (starting it took more
	// than 200 ms there).
	spec.Timeout, spec.Grace = 2*time.Second, 100*time.Millisecond
	res := run(t, spec)
	if !res.TimedOut || res.Signal != syscall.SIGKILL {
		t.Errorf("timed out %v, signal %v", res.TimedOut, res.Signal)
	}
}

func TestOOMFromOutput(t *testing.T) {
	tests := []struct {
		file   string
		code   string
		detect bool
		caught bool
		cause  string
	}{
		{"pytorch_2x_fragmented.txt", "1", true, false, job.CauseFragmentation},
		{"tensorflow.txt", "1", true, false, job.CauseDemand},
		{"pytorch_2x.txt", "0", false, true, ""},
		{"not_oom.txt", "1", false, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f := newFake(t, 80*gib)
			path, _ := filepath.Abs(filepath.Join("testdata", "oom", tt.file))
			var errOut syncBuffer
			spec := f.spec("stderr", path, tt.code)
			spec.Stderr = &errOut
			res := run(t, spec)
			want, _ := os.ReadFile(path)
			if errOut.String() != string(want) {
				t.Errorf("standard error was changed on its way through")
			}
			o := res.OOM
			if o.Detected != tt.detect || o.Caught != tt.caught || o.Cause != tt.cause {
				t.Errorf("oom detected %v caught %v cause %q; want %v %v %q", o.Detected, o.Caught, o.Cause, tt.detect, tt.caught, tt.cause)
			}
		})
	}
}

// A progress bar redrawn with carriage returns makes one line of stderr
// that can run to megabytes; the OOM message at its end is still found.
func TestOOMAfterLongLine(t *testing.T) {
	f := newFake(t, 80*gib)
	msg, err := os.ReadFile(filepath.Join("testdata", "oom", "pytorch_2x_fragmented.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var oom string
	for _, l := range strings.Split(string(msg), "\n") {
		if strings.HasPrefix(l, "torch.OutOfMemoryError") {
			oom = l
		}
	}
	bar := strings.Repeat("\r 42%|████▏     | 420/1000 [01:02<01:26,  6.71it/s]", 20000) // about 1 MiB
	path := filepath.Join(t.TempDir(), "stderr.txt")
	if err := os.WriteFile(path, []byte(bar+" "+oom+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, f.spec("stderr", path, "1"))
	if !res.OOM.Detected || res.OOM.Cause != job.CauseFragmentation {
		t.Errorf("oom detected %v, cause %q", res.OOM.Detected, res.OOM.Cause)
	}
}

func TestOOMCausedByAnotherProcess(t *testing.T) {
	f := newFake(t, 40*gib)
	// PID 1 always runs: it plays a process outside the job holding 30 GiB.
	f.src.Others = []job.ProcMemory{{PID: 1, Device: 0, Bytes: 30 * gib}}
	spec := f.spec("batch", "100")
	spec.Env = append(spec.Env, "VRAM_FAKEJOB_A="+itoa(2*gib), "VRAM_FAKEJOB_B="+itoa(100*mib), "VRAM_FAKEJOB_CAP="+itoa(10*gib))
	res := run(t, spec)
	if !res.OOM.Detected || res.OOM.Cause != job.CauseOtherProcess || res.OOM.Holder == nil || res.OOM.Holder.PID != 1 {
		t.Fatalf("oom %+v", res.OOM)
	}
	if res.OOM.Holder.AtEnd != 30*gib || !strings.Contains(res.OOM.Explanation, "pid 1") {
		t.Errorf("holder %+v, explanation %q", res.OOM.Holder, res.OOM.Explanation)
	}
}

func TestWithoutMemoryFigures(t *testing.T) {
	dir := t.TempDir()
	path, _ := filepath.Abs(filepath.Join("testdata", "oom", "jax.txt"))
	args, env := jobtest.Command(dir, "stderr", path, "1")
	res := run(t, job.Spec{Args: args, Env: env, SourceNote: "NVML library not found"})
	if res.Memory || res.ExitCode != 1 || !res.OOM.Detected || res.OOM.Message.Framework != "jax" {
		t.Fatalf("memory %v, exit %d, oom %+v", res.Memory, res.ExitCode, res.OOM)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	if !strings.Contains(text.String(), "unavailable: NVML library not found") {
		t.Errorf("report:\n%s", text.String())
	}
	rep := decode(t, res)
	if rep["memory_available"] != false || rep["leak"].(map[string]any)["verdict"] != "unavailable" {
		t.Errorf("json %v", rep)
	}
}

// A bare CUDA error from a job vram cannot measure: the cause is unknown,
// and the report says what would tell instead of advising a smaller batch.
func TestOOMCauseUnknownWithoutFigures(t *testing.T) {
	dir := t.TempDir()
	path, _ := filepath.Abs(filepath.Join("testdata", "oom", "cuda_error.txt"))
	args, env := jobtest.Command(dir, "stderr", path, "1")
	res := run(t, job.Spec{Args: args, Env: env, SourceNote: "NVML library libnvidia-ml.so.1 not found"})
	if !res.OOM.Detected || res.OOM.Cause != job.CauseUnknown {
		t.Fatalf("oom %+v", res.OOM)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	out := text.String()
	if !strings.Contains(out, "unknown: the message states no sizes") || !strings.Contains(out, "a host with the NVIDIA driver") || strings.Contains(out, "smaller batch") {
		t.Errorf("report:\n%s", out)
	}
	if rep := decode(t, res); rep["oom"].(map[string]any)["cause"] != "unknown" {
		t.Errorf("json oom %v", rep["oom"])
	}
}

func TestStartFailure(t *testing.T) {
	_, err := job.Run(context.Background(), job.Spec{Args: []string{"/nonexistent/command"}})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/command") {
		t.Errorf("err %v", err)
	}
	if _, err := job.Run(context.Background(), job.Spec{}); err == nil {
		t.Error("no error for an empty command")
	}
}

func decode(t *testing.T, res *job.Result) map[string]any {
	t.Helper()
	var b bytes.Buffer
	if err := res.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestJSONKeys(t *testing.T) {
	f := newFake(t, 80*gib)
	res := run(t, f.spec("mem", itoa(256*mib), "300"))
	m := decode(t, res)
	for _, k := range []string{"schema", "exit_code", "peak_bytes", "oom", "leak", "samples", "devices", "processes", "steady_bytes"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in the JSON report", k)
		}
	}
	for _, k := range []string{"detected", "cause", "message"} {
		if _, ok := m["oom"].(map[string]any)[k]; !ok {
			t.Errorf("no oom.%s", k)
		}
	}
	for _, k := range []string{"verdict", "slope_bytes_per_s", "confidence"} {
		if _, ok := m["leak"].(map[string]any)[k]; !ok {
			t.Errorf("no leak.%s", k)
		}
	}
	if m["peak_bytes"].(float64) != 256*mib {
		t.Errorf("peak_bytes %v", m["peak_bytes"])
	}
	if n := len(m["samples"].([]any)); n != len(res.Samples) || n == 0 {
		t.Errorf("%d samples in JSON, %d in the result", n, len(res.Samples))
	}
	var csvOut bytes.Buffer
	if err := res.WriteCSV(&csvOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csvOut.String()), "\n")
	if lines[0] != "t_s,job_bytes,job_allocated_bytes,job_reserved_bytes,gpu0_job_bytes,gpu0_used_bytes" || len(lines) != len(res.Samples)+1 {
		t.Errorf("CSV header %q, %d lines", lines[0], len(lines))
	}
}

func TestFitFakeJob(t *testing.T) {
	const capacity = 10 * gib
	a, b := uint64(gib), uint64(3*mib) // fits up to (10−1) GiB / 3 MiB = 3072
	for _, viaEnv := range []bool{false, true} {
		t.Run(map[bool]string{false: "placeholder", true: "env"}[viaEnv], func(t *testing.T) {
			f := newFake(t, capacity)
			trial := f.spec("batch", "{}")
			trial.Env = append(trial.Env, "VRAM_FAKEJOB_A="+itoa(int(a)), "VRAM_FAKEJOB_B="+itoa(int(b)), "VRAM_FAKEJOB_CAP="+itoa(capacity))
			spec := job.FitSpec{Args: trial.Args, Trial: trial}
			if viaEnv {
				spec.Args, spec.EnvName = trial.Args[:2], "VRAM_BATCH"
			}
			var progress syncBuffer
			spec.Progress = &progress
			res, err := job.Fit(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			const truth = 3072
			if !res.Found || res.MaxBatch > truth || float64(truth-res.MaxBatch) > 0.02*truth {
				t.Errorf("max batch %d, truth %d; %s", res.MaxBatch, truth, res.Stop)
			}
			if res.Ran() > 16+3 {
				t.Errorf("%d trials", res.Ran())
			}
			last := res.Trials[len(res.Trials)-1]
			for _, tr := range res.Trials {
				if tr.Batch == res.MaxBatch && tr.Outcome != job.Fits {
					t.Errorf("the answer's trial %+v", tr)
				}
				if tr.Outcome == job.Fits && tr.Peak != a+b*uint64(tr.Batch) {
					t.Errorf("trial %d peak %d, want %d", tr.Batch, tr.Peak, a+b*uint64(tr.Batch))
				}
			}
			if res.Line == nil || res.Line.B < 2.9*mib || res.Line.B > 3.1*mib {
				t.Errorf("line %+v", res.Line)
			}
			if !strings.Contains(progress.String(), "fit: trial 1: batch 1 (first)") || !strings.Contains(progress.String(), "elapsed") {
				t.Errorf("progress %q", progress.String())
			}
			t.Logf("%d trials, last %+v, stop %s", res.Ran(), last.Batch, res.Stop)
		})
	}
}

func TestFitStopsOnOtherFailure(t *testing.T) {
	f := newFake(t, 10*gib)
	path, _ := filepath.Abs(filepath.Join("testdata", "oom", "not_oom.txt"))
	trial := f.spec("stderr", path, "{}") // exit status = the batch: 1 fails
	res, err := job.Fit(context.Background(), job.FitSpec{Args: trial.Args, Trial: trial})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || res.Failure == nil || res.Ran() != 1 || !strings.Contains(res.Stop, "exit status 1") {
		t.Fatalf("found %v, failure %v, stop %q", res.Found, res.Failure, res.Stop)
	}
	if tail := res.Failure.Result.Tail; len(tail) == 0 || !strings.Contains(strings.Join(tail, "\n"), "device-side assert") {
		t.Errorf("tail %q", tail)
	}
}

// A failure that is not an OOM above sizes that fitted: no answer.
func TestFitFailureAfterFits(t *testing.T) {
	f := newFake(t, 10*gib)
	trial := f.spec("batch", "{}")
	trial.Env = append(trial.Env, "VRAM_FAKEJOB_A="+itoa(gib), "VRAM_FAKEJOB_B="+itoa(4*mib), "VRAM_FAKEJOB_CAP="+itoa(10*gib), "VRAM_FAKEJOB_FAIL_ABOVE=10")
	res, err := job.Fit(context.Background(), job.FitSpec{Args: trial.Args, Trial: trial})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || res.Recommended != 0 || res.MaxBatch < 1 || res.MaxBatch > 10 || res.Failure == nil || res.Failure.Batch <= 10 {
		t.Fatalf("found %v, max %d, recommended %d, failure %+v, stop %q", res.Found, res.MaxBatch, res.Recommended, res.Failure, res.Stop)
	}
	if tail := strings.Join(res.Failure.Result.Tail, "\n"); !strings.Contains(tail, "ImportError") {
		t.Errorf("tail %q", tail)
	}
}

func TestHTMLReport(t *testing.T) {
	f := newFake(t, 1000*mib)
	spec := f.spec("leak", itoa(100*mib), itoa(2*mib), "20", "2500")
	spec.Leak, spec.Limit = fastLeak, job.Limit{Percent: 90}
	spec.Args = append(spec.Args[:0:0], spec.Args...)
	res := run(t, spec)
	// Give the result an OOM and a name with markup to escape.
	res.Args = append(res.Args, "--tag=<a&b>")
	var b bytes.Buffer
	if err := res.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	dec := xml.NewDecoder(strings.NewReader(page))
	var svgs, polylines int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, page)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "svg":
				svgs++
			case "polyline":
				polylines++
			case "script", "link", "img":
				t.Errorf("external or active element <%s>", se.Name.Local)
			}
		}
	}
	if svgs != 2 || polylines < 3 {
		t.Errorf("%d charts, %d lines", svgs, polylines)
	}
	for _, want := range []string{"peak ", "leak ", "limit ", "&lt;a&amp;b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not contain %q", want)
		}
	}
	if strings.Contains(page, "http://") && strings.Count(page, "http://") != strings.Count(page, "http://www.w3.org/2000/svg") {
		t.Error("page refers to an external resource")
	}
}
