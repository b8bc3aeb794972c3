package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/replay"
	"github.com/vramhq/vram/trace/rmm"
)

// measure replays the only trace of spec on a simulated device under the
// default and paged policies.
func measure(t *testing.T, spec string) []*replay.Report {
	t.Helper()
	ts, err := replay.Open(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 {
		t.Fatalf("%s: %d traces", spec, len(ts))
	}
	var out []*replay.Report
	for _, name := range []string{"default", "paged"} {
		pols, err := replay.ParsePolicies(name)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := replay.Measure(ts[0], pols[0], replay.MeasureOptions{Device: replay.SimDevice(141 << 30)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rep)
	}
	return out
}

// Converting a trace and replaying the CSV finds what replaying the source
// finds: the same operations, peaks, driver calls and skipped records.
func TestRoundTripReplaysTheSame(t *testing.T) {
	specs := []string{
		"../../../replay/testdata/small.csv", // an allocate failure and an unknown free
		"../../../examples/traces/snapshot.pickle",
		"../../../replay/testdata/recorded/gpt2_varlen.pickle.gz",
		"synth:kvcache:seed=2",
	}
	for _, spec := range specs {
		t.Run(filepath.Base(spec), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace.csv.gz")
			var stderr bytes.Buffer
			if err := run([]string{spec, out}, &stderr); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "written to "+out+" and read back identical") {
				t.Errorf("stderr %q", stderr.String())
			}
			want, got := measure(t, spec), measure(t, out)
			for i := range want {
				w, g := want[i], got[i]
				if w.Ops == 0 {
					t.Fatalf("%s: no operations replayed", w.Policy)
				}
				if g.Records != w.Records || g.Ops != w.Ops || g.PeakLiveBytes != w.PeakLiveBytes ||
					g.PeakReservedBytes != w.PeakReservedBytes || g.DeviceCalls != w.DeviceCalls ||
					g.LeakedBytes != w.LeakedBytes || g.SkippedFailures != w.SkippedFailures ||
					g.UnknownFrees != w.UnknownFrees || g.ReusedPointers != w.ReusedPointers {
					t.Errorf("%s: the CSV replays as %+v\nthe source as %+v", w.Policy, *g.Result, *w.Result)
				}
			}
		})
	}
}

func TestPlainOutputAndCounts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "small.csv")
	var stderr bytes.Buffer
	if err := run([]string{"../../../replay/testdata/small.csv", out}, &stderr); err != nil {
		t.Fatal(err)
	}
	// Written in the Writer's format: the source's own lines.
	want, err := os.ReadFile("../../../replay/testdata/small.csv")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("wrote\n%s\nwant\n%s", got, want)
	}
	if msg := "small: 7 records (3 allocations, 3 frees, 1 allocate failures, 1 streams)"; !strings.Contains(stderr.String(), msg) {
		t.Errorf("stderr %q, want %q", stderr.String(), msg)
	}
}

func TestChoose(t *testing.T) {
	ts := []*replay.Trace{replay.FromRecords("snap@dev0", nil), replay.FromRecords("snap@dev1", nil)}
	if got, err := choose(ts, "snap@dev1"); err != nil || got != ts[1] {
		t.Errorf("choose snap@dev1: %v, %v", got, err)
	}
	if _, err := choose(ts, ""); err == nil || !strings.Contains(err.Error(), "holds 2 traces (snap@dev0, snap@dev1): pick one with -trace") {
		t.Errorf("no pick among two: %v", err)
	}
	if _, err := choose(ts, "snap@dev2"); err == nil || !strings.Contains(err.Error(), `no trace "snap@dev2"`) {
		t.Errorf("unknown pick: %v", err)
	}
	if got, err := choose(ts[:1], ""); err != nil || got != ts[0] {
		t.Errorf("the only trace: %v, %v", got, err)
	}
}

// compare catches a file whose records differ from the source's.
func TestCompareFindsADifference(t *testing.T) {
	recs := []rmm.Record{
		{Action: rmm.Allocate, Pointer: 0x1000, Size: 512},
		{Action: rmm.Free, Pointer: 0x1000, Size: 512},
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body, err string
	}{
		{"size", "Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1000,513,0\n0,00:00:00.000000,free,0x1000,512,0\n", "record 1:"},
		{"short", "Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1000,512,0\n", "ends before record 2"},
		{"long", "Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1000,512,0\n0,00:00:00.000000,free,0x1000,512,0\n0,00:00:00.000000,free,0x1000,512,0\n", "record 3 is extra"},
	} {
		p := filepath.Join(dir, tc.name+".csv")
		if err := os.WriteFile(p, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := compare(replay.FromRecords("x", recs), p); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.err)
		}
	}
	ok := filepath.Join(dir, "ok.csv")
	os.WriteFile(ok, []byte("Thread,Time,Action,Pointer,Size,Stream\n0,00:00:00.000000,allocate,0x1000,512,0\n0,00:00:00.000000,free,0x1000,512,0\n"), 0o644)
	if err := compare(replay.FromRecords("x", recs), ok); err != nil {
		t.Errorf("same records: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"only-one"}, "usage: tracecsv"},
		{[]string{filepath.Join(dir, "missing.pickle"), filepath.Join(dir, "x.csv")}, "no such file"},
		{[]string{"synth:nope", filepath.Join(dir, "x.csv")}, "synth:nope"},
		{[]string{"../../../replay/testdata/small.csv", filepath.Join(dir, "no-dir", "x.csv")}, "no such file"},
		{[]string{"../../../replay/testdata/bad.csv", filepath.Join(dir, "bad.csv")}, "line 3"},
	} {
		var stderr bytes.Buffer
		err := run(tc.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.err)
		}
	}
	// A failed conversion leaves nothing behind.
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.csv")); !os.IsNotExist(err) {
		t.Errorf("bad.csv written: %v", err)
	}
}

// The exit status follows vram's: 2 for a mistake on the command line, 0
// for -h, 1 for a failure.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-h"}, 0},
		{[]string{"-nosuchflag", "a", "b"}, 2},
		{[]string{"only-one"}, 2},
		{[]string{filepath.Join(t.TempDir(), "missing.csv"), filepath.Join(t.TempDir(), "out.csv")}, 1},
	} {
		err := run(tc.args, io.Discard)
		got := cmdutil.ExitCode(err)
		if errors.Is(err, flag.ErrHelp) {
			got = 0
		}
		if got != tc.want {
			t.Errorf("tracecsv %q: status %d (%v), want %d", tc.args, got, err, tc.want)
		}
	}
}
