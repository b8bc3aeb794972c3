package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// buildVram builds the vram binary once for the package's tests.
func buildVram(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs vram serve")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build vram with")
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "serve-load-test-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "vram")
		cmd := exec.Command(goTool, "build", "-o", built.bin, "github.com/vramhq/vram/cmd/vram")
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		built.out, built.err = cmd.CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
	os.Exit(code)
}

// TestCrashAndFaults runs the real binary on a small simulated host: one
// kill -9 and restart, a graceful stop, and the bad history files and
// configurations, and expects every check to pass.
func TestCrashAndFaults(t *testing.T) {
	bin := buildVram(t)
	ctx := context.Background()
	out := t.TempDir()
	spec := daemonSpec{Bin: bin, GPUs: 2, Procs: 20, Interval: "100ms", Addr: "127.0.0.1:19471"}
	cr, err := runCrash(ctx, crashOptions{Spec: spec, HistoryInterval: 500 * time.Millisecond, Kills: 1, MinUp: 2 * time.Second, MaxUp: 3 * time.Second, Seed: 1, Out: filepath.Join(out, "crash")})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Lives) != 1 || len(cr.Problems) != 0 || cr.Final != "ok" || cr.StopExit != 0 {
		t.Fatalf("crash: %+v", cr)
	}
	if l := cr.Lives[0]; l.Reported < 2 || l.InDB < l.Reported {
		t.Errorf("life %+v", l)
	}
	fr, err := runFaults(ctx, faultOptions{Spec: spec, HistoryInterval: 2 * time.Second, StopAfter: 3 * time.Second, Out: filepath.Join(out, "faults")})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Stop.Err != "" || !fr.Stop.StoppedLogged || !fr.Stop.StreamEnded {
		t.Errorf("graceful stop: %+v", fr.Stop)
	}
	for _, c := range append(fr.DBCases, fr.Configs...) {
		if !c.OK {
			t.Errorf("%s: exit %d, wanted %s:\n%s", c.Name, c.Exit, c.Want, c.Log)
		}
		if strings.Contains(c.Log, "goroutine ") {
			t.Errorf("%s: a stack trace", c.Name)
		}
	}
}

// TestLoadShort is a load run of a few seconds: every figure is filled
// and the file is whole after the stop.
func TestLoadShort(t *testing.T) {
	bin := buildVram(t)
	out := t.TempDir()
	spec := daemonSpec{Bin: bin, GPUs: 2, Procs: 20, Interval: "100ms", Addr: "127.0.0.1:19472"}
	r, err := runLoad(context.Background(), loadOptions{Spec: spec, HistoryInterval: time.Second, Duration: 4 * time.Second,
		ScrapeEvery: time.Second, MonitorEvery: 500 * time.Millisecond, StateRequests: 5, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 0 {
		t.Errorf("problems: %v", r.Problems)
	}
	switch {
	case r.Samples < 10, r.TicksWritten < 2, r.TicksInDB < int64(r.TicksWritten):
		t.Errorf("samples %v, ticks %v, in the file %d", r.Samples, r.TicksWritten, r.TicksInDB)
	case r.CPUPct <= 0, r.RSSEnd == 0, r.Heap.GCs == 0, len(r.Series) < 4:
		t.Errorf("CPU %v%%, RSS %d, GCs %d, %d points", r.CPUPct, r.RSSEnd, r.Heap.GCs, len(r.Series))
	case len(r.StateLatency) != 5, len(r.Scrapes) < 2, r.SSE.Events["state"] == 0:
		t.Errorf("state requests %d, scrapes %d, events %v", len(r.StateLatency), len(r.Scrapes), r.SSE.Events)
	case r.RawPerTick <= 0, r.AggPerMinute <= 0, r.Integrity != "ok":
		t.Errorf("per tick %v, per minute %v, integrity %q", r.RawPerTick, r.AggPerMinute, r.Integrity)
	}
}

// TestIntervalFlagWithShortHistory: `vram serve --interval 100ms` with a
// configuration file that sets history_interval: 500ms and no interval
// runs: the file's history_interval is settled against the interval in
// force, not the default one (it was refused, "500ms is shorter than
// interval (1s)", before the command settled the pair after the flags).
func TestIntervalFlagWithShortHistory(t *testing.T) {
	bin := buildVram(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("version: 1\nhistory_interval: 500ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--simulate", "1", "--interval", "100ms", "--config", cfg, "--addr", "127.0.0.1:19473", "--db", filepath.Join(dir, "h.db")}
	c := runCase(context.Background(), bin, "short history", args, nil)
	if c.Exit != -1 {
		t.Errorf("vram %s: exit %d, want it to run:\n%s", strings.Join(args, " "), c.Exit, c.Log)
	}
}
