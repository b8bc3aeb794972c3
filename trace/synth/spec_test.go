package synth

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/vramhq/vram/trace/rmm"
)

func TestParseSpecErrors(t *testing.T) {
	tests := []struct{ spec, want string }{
		// An explicit 0 is its value, not the default: refused with the
		// range where the generator cannot use it.
		{"random:allocations=0", "allocations=0: must be at least 1"},
		{"random:maxlive=0", "maxlive=0: must be at least 1 (left unset, there is no cap)"},
		{"random:min=0", "min=0: must be at least 1 B"},
		{"random:max=0", "min (default 1 B) is above max=0"},
		{"random:maxlivebytes=0", "max (default 64.00 MiB) is above maxlivebytes=0: the largest allocation would not fit"},
		{"random:p=0", "p=0: must be in (0, 1]"},
		{"batchwalk:steps=0", "steps=0: must be at least 1"},
		{"batchwalk:start=0", "start=0: must be at least 1"},
		{"batchwalk:end=0", "start (default 1) is above end=0"},
		{"batchwalk:layers=0", "layers=0: must be at least 1"},
		{"batchwalk:activation=0", "activation=0: must be between 1 B and 1.00 TiB"},
		{"batchwalk:weights=0", "weights=0: must be at least 1 B"},
		{"kvcache:concurrent=0", "concurrent=0: must be at least 1"},
		{"kvcache:block=0", "block=0: must be at least 1 B"},
		{"kvcache:sequences=0", "sequences=0: must be at least 1"},
		{"kvcache:tokensperblock=0", "tokensperblock=0: must be at least 1"},
		{"kvcache:promptmin=0", "promptmin=0: must be at least 1"},
		{"kvcache:outputmax=0", "outputmin (default 16) is above outputmax=0"},
		{"kvcache:scratch=0", "scratch=0: must be at least 1 B"},
		// Keys as the spec writes them, sizes as written or human.
		{"random:p=2", "p=2: must be in (0, 1]"},
		{"random:min=10GiB,max=1GiB", "min=10GiB is above max=1GiB"},
		{"random:max=20GiB", "max=20GiB is above maxlivebytes (default 15.62 GiB)"},
		{"batchwalk:start=9,end=2", "start=9 is above end=2"},
		{"batchwalk:activation=2TiB", "activation=2TiB: must be between 1 B and 1.00 TiB"},
		{"kvcache:promptmin=9,promptmax=3", "promptmin=9 is above promptmax=3"},
		{"random:allocations=-3", "allocations=-3: must be at least 1"},
		// A key given twice.
		{"random:seed=1,seed=2", "seed is given twice (seed=1 and seed=2)"},
		{"kvcache:block=1MiB,seed=3,block=1MiB", "block is given twice"},
		// Values that do not read.
		{"random:seed=x", "seed=x: want a whole number, 0 or more"},
		{"random:seed=-1", "seed=-1: want a whole number, 0 or more"},
		{"random:allocations=1.5", "allocations=1.5: want a whole number"},
		{"random:allocations=99999999999999999999", "allocations=99999999999999999999: out of range"},
		{"random:p=often", "p=often: want a number"},
		{"random:max=lots", `max=lots: size "lots"`},
		{"random:max=1 MiB\n,maxlivebytes=1KiB", `max="1 MiB\n" is above maxlivebytes=1KiB`},
		{"random:seed", `"seed": want KEY=VALUE`},
		{"random:colour=red", `unknown key "colour" for random (known: seed, allocations, min, max, maxlive, maxlivebytes, p)`},
		{"nope", `unknown generator "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			gen, err := ParseSpec(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseSpec(%q) error %v, want one containing %q", tt.spec, err, tt.want)
			}
			if gen != nil {
				t.Error("a generator with the error")
			}
			for _, goName := range []string{"Allocations", "MinSize", "MaxSize", "MaxLive", "AllocProbability", "StartBatch", "EndBatch", "BlockBytes", "MaxConcurrent"} {
				if strings.Contains(err.Error(), goName) {
					t.Errorf("error %q names the Go field %s", err, goName)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

// A spec generates what the Go API generates for the same configuration,
// and values that a generator can use are honoured, 0 included.
func TestParseSpecMatchesConfig(t *testing.T) {
	for _, tc := range []struct {
		spec string
		gen  func() (string, error)
	}{
		{"random:seed=2,allocations=100,max=1MiB", func() (string, error) {
			return logOf(Random(RandomConfig{Seed: 2, Allocations: 100, MaxSize: 1 << 20}))
		}},
		{"random", func() (string, error) { return logOf(Random(RandomConfig{})) }},
		// seed=0 is the default seed; min=100MiB alone raises the default max.
		{"random:seed=0,min=100MiB,allocations=50", func() (string, error) {
			return logOf(Random(RandomConfig{MinSize: 100 << 20, Allocations: 50}))
		}},
		{"random:maxlive=3,p=1,allocations=40", func() (string, error) {
			return logOf(Random(RandomConfig{MaxLive: 3, AllocProbability: 1, Allocations: 40}))
		}},
		{"batchwalk:start=9", func() (string, error) { return logOf(BatchWalk(BatchWalkConfig{StartBatch: 9})) }},
		// workspace=0 is no workspace, as when unset.
		{"batchwalk:seed=3,start=2,end=3,workspace=0", func() (string, error) {
			return logOf(BatchWalk(BatchWalkConfig{Seed: 3, StartBatch: 2, EndBatch: 3}))
		}},
		{"kvcache:sequences=4,block=1MiB,concurrent=1", func() (string, error) {
			return logOf(KVCache(KVCacheConfig{Sequences: 4, BlockBytes: 1 << 20, MaxConcurrent: 1}))
		}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			gen, err := ParseSpec(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := logOf(gen(), nil)
			want, err := tc.gen()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("the spec's trace differs from the configuration's")
			}
		})
	}
}

// SpecSyntax lists every key each generator knows, on the generator's
// lines.
func TestSpecSyntaxNamesEveryKey(t *testing.T) {
	for _, kind := range []string{"random", "batchwalk", "kvcache"} {
		_, err := ParseSpec(kind + ":nokey=1")
		_, list, _ := strings.Cut(err.Error(), "(known: ")
		keys := strings.Split(strings.TrimSuffix(list, ")"), ", ")
		// The generator's line and the indented lines that continue it.
		var section []string
		in := false
		for _, l := range strings.Split(SpecSyntax, "\n") {
			switch {
			case strings.HasPrefix(l, "  "+kind+" "):
				in = true
			case !strings.HasPrefix(l, "    "):
				in = false
			}
			if in {
				section = append(section, strings.FieldsFunc(l, func(r rune) bool { return r == ' ' || r == ',' })...)
			}
		}
		for _, k := range keys {
			if !slices.Contains(section, k) {
				t.Errorf("SpecSyntax does not name %s's key %s", kind, k)
			}
		}
	}
}

// logOf writes records as an RMM log.
func logOf(recs []rmm.Record, err error) (string, error) {
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	w := rmm.NewWriter(&b)
	for _, r := range recs {
		w.Write(r)
	}
	w.Flush()
	return b.String(), nil
}
