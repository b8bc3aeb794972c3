package synth

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/trace/rmm"
)

type generator struct {
	name string
	gen  func(seed uint64) ([]rmm.Record, error)
}

var generators = []generator{
	{"random", func(seed uint64) ([]rmm.Record, error) {
		return Random(RandomConfig{Seed: seed, Allocations: 2000, MaxSize: 8 << 20, MaxLiveBytes: 256 << 20})
	}},
	{"random with live cap", func(seed uint64) ([]rmm.Record, error) {
		return Random(RandomConfig{Seed: seed, Allocations: 500, MaxLive: 20})
	}},
	{"batch walk", func(seed uint64) ([]rmm.Record, error) {
		return BatchWalk(BatchWalkConfig{Seed: seed, StartBatch: 4, EndBatch: 9, Layers: 6, WorkspaceBytes: 1 << 20})
	}},
	{"kv cache", func(seed uint64) ([]rmm.Record, error) {
		return KVCache(KVCacheConfig{Seed: seed, Sequences: 40, MaxConcurrent: 6})
	}},
	{"profile", func(seed uint64) ([]rmm.Record, error) {
		return FromProfile(ProfileConfig{Seed: seed, Allocations: 3000, Profile: Profile{
			Sizes: []SizeWeight{{512, 10}, {1 << 20, 3}, {20 << 20, 1}, {7, 0}}, TargetLive: 50, Rate: 5000}})
	}},
}

// TestGeneratedTracesAreSound checks, for every generator and a few seeds,
// that the trace is valid, frees everything and never has negative live
// bytes (which Validate's running sum would expose as a free of a non-live
// pointer or a size mismatch).
func TestGeneratedTracesAreSound(t *testing.T) {
	for _, g := range generators {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("%s/seed%d", g.name, seed), func(t *testing.T) {
				recs, err := g.gen(seed)
				if err != nil {
					t.Fatal(err)
				}
				s, err := Validate(recs)
				if err != nil {
					t.Fatal(err)
				}
				if s.Allocations == 0 || s.Allocations != s.Frees {
					t.Errorf("allocations %d, frees %d", s.Allocations, s.Frees)
				}
				if s.EndLive != 0 || s.EndLiveBytes != 0 {
					t.Errorf("%d allocations (%d bytes) live at the end", s.EndLive, s.EndLiveBytes)
				}
				var live int64
				for i, r := range recs {
					switch r.Action {
					case rmm.Allocate:
						live += int64(r.Size)
					case rmm.Free:
						live -= int64(r.Size)
					}
					if live < 0 {
						t.Fatalf("record %d: live bytes %d", i, live)
					}
				}
			})
		}
	}
}

func TestDeterminism(t *testing.T) {
	for _, g := range generators {
		t.Run(g.name, func(t *testing.T) {
			a, _ := g.gen(42)
			b, _ := g.gen(42)
			c, _ := g.gen(43)
			if !equal(a, b) {
				t.Error("the same seed gave two different traces")
			}
			if g.name != "batch walk" && equal(a, c) { // batch walk sizes only vary by layer factors
				t.Error("two seeds gave the same trace")
			}
		})
	}
}

// TestGolden pins the first records of each generator, so that a change of
// the random mappings (which would change every recorded experiment) shows.
func TestGolden(t *testing.T) {
	for _, g := range generators {
		t.Run(g.name, func(t *testing.T) {
			recs, _ := g.gen(1)
			var all bytes.Buffer
			w := rmm.NewWriter(&all)
			for _, r := range recs {
				w.Write(r)
			}
			w.Flush()
			// The head of the trace, and a hash of all of it.
			lines := strings.SplitAfterN(all.String(), "\n", 8)
			var buf bytes.Buffer
			buf.WriteString(strings.Join(lines[:min(7, len(lines))], ""))
			h := fnv.New64a()
			h.Write(all.Bytes())
			fmt.Fprintf(&buf, "records %d, FNV-64a of the log %016x\n", len(recs), h.Sum64())
			name := "testdata/" + strings.ReplaceAll(g.name, " ", "_") + ".golden"
			checkGolden(t, name, buf.Bytes())
		})
	}
}

func equal(a, b []rmm.Record) bool {
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

func TestRandomRespectsCaps(t *testing.T) {
	recs, err := Random(RandomConfig{Seed: 7, Allocations: 3000, MinSize: 1 << 20, MaxSize: 4 << 20, MaxLive: 25, MaxLiveBytes: 60 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Validate(recs)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeakLive > 25 || s.PeakLiveBytes > 60<<20 {
		t.Errorf("peak live %d allocations, %d bytes; caps are 25 and 60 MiB", s.PeakLive, s.PeakLiveBytes)
	}
	if s.MinSize < 1<<20 || s.MaxSize > 4<<20 {
		t.Errorf("sizes %d..%d outside the configured range", s.MinSize, s.MaxSize)
	}
	if s.Allocations != 3000 {
		t.Errorf("%d allocations, want 3000", s.Allocations)
	}
	if s.Duration != time.Duration(len(recs)-1)*time.Microsecond {
		t.Errorf("duration %v for %d records of 1 µs", s.Duration, len(recs))
	}
}

func TestBatchWalkPeakGrowsWithBatch(t *testing.T) {
	peak := func(batch int) uint64 {
		recs, err := BatchWalk(BatchWalkConfig{Seed: 3, StartBatch: batch, EndBatch: batch})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := Validate(recs)
		return s.PeakLiveBytes
	}
	p1, p2, p4 := peak(1), peak(2), peak(4)
	if !(p1 < p2 && p2 < p4) {
		t.Fatalf("peaks %d, %d, %d do not grow with the batch", p1, p2, p4)
	}
	// Weights and their gradients are fixed; activations scale linearly.
	if d1, d2 := p2-p1, p4-p2; math.Abs(float64(d2)-2*float64(d1)) > float64(d1)/100 {
		t.Errorf("peak increments %d (1→2) and %d (2→4) are not linear in the batch", d1, d2)
	}
}

func TestKVCacheBlocks(t *testing.T) {
	cfg := KVCacheConfig{Seed: 5, Sequences: 1, MaxConcurrent: 1, TokensPerBlock: 16, BlockBytes: 1000,
		MinPromptTokens: 20, MaxPromptTokens: 20, MinOutputTokens: 30, MaxOutputTokens: 30,
		ScratchBytesPerSequence: 7, WeightBytes: 99}
	recs, err := KVCache(cfg)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, r := range recs {
		if r.Action == rmm.Allocate && r.Size == 1000 {
			blocks++
		}
	}
	// 20 prompt tokens take 2 blocks; 30 more make 50 tokens: 4 blocks.
	if blocks != 4 {
		t.Errorf("%d blocks allocated, want 4", blocks)
	}
	s, _ := Validate(recs)
	if s.PeakLiveBytes != 99+4*1000+7 {
		t.Errorf("peak %d, want weights + 4 blocks + scratch = %d", s.PeakLiveBytes, 99+4*1000+7)
	}
}

func TestProfileRoundTrip(t *testing.T) {
	in := Profile{Sizes: []SizeWeight{{4096, 3}, {1 << 20, 1}}, Rate: 2000, TargetLive: 40}
	recs, err := FromProfile(ProfileConfig{Seed: 11, Profile: in, Allocations: 20000})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ProfileOf(recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Sizes) != 2 {
		t.Fatalf("sizes %v", got.Sizes)
	}
	if frac := got.Sizes[0].Weight / (got.Sizes[0].Weight + got.Sizes[1].Weight); math.Abs(frac-0.75) > 0.02 {
		t.Errorf("share of 4 KiB allocations %.3f, want 0.75", frac)
	}
	if math.Abs(got.Rate-2000)/2000 > 0.05 {
		t.Errorf("rate %.0f/s, want about 2000", got.Rate)
	}
	s, _ := Validate(recs)
	if s.PeakLive != 40 {
		t.Errorf("peak live %d, want the target 40", s.PeakLive)
	}
	if got.TargetLive < 35 || got.TargetLive > 40 {
		t.Errorf("mean live %d, want close to 40", got.TargetLive)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"random sizes", errOf(Random(RandomConfig{MinSize: 10 << 30, MaxSize: 5})), "synth: random: MinSize 10.00 GiB is above MaxSize 5 B"},
		{"random cap", errOf(Random(RandomConfig{MaxSize: 10 << 20, MaxLiveBytes: 1 << 20})), "MaxSize 10.00 MiB is above MaxLiveBytes 1.00 MiB: the largest allocation would not fit"},
		{"random probability", errOf(Random(RandomConfig{AllocProbability: 1.5})), "AllocProbability 1.5: must be in (0, 1]"},
		{"random negative", errOf(Random(RandomConfig{Allocations: -1})), "Allocations -1: must be at least 1"},
		{"random live cap", errOf(Random(RandomConfig{MaxLive: -2})), "MaxLive -2: must be at least 1"},
		{"batch range", errOf(BatchWalk(BatchWalkConfig{StartBatch: 5, EndBatch: 2})), "synth: batch walk: StartBatch 5 is above EndBatch 2"},
		{"batch layers", errOf(BatchWalk(BatchWalkConfig{Layers: -1})), "Layers -1: must be at least 1"},
		{"batch activation", errOf(BatchWalk(BatchWalkConfig{ActivationBytesPerSample: 2 << 40})), "ActivationBytesPerSample 2.00 TiB: must be between 1 B and 1.00 TiB"},
		{"kv prompt", errOf(KVCache(KVCacheConfig{MinPromptTokens: 9, MaxPromptTokens: 3})), "synth: kv cache: MinPromptTokens 9 is above MaxPromptTokens 3"},
		{"kv concurrent", errOf(KVCache(KVCacheConfig{MaxConcurrent: -1})), "MaxConcurrent -1: must be at least 1"},
		{"profile empty", errOf(FromProfile(ProfileConfig{})), "no sizes"},
		{"profile weights", errOf(FromProfile(ProfileConfig{Profile: Profile{Sizes: []SizeWeight{{1, 0}}}})), "weights sum to 0"},
		{"profile NaN", errOf(FromProfile(ProfileConfig{Profile: Profile{Sizes: []SizeWeight{{1, math.NaN()}}}})), "entry 0"},
		{"profile rate", errOf(FromProfile(ProfileConfig{Profile: Profile{Sizes: []SizeWeight{{1, 1}}, Rate: -1}})), "rate -1"},
		{"profile of nothing", errOf(ProfileOf(nil)), "without allocations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", tt.err, tt.want)
			}
		})
	}
}

func errOf[T any](_ T, err error) error { return err }

func TestValidateCatchesBadTraces(t *testing.T) {
	a := rmm.Record{Action: rmm.Allocate, Pointer: 1, Size: 10}
	tests := []struct {
		name string
		recs []rmm.Record
		want string
	}{
		{"free of unknown", []rmm.Record{{Action: rmm.Free, Pointer: 9, Size: 1}}, "not live"},
		{"double free", []rmm.Record{a, {Action: rmm.Free, Pointer: 1, Size: 10}, {Action: rmm.Free, Pointer: 1, Size: 10}}, "not live"},
		{"size mismatch", []rmm.Record{a, {Action: rmm.Free, Pointer: 1, Size: 11}}, "size 11, allocated with 10"},
		{"double allocate", []rmm.Record{a, a}, "already live"},
		{"time goes back", []rmm.Record{{Time: 5, Action: rmm.AllocateFailure}, {Time: 4, Action: rmm.AllocateFailure}}, "before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Validate(tt.recs); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	s, err := Validate([]rmm.Record{a, {Action: rmm.AllocateFailure, Size: 5}})
	if err != nil || s.EndLive != 1 || s.EndLiveBytes != 10 || s.Failures != 1 {
		t.Errorf("leaky trace: %+v, %v", s, err)
	}
}

func BenchmarkRandom(b *testing.B) {
	for b.Loop() {
		Random(RandomConfig{Seed: 1, Allocations: 10000})
	}
}

// FuzzParseSpec checks that no generator spec makes the parser panic and
// that its errors are one line. The generators are not run: a fuzzed spec
// may ask for billions of allocations.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"random", "random:seed=1,max=64MiB", "batchwalk:start=1,end=8", "kvcache:block=2MiB,p=0.5", "random:=", "x:y=z,,", "random:p=NaN", "random:max=1MiB\n", "random:seed=1,seed=\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		gen, err := ParseSpec(spec)
		if err != nil {
			if gen != nil {
				t.Errorf("%q: a generator and an error", spec)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error spans lines: %q", spec, err)
			}
			return
		}
		if gen == nil {
			t.Errorf("%q: no generator and no error", spec)
		}
	})
}
