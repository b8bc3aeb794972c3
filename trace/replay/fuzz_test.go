package replay

import (
	"strings"
	"testing"
)

// FuzzParseSynth checks that no generator spec makes the parser panic and
// that its errors are one line. The generators are not run: a fuzzed spec
// may ask for billions of allocations.
func FuzzParseSynth(f *testing.F) {
	for _, s := range []string{"random", "random:seed=1,max=64MiB", "batchwalk:start=1,end=8", "kvcache:block=2MiB,p=0.5", "random:=", "x:y=z,,", "random:p=NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		gen, err := parseSynth(spec)
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

// FuzzParsePolicies checks that policy lists never panic and that what is
// accepted names known policies once each.
func FuzzParsePolicies(f *testing.F) {
	for _, s := range []string{"default", "all", "gc,roundup4", ",", "default,,gc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePolicies(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, p := range ps {
			if _, ok := lookupPolicy(p.Name); !ok || seen[p.Name] {
				t.Errorf("%q gave %q", s, p.Name)
			}
			seen[p.Name] = true
		}
	})
}
