package detect_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/detect/detecttest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed runs a default detector over s, asking for a verdict every 5 s of
// sample time. It returns the final verdict, the first time a leak was called
// wrongly (before the leak starts, or at all on a healthy series; -1 if
// never) and how long after the leak's start it was first called (-1 if never).
func feed(t *testing.T, s detecttest.Series) (final detect.Verdict, wrongAt, calledAfter time.Duration) {
	t.Helper()
	d, err := detect.New(detect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	wrongAt, calledAfter = -1, -1
	start := s.Samples[0].T
	next := 5 * time.Second
	for _, x := range s.Samples {
		d.Add(x.T, x.Bytes)
		at := x.T.Sub(start)
		if at < next {
			continue
		}
		next += 5 * time.Second
		if v := d.Verdict(); v.Kind == detect.Leak {
			switch {
			case !s.Leak || at < s.LeakStart:
				if wrongAt < 0 {
					wrongAt = at
				}
			case calledAfter < 0:
				calledAfter = at - s.LeakStart
			}
		}
	}
	return d.Verdict(), wrongAt, calledAfter
}

// TestPatterns runs every synthetic pattern at three sampling intervals and
// two noise levels over a few seeds. Healthy patterns must end NoLeak and
// never be called a leak on the way; leaks must be called, the plain ones
// within 60 s. The full confusion table (more seeds, a heavier noise level,
// where the detector is slower) is in docs/detect.md.
func TestPatterns(t *testing.T) {
	// How long after the start of each leak it must be called.
	deadline := map[string]time.Duration{
		"leak":           detecttest.LeakWindow,
		"leak-8":         detecttest.LeakWindow,
		"leak-16":        detecttest.LeakWindow,
		"leak-64":        detecttest.LeakWindow,
		"leak-short":     40 * time.Second, // the job ends 40 s after the leak starts
		"leak-sawtooth":  detecttest.LeakWindow,
		"leak-slow-40g":  detecttest.LeakWindow,
		"leak-late":      detecttest.LeakWindow,
		"leak-staircase": 2 * time.Minute,
		"leak-big-steps": 5 * time.Minute,
	}
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for _, p := range detecttest.Patterns {
		for _, iv := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
			for _, noise := range []float64{0, 4} {
				limit := deadline[p.Name]
				if iv == time.Second && p.Sawtooth {
					// At 1 s under a sawtooth, 5 samples a window often
					// miss the floor: slower, see docs/detect.md.
					limit = detecttest.LeakTail
				}
				name := fmt.Sprintf("%s/%v/%gMiB", p.Name, iv, noise)
				t.Run(name, func(t *testing.T) {
					for seed := range uint64(seeds) {
						s, err := detecttest.Generate(p, seed, detecttest.Spec{Interval: iv, Noise: noise * detecttest.MiB})
						if err != nil {
							t.Fatal(err)
						}
						final, wrongAt, calledAfter := feed(t, s)
						if wrongAt >= 0 {
							t.Errorf("seed %d: leak called wrongly at %v; final %v", seed, wrongAt, final)
						}
						if !p.Leak {
							if final.Kind != detect.NoLeak {
								t.Errorf("seed %d: final %v, want no-leak", seed, final)
							}
							continue
						}
						if calledAfter < 0 || calledAfter > limit {
							t.Errorf("seed %d: leak called %v after its start, want within %v; final %v",
								seed, calledAfter, limit, final)
						}
					}
				})
			}
		}
	}
}

// series builds samples at a fixed interval from a function of seconds.
func series(d time.Duration, iv time.Duration, f func(sec float64) float64) []detect.Sample {
	var out []detect.Sample
	for at := time.Duration(0); at < d; at += iv {
		out = append(out, detect.Sample{T: t0.Add(at), Bytes: uint64(f(at.Seconds()))})
	}
	return out
}

func TestVerdictFields(t *testing.T) {
	const gib = 1 << 30
	leak := series(3*time.Minute, 100*time.Millisecond, func(s float64) float64 { return 10*gib + 2*detect.MiB*s })
	v, err := detect.Analyze(leak, detect.Config{Capacity: 80 * gib})
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != detect.Leak {
		t.Fatalf("got %v, want leak", v)
	}
	if math.Abs(v.Slope-2*detect.MiB) > 0.01*detect.MiB {
		t.Errorf("Slope = %v, want 2 MiB/s", v.Slope)
	}
	if got := v.MiBPerMin(); math.Abs(got-120) > 0.5 {
		t.Errorf("MiBPerMin = %v, want 120", got)
	}
	if v.Confidence < 0.999 || v.Confidence > 1 || math.Abs(v.P+v.Confidence-1) > 1e-12 {
		t.Errorf("Confidence = %v, P = %v", v.Confidence, v.P)
	}
	// The newest peak is about 10 GiB + 360 MiB; 70 GiB − 360 MiB left at 2 MiB/s.
	left, ok := v.TimeToOOM(80 * gib)
	want := time.Duration((70*1024 - 360) / 2 * float64(time.Second))
	if !ok || (left-want).Abs() > 10*time.Second {
		t.Errorf("TimeToOOM = %v, %v; want about %v", left, ok, want)
	}
	if !strings.Contains(v.Reason, "out of memory") {
		t.Errorf("Reason %q does not mention the projection", v.Reason)
	}
	if left, ok := v.TimeToOOM(1 * gib); !ok || left != 0 {
		t.Errorf("TimeToOOM below the current peak = %v, %v; want 0, true", left, ok)
	}

	flat := series(3*time.Minute, 100*time.Millisecond, func(float64) float64 { return 10 * gib })
	v, err = detect.Analyze(flat, detect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != detect.NoLeak || v.Slope != 0 {
		t.Errorf("flat: got %v slope %v", v, v.Slope)
	}
	if _, ok := v.TimeToOOM(80 * gib); ok {
		t.Error("TimeToOOM of a no-leak verdict is ok")
	}
}

func TestOneStepIsNotALeak(t *testing.T) {
	const gib = 1 << 30
	step := series(5*time.Minute, 100*time.Millisecond, func(s float64) float64 {
		if s > 150 {
			return 12 * gib
		}
		return 10 * gib
	})
	v, err := detect.Analyze(step, detect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind != detect.NoLeak || v.StepsUp != 1 || v.StepsDown != 0 || !strings.Contains(v.Reason, "step") {
		t.Errorf("got %v (steps %d up %d down)", v, v.StepsUp, v.StepsDown)
	}
}

func TestInsufficient(t *testing.T) {
	tests := []struct {
		name    string
		samples []detect.Sample
	}{
		{"none", nil},
		{"one", []detect.Sample{{T: t0, Bytes: 1}}},
		{"equal times", []detect.Sample{{T: t0, Bytes: 1}, {T: t0, Bytes: 2}, {T: t0, Bytes: 3}}},
		{"too short", series(20*time.Second, 10*time.Millisecond, func(s float64) float64 { return 1e9 * s })},
		// A fast rise is warm-up until it has kept its pace for SteadyRise.
		{"still warming up", series(40*time.Second, 100*time.Millisecond, func(s float64) float64 { return 1e9 * s })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := detect.Analyze(tc.samples, detect.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if v.Kind != detect.Insufficient || v.Reason == "" {
				t.Errorf("got %v, want insufficient with a reason", v)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  detect.Config
		want string
	}{
		{"negative window", detect.Config{Window: -time.Second}, "negative"},
		{"tiny window", detect.Config{Window: time.Microsecond}, "below 1ms"},
		{"alpha 1", detect.Config{Alpha: 1}, "Alpha"},
		{"NaN slope", detect.Config{MinSlope: math.NaN()}, "MinSlope"},
		{"odd max windows", detect.Config{MaxWindows: 99}, "MaxWindows"},
		{"max windows too small", detect.Config{MaxWindows: 8}, "MaxWindows"},
		{"min windows too small", detect.Config{MinWindows: 2}, "MinWindows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := detect.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%+v) error = %v, want one naming %q", tc.cfg, err, tc.want)
			}
			if _, err := detect.Analyze(nil, tc.cfg); err == nil {
				t.Error("Analyze accepted the bad config")
			}
		})
	}
	if _, err := detect.New(detect.Config{}); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

func TestOutOfOrderSamplesIgnored(t *testing.T) {
	d, err := detect.New(detect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.Add(t0.Add(10*time.Second), 5)
	d.Add(t0, 1)                      // before the first sample
	d.Add(t0.Add(20*time.Second), 5)  // opens a later window
	d.Add(t0.Add(12*time.Second), 99) // in an already closed window
	d.Add(t0.Add(20*time.Second), 6)  // equal time is fine
	if acc, ign := d.Samples(); acc != 3 || ign != 2 {
		t.Errorf("Samples() = %d accepted, %d ignored; want 3, 2", acc, ign)
	}
}

// TestBoundedMemoryLateLeak runs a detector for six hours of flat memory at
// 1 s (far more windows than it keeps) and then starts a 1 MiB/s leak: the
// newest windows keep full resolution, so the leak is still called within
// 60 s, and the long flat history never produces a call.
func TestBoundedMemoryLateLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("six hours of samples")
	}
	const gib = 1 << 30
	d, err := detect.New(detect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	flat := 6 * time.Hour
	at := time.Duration(0)
	for ; at < flat; at += time.Second {
		noise := float64(int64(at/time.Second)*7919%13) * detect.MiB / 4 // deterministic wiggle
		d.Add(t0.Add(at), uint64(20*gib+noise))
		if at%time.Minute == 0 {
			if v := d.Verdict(); v.Kind == detect.Leak {
				t.Fatalf("flat series called a leak at %v: %v", at, v)
			}
		}
	}
	for ; at < flat+60*time.Second; at += time.Second {
		leak := (at - flat).Seconds() * detect.MiB
		d.Add(t0.Add(at), uint64(20*gib+leak))
	}
	v := d.Verdict()
	if v.Kind != detect.Leak {
		t.Fatalf("leak after six flat hours not called within 60 s: %v", v)
	}
	if math.Abs(v.Slope-detect.MiB) > 0.2*detect.MiB {
		t.Errorf("slope %v, want about 1 MiB/s", v.Slope)
	}
	if got := detect.WindowsKept(d); got > d.Config().MaxWindows {
		t.Errorf("kept %d windows, more than MaxWindows %d", got, d.Config().MaxWindows)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[detect.Kind]string{detect.Insufficient: "insufficient", detect.NoLeak: "no-leak", detect.Leak: "leak", 7: "Kind(7)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(k), got, want)
		}
	}
}

func expNeg(x float64) float64 { return math.Exp(-x) }
