package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildVram builds the vram binary into a temporary directory.
func buildVram(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs vram serve")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build vram with")
	}
	bin := filepath.Join(t.TempDir(), "vram")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/vramhq/vram/cmd/vram")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
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
// configuration file that sets history_interval: 500ms and no interval is
// refused ("500ms is shorter than interval (1s)"), although the interval
// in force would be 100 ms: the file is validated against the default
// interval before the flag overrides it. The fix belongs in serve's
// ParseConfig (check history_interval against interval only when the file
// sets interval, and let serve.New check the final pair) or in cli/serve
// (validate after the override). Until then the load tool writes the
// interval into its files too (runConfig). Known to fail; run it with
// VRAM_LOAD_KNOWN_BUGS=1.
func TestIntervalFlagWithShortHistory(t *testing.T) {
	if os.Getenv("VRAM_LOAD_KNOWN_BUGS") == "" {
		t.Skip("known to fail: set VRAM_LOAD_KNOWN_BUGS=1")
	}
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
