package replay

import (
	"testing"
)

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
