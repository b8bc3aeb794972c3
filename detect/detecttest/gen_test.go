package detecttest

import (
	"slices"
	"testing"
	"time"
)

func TestGenerate(t *testing.T) {
	spec := Spec{Interval: 100 * time.Millisecond, Noise: 4 * MiB}
	for _, p := range Patterns {
		t.Run(p.Name, func(t *testing.T) {
			a, err := Generate(p, 7, spec)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(p, 7, spec)
			c, _ := Generate(p, 8, spec)
			if !slices.Equal(a.Samples, b.Samples) {
				t.Error("same seed, different samples")
			}
			if slices.Equal(a.Samples, c.Samples) {
				t.Error("different seeds, same samples")
			}
			want := int(a.Duration / spec.Interval)
			if n := len(a.Samples); n < want*9/10 || n > want+1 {
				t.Errorf("%d samples over %v, want about %d", n, a.Duration, want)
			}
			for i := 1; i < len(a.Samples); i++ {
				if a.Samples[i].T.Before(a.Samples[i-1].T) {
					t.Fatalf("sample %d goes back in time", i)
				}
			}
			// Every leak runs at least LeakWindow after it starts, except
			// leak-short, a 60 s job whose leak starts at 20 s.
			long := a.Duration >= a.LeakStart+LeakWindow || (p.Name == "leak-short" && a.Duration == 60*time.Second)
			if a.Leak != p.Leak || (p.Leak && !long) {
				t.Errorf("leak %v start %v duration %v", a.Leak, a.LeakStart, a.Duration)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	flat, ok := Lookup("flat")
	if !ok {
		t.Fatal("no flat pattern")
	}
	for _, tc := range []struct {
		name string
		p    Pattern
		spec Spec
	}{
		{"zero interval", flat, Spec{}},
		{"negative noise", flat, Spec{Interval: time.Second, Noise: -1}},
		{"unknown pattern", Pattern{Name: "nope"}, Spec{Interval: time.Second}},
	} {
		if _, err := Generate(tc.p, 1, tc.spec); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup found an unknown pattern")
	}
}
