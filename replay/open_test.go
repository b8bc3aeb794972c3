package replay

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/trace/rmm"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		errPart string
	}{
		{in: "default", want: []string{"default"}},
		{in: "gc, roundup4", want: []string{"gc", "roundup4"}},
		{in: "all", want: PolicyNames()},
		{in: "nope", errPart: `unknown policy "nope" (known: default, roundup4, maxsplit, gc, paged, or all)`},
		{in: "default,default", errPart: "given twice"},
		{in: "default,", errPart: "empty policy name"},
	}
	for _, tt := range tests {
		got, err := ParsePolicies(tt.in)
		if tt.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errPart) {
				t.Errorf("ParsePolicies(%q) error %v, want one containing %q", tt.in, err, tt.errPart)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePolicies(%q): %v", tt.in, err)
			continue
		}
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
		}
		if !slices.Equal(names, tt.want) {
			t.Errorf("ParsePolicies(%q) = %v, want %v", tt.in, names, tt.want)
		}
	}
}

func TestPoliciesConfigure(t *testing.T) {
	for _, p := range Policies() {
		cfg, err := p.Config()
		if err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if (p.Conf == "") != (cfg == alloc.Config{}) {
			t.Errorf("%s: settings %q give %+v", p.Name, p.Conf, cfg)
		}
		if p.Doc == "" {
			t.Errorf("%s: no description", p.Name)
		}
	}
}

func TestOpen(t *testing.T) {
	tests := []struct {
		spec    string
		names   []string
		records int
		errPart string
	}{
		{spec: "testdata/small.csv", names: []string{"small"}, records: 7},
		{spec: "testdata/small.csv.gz", names: []string{"small"}, records: 7},
		// Three allocations and an oom become records; the unmatched
		// free_completed and the segment events do not.
		{spec: "testdata/snapshot.pickle", names: []string{"snapshot"}, records: 4},
		{spec: "synth:random:seed=2,allocations=100,max=1MiB", names: []string{"synth:random:seed=2,allocations=100,max=1MiB"}, records: 200},
		{spec: "synth:batchwalk", names: []string{"synth:batchwalk"}},
		{spec: "synth:kvcache:sequences=4,block=1MiB", names: []string{"synth:kvcache:sequences=4,block=1MiB"}},
		{spec: "testdata/missing.csv", errPart: "no such file"},
		{spec: "testdata", errPart: "is a directory"},
		{spec: "synth:nope", errPart: `unknown generator "nope"`},
		{spec: "synth:random:seed", errPart: `"seed": want KEY=VALUE`},
		{spec: "synth:random:colour=red", errPart: `unknown key "colour" for random`},
		{spec: "synth:random:seed=x", errPart: `seed=x: want a whole number`},
		{spec: "synth:random:max=lots", errPart: `max=lots: size "lots"`},
		{spec: "synth:batchwalk:start=9,end=2", errPart: "synth:batchwalk:start=9,end=2: start=9 is above end=2"},
		{spec: "synth:random:allocations=0", errPart: "synth:random:allocations=0: allocations=0: must be at least 1"},
		{spec: "synth:kvcache:seed=1,seed=2", errPart: "seed is given twice (seed=1 and seed=2)"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			ts, err := Open(tt.spec)
			if tt.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errPart) {
					t.Fatalf("error %v, want one containing %q", err, tt.errPart)
				}
				if strings.Count(err.Error(), "\n") > 0 {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tr := range ts {
				names = append(names, tr.Name)
			}
			if !slices.Equal(names, tt.names) {
				t.Fatalf("names %v, want %v", names, tt.names)
			}
			src, done, _, err := ts[0].source(false)
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			n := 0
			for {
				if _, err := src.Next(); err != nil {
					break
				}
				n++
			}
			if tt.records != 0 && n != tt.records {
				t.Errorf("%d records, want %d", n, tt.records)
			}
			if n == 0 {
				t.Error("no records")
			}
		})
	}
}

func TestOpenGzipSnapshot(t *testing.T) {
	// A gzip-compressed pickle is recognised by its content too.
	raw, err := os.ReadFile("testdata/snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snap.pickle.gz")
	if err := os.WriteFile(path, gzipBytes(t, raw), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "snap" || len(ts[0].recs) != 4 {
		t.Errorf("traces %+v", ts)
	}
}

func TestHistogram(t *testing.T) {
	// Bucket bounds: every value is at or above its bucket's lower bound and
	// below the next one, and within 1/64 of the bound.
	r := rand.New(rand.NewPCG(1, 1))
	for range 100000 {
		v := int64(r.Uint64N(1 << uint(r.IntN(40))))
		i := bucketOf(v)
		lo := lowerBound(i)
		if v < lo || (i+1 < numBuckets && v >= lowerBound(i+1)) {
			t.Fatalf("value %d in bucket %d [%d, %d)", v, i, lo, lowerBound(i+1))
		}
		if float64(v-lo) > float64(v)/subBuckets {
			t.Fatalf("value %d: bucket bound %d too far", v, lo)
		}
	}
	var h histogram
	for v := int64(1); v <= 100; v++ {
		h.add(v)
	}
	h.add(-5) // clamped to zero
	if h.n != 101 || h.quantile(0.5) != 50 || h.quantile(0.99) != 99 || h.max != 100 || h.quantile(0) != 0 {
		t.Errorf("n %d p50 %d p99 %d max %d", h.n, h.quantile(0.5), h.quantile(0.99), h.max)
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Error("quantile of an empty histogram")
	}
	h.add(5000)
	if got := h.quantile(1); got > 5000 || got < 5000-5000/subBuckets {
		t.Errorf("p100 %d, want about 5000", got)
	}
}

func TestCalibrateTimer(t *testing.T) {
	if o := calibrateTimer(); o < 0 || o > 100000 {
		t.Errorf("timer overhead %d ns", o)
	}
}

// Records reads the whole trace: a file's records as written, and after
// Measure kept a compact copy, the same records without thread and time.
func TestTraceRecords(t *testing.T) {
	ts, err := Open("testdata/small.csv")
	if err != nil {
		t.Fatal(err)
	}
	read := func() []rmm.Record {
		src, done, err := ts[0].Records()
		if err != nil {
			t.Fatal(err)
		}
		defer done()
		var out []rmm.Record
		for {
			r, err := src.Next()
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	first := read()
	if len(first) != 7 || first[0].Action != rmm.Allocate || first[0].Time == 0 {
		t.Fatalf("records %+v, want the file's 7, with times", first)
	}
	if _, err := Measure(ts[0], Policies()[0], MeasureOptions{Device: SimDevice(1 << 30), Time: true}); err != nil {
		t.Fatal(err)
	}
	again := read()
	if len(again) != len(first) {
		t.Fatalf("%d records from the compact copy, want %d", len(again), len(first))
	}
	for i := range first {
		want := first[i]
		want.Thread, want.Time = 0, 0
		if again[i] != want {
			t.Errorf("record %d: %+v, want %+v", i, again[i], want)
		}
	}
}
