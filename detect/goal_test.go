package detect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/detect/detecttest"
)

// TestGoal encodes the detector's goal on fixed seeds: every leak of
// 1 MiB/s or more is called within 60 s of its start, fast leaks from the
// very start included, and the non-leaking patterns end the run as NoLeak.
// docs/detect.md has the same over 100 seeds and a heavier noise level.
func TestGoal(t *testing.T) {
	seeds := uint64(10)
	if testing.Short() {
		seeds = 2
	}
	tests := []struct {
		pattern  string
		interval time.Duration
		within   time.Duration // leaks: called this long after the start of the leak
	}{
		{"leak-8", 100 * time.Millisecond, time.Minute},
		{"leak-8", time.Second, time.Minute},
		{"leak-16", 100 * time.Millisecond, time.Minute},
		{"leak-16", time.Second, time.Minute},
		{"leak-64", 10 * time.Millisecond, time.Minute},
		{"leak-64", time.Second, time.Minute},
		{"leak", time.Second, time.Minute},
		{"leak-short", 100 * time.Millisecond, 40 * time.Second}, // by the end of a 60 s job
		{"leak-short", time.Second, 40 * time.Second},
		{"warmup", 100 * time.Millisecond, 0},
		{"warmup", time.Second, 0},
		{"warmup-ramp", 100 * time.Millisecond, 0},
		{"warmup-ramp", time.Second, 0},
		{"sawtooth", time.Second, 0},
		{"model-switch", 100 * time.Millisecond, 0},
		{"model-switch", time.Second, 0},
		{"one-step", time.Second, 0},
	}
	for _, tc := range tests {
		p, ok := detecttest.Lookup(tc.pattern)
		if !ok {
			t.Fatalf("no pattern %q", tc.pattern)
		}
		t.Run(fmt.Sprintf("%s/%v", tc.pattern, tc.interval), func(t *testing.T) {
			for seed := range seeds {
				s, err := detecttest.Generate(p, seed, detecttest.Spec{Interval: tc.interval, Noise: 4 * detecttest.MiB})
				if err != nil {
					t.Fatal(err)
				}
				final, _, calledAfter := feed(t, s)
				if !p.Leak {
					if final.Kind != detect.NoLeak {
						t.Errorf("seed %d: final %v, want no-leak", seed, final)
					}
					continue
				}
				if final.Kind == detect.Leak && calledAfter < 0 {
					calledAfter = s.Duration - s.LeakStart // called by the final verdict
				}
				if calledAfter < 0 || calledAfter > tc.within {
					t.Errorf("seed %d: called %v after the leak started, want within %v; final %v", seed, calledAfter, tc.within, final)
				}
			}
		})
	}
}

// TestWarmupShapes: hand-made warm-ups that level off are never called a
// leak, at any check, while a rise of the same speed that keeps its pace
// is called within 60 s.
func TestWarmupShapes(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name string
		f    func(s float64) float64
		leak bool
	}{
		{"model load then flat", func(s float64) float64 {
			if s < 3 {
				return 1 * gib
			}
			return 12 * gib
		}, false},
		{"weights, then optimizer state at 20 s", func(s float64) float64 {
			switch {
			case s < 3:
				return 1 * gib
			case s < 20:
				return 8 * gib
			}
			return 14 * gib
		}, false},
		{"ramp of 30 s at 100 MiB/s then flat", func(s float64) float64 { return 1*gib + 100*detect.MiB*min(s, 30) }, false},
		{"exponential approach, τ 10 s", func(s float64) float64 {
			return 20*gib - 19*gib*expNeg(s/10)
		}, false},
		{"steady 100 MiB/s from the start", func(s float64) float64 { return 1*gib + 100*detect.MiB*s }, true},
		{"steady 2 MiB/s from the start", func(s float64) float64 { return 1*gib + 2*detect.MiB*s }, true},
		{"accelerating rise", func(s float64) float64 { return 1*gib + 0.2*detect.MiB*s*s }, true},
	}
	for _, tc := range tests {
		for _, iv := range []time.Duration{100 * time.Millisecond, time.Second} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, iv), func(t *testing.T) {
				s := detecttest.Series{Pattern: tc.name, Leak: tc.leak, Duration: 3 * time.Minute,
					Samples: series(3*time.Minute, iv, tc.f)}
				final, wrongAt, calledAfter := feed(t, s)
				if wrongAt >= 0 {
					t.Errorf("called a leak at %v; final %v", wrongAt, final)
				}
				if !tc.leak && final.Kind != detect.NoLeak {
					t.Errorf("final %v, want no-leak", final)
				}
				if tc.leak && (calledAfter < 0 || calledAfter > time.Minute) {
					t.Errorf("called after %v, want within 1m; final %v", calledAfter, final)
				}
			})
		}
	}
}

func TestConfirm(t *testing.T) {
	leak, none := detect.Verdict{Kind: detect.Leak}, detect.Verdict{Kind: detect.NoLeak}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name string
		hold time.Duration
		seq  []detect.Verdict // one a second
		want []bool
	}{
		{"held", 3 * time.Second, []detect.Verdict{leak, leak, leak, leak, leak}, []bool{false, false, false, true, true}},
		{"broken", 2 * time.Second, []detect.Verdict{leak, leak, none, leak, leak, leak}, []bool{false, false, false, false, false, true}},
		{"never", 0, []detect.Verdict{none, none}, []bool{false, false}},
		{"default hold", 0, []detect.Verdict{leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak, leak},
			[]bool{false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := detect.Confirm{Hold: tc.hold}
			for i, v := range tc.seq {
				if got := c.Update(at(i), v); got != tc.want[i] {
					t.Errorf("verdict %d (%v): confirmed %v, want %v", i, v.Kind, got, tc.want[i])
				}
			}
			c.Reset()
			if c.Update(at(len(tc.seq)), leak) && tc.hold > 0 {
				t.Error("confirmed right after Reset")
			}
		})
	}
}
