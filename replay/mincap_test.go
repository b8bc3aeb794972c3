package replay

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/trace/rmm"
	"github.com/vramhq/vram/trace/synth"
)

// The smallest capacity of these traces follows from the allocator's
// documented policy (requests between 1 and 10 MiB are cut from 20 MiB
// segments; requests of 10 MiB or more get a segment of their size rounded
// to 2 MiB; a cached segment without live blocks is released before growth
// fails).
var minCapCases = []struct {
	name       string
	recs       []rmm.Record
	live, want uint64
}{
	{
		// B pins the 20 MiB segment that A and B were cut from; C (10 MiB)
		// fits in neither free piece (6 and 8 MiB), so it needs a segment
		// of its own: 30 MiB for 16 MiB live.
		name: "pinned segment",
		recs: []rmm.Record{allocRec(1, 6*mib), allocRec(2, 6*mib), freeRec(1, 6*mib), allocRec(3, 10*mib),
			freeRec(2, 6*mib), freeRec(3, 10*mib)},
		live: 16 * mib, want: 30 * mib,
	},
	{
		// A's cached 20 MiB segment is too small for C; under a cap it is
		// released and C fits: the capacity is exactly live, while the
		// uncapped pass reserves 70 MiB.
		name: "released cache",
		recs: []rmm.Record{allocRec(1, 20*mib), allocRec(2, 20*mib), freeRec(1, 20*mib), allocRec(3, 30*mib),
			freeRec(2, 20*mib), freeRec(3, 30*mib)},
		live: 50 * mib, want: 50 * mib,
	},
}

func TestMinCapacityByConstruction(t *testing.T) {
	for _, tc := range minCapCases {
		t.Run(tc.name, func(t *testing.T) {
			dev := SimDevice(1 << 30)
			d, _ := dev()
			r, err := Replay(Records(tc.recs), d, alloc.Config{}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.PeakLiveBytes != tc.live {
				t.Fatalf("live %d, want %d", r.PeakLiveBytes, tc.live)
			}
			// The construction itself: want completes, want-1 does not.
			for _, c := range []struct {
				cap  uint64
				fits bool
			}{{tc.want, true}, {tc.want - 1, false}} {
				d, _ := dev()
				got, err := Replay(Records(tc.recs), d, alloc.Config{MaxBytes: c.cap}, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if (got.OOM == nil) != c.fits {
					t.Fatalf("cap %d: completes %v, want %v", c.cap, got.OOM == nil, c.fits)
				}
			}
			open := func() (Source, func(), error) { return Records(tc.recs), func() {}, nil }
			var steps []Step
			mc, err := MinCapacity(open, dev, alloc.Config{}, r.PeakLiveBytes, r.PeakReservedBytes, func(s Step) { steps = append(steps, s) })
			if err != nil {
				t.Fatal(err)
			}
			if !mc.Found || mc.Bytes < tc.want || mc.Bytes >= tc.want+mc.Resolution {
				t.Errorf("min capacity %d (found %v), want in [%d, %d)", mc.Bytes, mc.Found, tc.want, tc.want+mc.Resolution)
			}
			if mc.Resolution != 2*mib {
				t.Errorf("resolution %d, want 2 MiB for a small trace", mc.Resolution)
			}
			if mc.Passes != len(steps) || mc.Passes < 2 {
				t.Errorf("%d passes, %d steps reported", mc.Passes, len(steps))
			}
			for _, s := range steps {
				if s.Complete != (s.Cap >= tc.want) {
					t.Errorf("step %+v: completes %v under a cap of %d", s, s.Complete, s.Cap)
				}
			}
		})
	}
}

func TestResolution(t *testing.T) {
	for _, tc := range []struct{ live, want uint64 }{
		{1, 2 * mib}, {2000 * mib, 2 * mib}, {2048 * mib, 2048 * mib / 1000}, {10 << 30, (10 << 30) / 1000},
	} {
		if got := Resolution(tc.live); got != tc.want {
			t.Errorf("Resolution(%d) = %d, want %d", tc.live, got, tc.want)
		}
	}
}

func TestMinCapacityBadBounds(t *testing.T) {
	open := func() (Source, func(), error) { return Records(nil), func() {}, nil }
	if _, err := MinCapacity(open, SimDevice(1<<30), alloc.Config{}, 0, 10, nil); err == nil {
		t.Error("no error for a trace that allocates nothing")
	}
	if _, err := MinCapacity(open, SimDevice(1<<30), alloc.Config{}, 10*mib, mib, nil); err == nil {
		t.Error("no error for an upper bound below live")
	}
}

func TestMeasureKeepsCompactCopyOfFiles(t *testing.T) {
	tr := FromFile("small", "testdata/small.csv")
	rep, err := Measure(tr, policies[0], MeasureOptions{Device: SimDevice(1 << 30), MinCapacity: true, Time: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.compact == nil || tr.compact.Len() != 7 {
		t.Fatalf("compact copy %v after a bisection", tr.compact)
	}
	if rep.MinCapacity == nil || !rep.MinCapacity.Found || rep.Latency == nil {
		t.Fatalf("report %+v", rep)
	}
	// 2 MiB + 1 MiB live need a small segment and a 20 MiB one.
	if rep.MinCapacity.Bytes < 22*mib || rep.MinCapacity.Bytes >= 24*mib {
		t.Errorf("min capacity %d, want in [22, 24) MiB", rep.MinCapacity.Bytes)
	}
	if got := rep.MinCapacityOverLive(); got != float64(rep.MinCapacity.Bytes)/float64(6*mib) {
		t.Errorf("MinCapacityOverLive = %v", got)
	}

	// Without the bisection the timed pass still replays a compact copy.
	tr2 := FromFile("small", "testdata/small.csv")
	rep2, err := Measure(tr2, policies[0], MeasureOptions{Device: SimDevice(1 << 30), Time: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr2.compact == nil || tr2.compact.Len() != 7 || rep2.MinCapacity != nil || rep2.Latency == nil {
		t.Errorf("compact %v, min capacity %v, latency %v", tr2.compact, rep2.MinCapacity, rep2.Latency)
	}

	// With Stream and without the bisection, every pass streams the file.
	tr3 := FromFile("small", "testdata/small.csv")
	rep3, err := Measure(tr3, policies[0], MeasureOptions{Device: SimDevice(1 << 30), Time: true, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr3.compact != nil || rep3.MinCapacity != nil || rep3.Latency == nil {
		t.Errorf("compact %v, min capacity %v, latency %v", tr3.compact, rep3.MinCapacity, rep3.Latency)
	}
}

// writeTrace writes recs as an RMM log in a temporary directory.
func writeTrace(t *testing.T, recs []rmm.Record) string {
	t.Helper()
	var buf bytes.Buffer
	w := rmm.NewWriter(&buf)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trace.csv.gz")
	if err := os.WriteFile(path, gzipBytes(t, buf.Bytes()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The timed pass replays the in-memory copy; its figures must be those of
// a pass that streams the file.
func TestTimedPassFromMemoryMatchesStreaming(t *testing.T) {
	recs, err := synth.Random(synth.RandomConfig{Seed: 7, Allocations: 3000})
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"testdata/small.csv", "testdata/small.csv.gz", writeTrace(t, recs)}
	for _, path := range files {
		for _, p := range policies {
			t.Run(filepath.Base(path)+"/"+p.Name, func(t *testing.T) {
				cfg, err := p.Config()
				if err != nil {
					t.Fatal(err)
				}
				tr := FromFile("t", path)
				if err := tr.load(); err != nil {
					t.Fatal(err)
				}
				mem, err := Replay(tr.compact.Source(), newSim(t, 1<<40), cfg, Options{Time: true})
				if err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				streamed, err := Replay(rmm.NewReader(f), newSim(t, 1<<40), cfg, Options{Time: true})
				if err != nil {
					t.Fatal(err)
				}
				if mem.Latency == nil || streamed.Latency == nil {
					t.Fatal("a timed pass has no latency")
				}
				if path == files[2] && mem.Records != int64(len(recs)) {
					t.Errorf("%d records replayed, the file has %d", mem.Records, len(recs))
				}
				for _, r := range []*Result{mem, streamed} {
					r.Latency, r.WallSeconds, r.Stats = nil, 0, alloc.Stats{}
				}
				if *mem != *streamed {
					t.Errorf("from memory %+v\nstreamed    %+v", *mem, *streamed)
				}
			})
		}
	}
}

// Measure's figures do not depend on where the timed pass reads the trace.
func TestMeasureStreamAndMemoryAgree(t *testing.T) {
	recs, err := synth.Random(synth.RandomConfig{Seed: 11, Allocations: 2000})
	if err != nil {
		t.Fatal(err)
	}
	path := writeTrace(t, recs)
	for _, p := range policies {
		var got [2]*Report
		for i, stream := range []bool{false, true} {
			rep, err := Measure(FromFile("t", path), p, MeasureOptions{Device: SimDevice(1 << 40), Time: true, Verify: true, Stream: stream})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Latency == nil || !rep.Verified || rep.VerifiedAllocations != rep.Frees || rep.VerifyMismatches != 0 {
				t.Fatalf("%s stream=%v: latency %v, verified %v %d of %d frees, %d mismatches", p.Name, stream,
					rep.Latency, rep.Verified, rep.VerifiedAllocations, rep.Frees, rep.VerifyMismatches)
			}
			rep.Latency, rep.WallSeconds, rep.Stats = nil, 0, alloc.Stats{}
			got[i] = rep
		}
		if *got[0].Result != *got[1].Result {
			t.Errorf("%s: from memory %+v\nstreamed    %+v", p.Name, *got[0].Result, *got[1].Result)
		}
	}
}

// A first pass that runs out of memory leaves no copy; the file is then
// read into memory before the timed pass.
func TestMeasureLoadsAfterOOM(t *testing.T) {
	recs, err := synth.BatchWalk(synth.BatchWalkConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr := FromFile("bw", writeTrace(t, recs))
	rep, err := Measure(tr, policies[0], MeasureOptions{Device: SimDevice(256 * mib), Time: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OOM == nil || rep.Latency == nil {
		t.Fatalf("OOM %v, latency %v; want both", rep.OOM, rep.Latency)
	}
	if tr.compact == nil || tr.compact.Len() != len(recs) {
		t.Errorf("compact copy of %v records, want %d", tr.compact, len(recs))
	}
}

func TestLoadReportsMalformedTrace(t *testing.T) {
	tr := FromFile("bad", "testdata/bad.csv")
	err := tr.load()
	if err == nil || !strings.Contains(err.Error(), "line") {
		t.Errorf("load of a malformed trace: %v", err)
	}
	if tr.compact != nil {
		t.Error("a failed load kept a copy")
	}
}

func TestMeasureOOM(t *testing.T) {
	recs, err := synth.BatchWalk(synth.BatchWalkConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Measure(FromRecords("bw", recs), policies[0], MeasureOptions{Device: SimDevice(256 * mib), MinCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OOM == nil || rep.MinCapacity != nil {
		t.Errorf("OOM %v, min capacity %v; want an OOM and no bisection", rep.OOM, rep.MinCapacity)
	}
}

func TestMeasureProgress(t *testing.T) {
	var lines []string
	_, err := Measure(FromRecords("t", minCapCases[0].recs), policies[0], MeasureOptions{
		Device: SimDevice(1 << 30), MinCapacity: true, Progress: func(s string) { lines = append(lines, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 3 || lines[0] != "t default: replaying" {
		t.Errorf("progress lines %q", lines)
	}
}

// Under a cap at its own uncapped peak, the recorded LLaMA LoRA history does
// not complete in page-mapped mode (the cap bounds the chunks, and the
// layout differs); the bisection raises its upper bound and still finds a
// smallest capacity.
func TestMinCapacityRaisesTheUpperBound(t *testing.T) {
	ts, err := Open("testdata/recorded/llama_lora.pickle.gz")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Measure(ts[0], Policy{Name: "paged", Conf: "page_mapped:true"}, MeasureOptions{Device: SimDevice(141 << 30), MinCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MinCapacity == nil || !rep.MinCapacity.Found {
		t.Fatalf("no smallest capacity: %+v", rep.MinCapacity)
	}
	if r := rep.MinCapacityOverLive(); r < 1 || r > 1.05 {
		t.Errorf("smallest capacity %.3f × live, want within [1, 1.05]", r)
	}
}
