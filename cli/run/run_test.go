package run_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/cli"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/internal/jsondoc"
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

// testEnv has a fake memory source on dir (nil: no NVML) and records the
// signal channel.
type testEnv struct {
	mu   sync.Mutex
	sigs chan<- os.Signal
}

func (te *testEnv) env(src job.Source, fg bool) *cmdutil.Factory {
	e := cmdutil.New()
	e.MemorySource = func() (job.Source, func(), error) {
		if src == nil {
			return nil, nil, errors.New("NVML library libnvidia-ml.so.1 not found")
		}
		return src, func() {}, nil
	}
	e.ProcRoot = "/nonexistent" // no process tree
	e.Notify = func(c chan<- os.Signal, _ ...os.Signal) {
		te.mu.Lock()
		te.sigs = c
		te.mu.Unlock()
	}
	e.Stop = func(chan<- os.Signal) {}
	e.Foreground = func(int) bool { return fg }
	e.Subreaper = false
	return e
}

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

func vram(t *testing.T, e *cmdutil.Factory, args ...string) (stdout, stderr *syncBuffer, code int) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	e.In, e.Out, e.Err = devnull, stdout, stderr
	code = cli.Run(e, args)
	return stdout, stderr, code
}

// fakeArgs is "vram ARGS... -- <fake job>"; the fake job's environment
// comes through vram's own (set with t.Setenv).
func fakeArgs(t *testing.T, dir string, vramArgs []string, jobArgs ...string) []string {
	cmd, _ := jobtest.Command(dir, jobArgs...)
	t.Setenv(jobtest.Env, "1")
	t.Setenv(jobtest.DirEnv, dir)
	return append(append(vramArgs, "--"), cmd...)
}

func TestRunKeepsStatusAndWritesFiles(t *testing.T) {
	dir := t.TempDir()
	out := t.TempDir()
	src := jobtest.NewFileSource(dir, 80*gib)
	te := &testEnv{}
	jsonPath, csvPath, htmlPath := filepath.Join(out, "r.json"), filepath.Join(out, "r.csv"), filepath.Join(out, "r.html")
	args := fakeArgs(t, dir, []string{"run", "--interval", "10ms", "--json-file", jsonPath, "--csv", csvPath, "--report", htmlPath}, "mem", strconv.Itoa(300*mib), "300")
	_, stderr, code := vram(t, te.env(src, false), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"peak        300.00 MiB", "steady", "leak", "OOM         no out-of-memory message"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stderr)
		}
	}
	var rep map[string]any
	b, err := os.ReadFile(jsonPath)
	if err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("JSON file: %v", err)
	}
	jsondoc.Test(t, "vram run --json", b)
	if rep["schema"] != job.SchemaRun || rep["peak_bytes"].(float64) != 300*mib || rep["exit_code"].(float64) != 0 {
		t.Errorf("JSON %v", rep)
	}
	for _, p := range []string{csvPath, htmlPath} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}

	_, _, code = vram(t, te.env(src, false), fakeArgs(t, dir, []string{"run", "-q"}, "exit", "7")...)
	if code != 7 {
		t.Errorf("exit status %d, want the job's 7", code)
	}
}

func TestRunWithoutNVML(t *testing.T) {
	dir := t.TempDir()
	te := &testEnv{}
	path, _ := filepath.Abs(filepath.Join("..", "..", "job", "testdata", "oom", "pytorch_2x_fragmented.txt"))
	stdout, stderr, code := vram(t, te.env(nil, false), fakeArgs(t, dir, []string{"run", "--json"}, "stderr", path, "1")...)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	if n := strings.Count(stderr.String(), "memory figures unavailable"); n != 1 {
		t.Errorf("said %d times that memory figures are unavailable:\n%s", n, stderr)
	}
	var rep job.Report
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, stdout)
	}
	if !rep.OOM.Detected || rep.OOM.Cause != job.CauseFragmentation || rep.Memory {
		t.Errorf("oom %+v memory %v", rep.OOM, rep.Memory)
	}
}

func TestSignalsFromTheTerminalAreNotDoubled(t *testing.T) {
	for _, fg := range []bool{true, false} {
		dir := t.TempDir()
		te := &testEnv{}
		go func() {
			for {
				te.mu.Lock()
				c := te.sigs
				te.mu.Unlock()
				if c != nil {
					time.Sleep(300 * time.Millisecond) // the job is up and listening
					c <- syscall.SIGINT
					if fg { // not forwarded: the job is still there
						time.Sleep(100 * time.Millisecond)
						c <- syscall.SIGUSR1
					}
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		stdout, _, code := vram(t, te.env(nil, fg), fakeArgs(t, dir, []string{"run", "-q"}, "signals")...)
		want := map[bool]string{true: "got SIGUSR1", false: "got SIGINT"}[fg]
		if code != 42 || !strings.Contains(stdout.String(), want) {
			t.Errorf("foreground %v: exit %d, output %q, want %q", fg, code, stdout, want)
		}
	}
}

// A signal ends vram fit's search: the running trial is ended, the table
// so far is printed, and vram exits 128+N, not 0.
func TestFitEndedBySignalExitsNonZero(t *testing.T) {
	for _, tt := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		dir := t.TempDir()
		te := &testEnv{}
		go func() {
			for {
				te.mu.Lock()
				c := te.sigs
				te.mu.Unlock()
				if c != nil {
					time.Sleep(300 * time.Millisecond) // the first trial is up
					c <- tt.sig
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		// The trial waits for a signal: vram's SIGTERM when the search ends.
		stdout, stderr, code := vram(t, te.env(nil, false), fakeArgs(t, dir, []string{"fit", "--env", "BATCH", "--grace", "2s"}, "signals")...)
		if code != tt.code {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", job.SignalName(tt.sig), code, tt.code, stderr)
		}
		if !strings.Contains(stdout.String(), "1 trials in") {
			t.Errorf("%s: no table of the trials so far:\n%s", job.SignalName(tt.sig), stdout)
		}
		if want := "ended by " + job.SignalName(tt.sig); !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	te := &testEnv{}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "name the command to run"},
		{[]string{"run", "--limit", "150%", "--", "true"}, "(0, 100]"},
		{[]string{"run", "--interval", "1ms", "--", "true"}, "--interval 1ms"},
		{[]string{"fit", "--", "train"}, "put {} where the batch size goes"},
		{[]string{"fit", "--min", "0", "--", "train", "{}"}, "want 1 ≤ min ≤ max"},
		{[]string{"fit", "--margin", "x", "--", "train", "{}"}, "--margin"},
		{[]string{"fit", "--tolerance", "0", "--", "train", "{}"}, "--tolerance"},
	}
	for _, tt := range tests {
		_, stderr, code := vram(t, te.env(nil, false), tt.args...)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	_, stderr, code := vram(t, te.env(nil, false), "run", "--", "/nonexistent/cmd")
	if code != 127 || !strings.Contains(stderr.String(), "/nonexistent/cmd") {
		t.Errorf("missing command: exit %d, %q", code, stderr)
	}
}

func TestFitCommand(t *testing.T) {
	dir := t.TempDir()
	src := jobtest.NewFileSource(dir, 10*gib)
	te := &testEnv{}
	t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
	t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
	t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(10*gib))
	args := fakeArgs(t, dir, []string{"fit", "--interval", "10ms", "--json", "--max", "8192"}, "batch", "{}")
	stdout, stderr, code := vram(t, te.env(src, false), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	jsondoc.Test(t, "vram fit --json", []byte(stdout.String()))
	var rep struct {
		Max         int `json:"max_batch"`
		Recommended int `json:"recommended_batch"`
		Trials      []struct {
			Batch   int     `json:"batch"`
			Outcome string  `json:"outcome"`
			Peak    uint64  `json:"peak_bytes"`
			Seconds float64 `json:"seconds"`
		} `json:"trials"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	const truth = 9 * 1024 / 4 // (10 GiB − 1 GiB) / 4 MiB
	if rep.Max > truth || float64(truth-rep.Max) > 0.02*truth || rep.Recommended != rep.Max*95/100 {
		t.Errorf("max %d recommended %d, truth %d", rep.Max, rep.Recommended, truth)
	}
	if len(rep.Trials) == 0 || rep.Trials[0].Batch != 1 || rep.Trials[0].Outcome != "fits" || rep.Trials[0].Peak != gib+4*mib || rep.Trials[0].Seconds <= 0 {
		t.Errorf("trials %+v", rep.Trials)
	}
	if !strings.Contains(stderr.String(), "fit: trial 1: batch 1 (first)") {
		t.Errorf("no progress on stderr: %s", stderr)
	}
	// The table form.
	stdout, _, code = vram(t, te.env(src, false), append([]string{"fit", "--interval", "10ms", "--max", "8192"}, args[6:]...)...)
	if code != 0 || !strings.Contains(stdout.String(), "largest batch that fits:") || !strings.Contains(stdout.String(), "outcome") {
		t.Errorf("exit %d, table:\n%s", code, stdout)
	}
}

// Under --limit a trial that reaches the limit is ended and counts as too
// large; the limit is the capacity the search works with from the start.
func TestFitUnderLimit(t *testing.T) {
	dir := t.TempDir()
	src := jobtest.NewFileSource(dir, 80*gib)
	te := &testEnv{}
	t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
	t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
	t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(80*gib))
	args := fakeArgs(t, dir, []string{"fit", "--interval", "10ms", "--json", "--limit", "5GiB", "--grace", "1s"}, "batch", "{}")
	stdout, stderr, code := vram(t, te.env(src, false), args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	jsondoc.Test(t, "vram fit --json", []byte(stdout.String()))
	var rep struct {
		Max     int    `json:"max_batch"`
		Cap     uint64 `json:"capacity_bytes"`
		CapFrom string `json:"capacity_from"`
		Trials  []struct {
			Batch   int    `json:"batch"`
			Outcome string `json:"outcome"`
		} `json:"trials"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	const truth = 4*1024/4 - 1 // (5 GiB − 1 GiB) / 4 MiB, less one: the limit itself is hit
	if rep.Max > truth || float64(truth-rep.Max) > 0.02*truth || rep.Cap != 5*gib || rep.CapFrom != "--limit" {
		t.Errorf("max %d (truth %d), capacity %d from %q", rep.Max, truth, rep.Cap, rep.CapFrom)
	}
	limited := 0
	for _, tr := range rep.Trials {
		if tr.Outcome == "limit" {
			limited++
		}
	}
	if len(rep.Trials) > 8 || limited == 0 {
		t.Errorf("%d trials, %d ended at the limit: %+v", len(rep.Trials), limited, rep.Trials)
	}
}

// A trial that fails for a reason other than OOM ends the search without
// an answer, even when smaller sizes fitted: vram fit exits 1 and shows the
// trial's error.
func TestFitStopsOnNonOOMFailure(t *testing.T) {
	dir := t.TempDir()
	te := &testEnv{}
	t.Setenv("VRAM_FAKEJOB_A", strconv.Itoa(gib))
	t.Setenv("VRAM_FAKEJOB_B", strconv.Itoa(4*mib))
	t.Setenv("VRAM_FAKEJOB_CAP", strconv.Itoa(10*gib))
	t.Setenv("VRAM_FAKEJOB_FAIL_ABOVE", "10")
	// 4 fits, then the log-space midpoint of 4–64, 16, fails.
	args := fakeArgs(t, dir, []string{"fit", "--interval", "10ms", "--min", "4", "--max", "64"}, "batch", "{}")
	stdout, stderr, code := vram(t, te.env(nil, false), args...)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if out := stdout.String(); strings.Contains(out, "largest batch that fits") || !strings.Contains(out, "search stopped: batch 16 failed with exit status 1 and no OOM message; 4 fitted before") {
		t.Errorf("table:\n%s", out)
	}
	for _, want := range []string{"  | ImportError: cannot import name 'Net' from 'model' (batch 16)", "vram: fit: the search stopped without an answer: batch 16 failed"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	stdout, _, code = vram(t, te.env(nil, false), append([]string{"fit", "--json"}, args[1:]...)...)
	var rep struct {
		Found       bool `json:"found"`
		Max         int  `json:"max_batch"`
		Recommended int  `json:"recommended_batch"`
		Failure     *struct {
			Batch int      `json:"batch"`
			Tail  []string `json:"tail"`
		} `json:"failure"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if code != 1 || rep.Found || rep.Max != 4 || rep.Recommended != 0 || rep.Failure == nil || rep.Failure.Batch != 16 {
		t.Errorf("exit %d, JSON %+v", code, rep)
	}
}

// Output files are checked before the job starts: a path that cannot be
// written is a usage error naming the flag and the path, and the job does
// not run.
func TestOutputPathsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	te := &testEnv{}
	marker := filepath.Join(t.TempDir(), "ran.txt")
	if err := os.WriteFile(marker, []byte("THE JOB RAN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tests := []struct {
		cmd, flag, path, want string
		more                  []string
	}{
		{"run", "--csv", "/nonexistent/x.csv", "--csv /nonexistent/x.csv: cannot be written: the directory /nonexistent does not exist", nil},
		{"run", "--report", "/nonexistent/x.html", "--report /nonexistent/x.html: cannot be written: the directory /nonexistent does not exist", nil},
		{"run", "--json-file", "/nonexistent/x.json", "--json-file /nonexistent/x.json: cannot be written", nil},
		{"run", "--csv", out, "--csv " + out + ": cannot be written: it is a directory", nil},
		{"run", "--csv", filepath.Join(plain, "x.csv"), plain + " is not a directory", nil},
		{"run", "--csv", filepath.Join(out, "same"), "--csv and --report both name", []string{"--report", filepath.Join(out, "same")}},
		{"fit", "--json-file", "/nonexistent/fit.json", "--json-file /nonexistent/fit.json: cannot be written", nil},
	}
	for _, tt := range tests {
		t.Run(tt.cmd+" "+tt.flag+" "+tt.path, func(t *testing.T) {
			vramArgs := append([]string{tt.cmd, tt.flag, tt.path}, tt.more...)
			job := []string{"stderr", marker, "0"}
			if tt.cmd == "fit" {
				job = []string{"stderr", marker, "{}"}
			}
			_, stderr, code := vram(t, te.env(nil, false), fakeArgs(t, dir, vramArgs, job...)...)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tt.want)
			}
			if strings.Contains(stderr.String(), "THE JOB RAN") || strings.Contains(stderr.String(), "fit: trial") {
				t.Errorf("the job ran: %q", stderr)
			}
		})
	}
	// The check leaves no file behind.
	p := filepath.Join(out, "new.csv")
	if _, _, code := vram(t, te.env(nil, false), "run", "--csv", p, "--", "/nonexistent/cmd"); code != 127 {
		t.Errorf("exit %d", code)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the check left %s: %v", p, err)
	}
}

// When a result cannot be written at the end after all, it goes to a
// fallback directory, vram says where, and the job's status is kept;
// only a result lost altogether turns a success into exit 1.
func TestOutputKeptWhenWriteFails(t *testing.T) {
	dir := t.TempDir()
	te := &testEnv{}
	for _, status := range []int{0, 3} {
		out := filepath.Join(t.TempDir(), "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		keep := t.TempDir()
		e := te.env(jobtest.NewFileSource(dir, 8*gib), false)
		e.FallbackDirs = func() []string { return []string{filepath.Join(keep, "missing"), keep} }
		// The job removes the directory its results were to go to.
		args := fakeArgs(t, dir, []string{"run", "-q", "--interval", "10ms", "--csv", filepath.Join(out, "s.csv"),
			"--report", filepath.Join(out, "r.html"), "--json-file", filepath.Join(out, "r.json")}, "remove", out, strconv.Itoa(status))
		_, stderr, code := vram(t, e, args...)
		if code != status {
			t.Errorf("exit %d, want the job's %d: %s", code, status, stderr)
		}
		for _, k := range []struct{ flag, file, what, head string }{
			{"--csv", "s.csv", "the samples", "t_s,job_bytes"},
			{"--report", "r.html", "the HTML report", "<!DOCTYPE html>"},
			{"--json-file", "r.json", "the JSON result", "{"},
		} {
			ext := filepath.Ext(k.file)
			matches, _ := filepath.Glob(filepath.Join(keep, "vram-"+strings.TrimSuffix(k.file, ext)+"-*"+ext))
			if len(matches) != 1 {
				t.Fatalf("%s: %d fallback files in %s", k.flag, len(matches), keep)
			}
			b, _ := os.ReadFile(matches[0])
			if !strings.HasPrefix(string(b), k.head) {
				t.Errorf("%s: fallback file starts %q", k.flag, b[:min(len(b), 40)])
			}
			want := fmt.Sprintf("vram: %s %s: cannot be written: no such file or directory; vram kept %s in %s instead",
				k.flag, filepath.Join(out, k.file), k.what, matches[0])
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	}

	// Nowhere to keep it: a job that succeeded makes vram exit 1.
	out := filepath.Join(t.TempDir(), "out")
	os.Mkdir(out, 0o755)
	e := te.env(nil, false)
	e.FallbackDirs = func() []string { return []string{"/nonexistent"} }
	_, stderr, code := vram(t, e, fakeArgs(t, dir, []string{"run", "-q", "--csv", filepath.Join(out, "s.csv")}, "remove", out, "0")...)
	if code != 1 || !strings.Contains(stderr.String(), "the samples could not be kept anywhere else either") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
