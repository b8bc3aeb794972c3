// Package detecttest generates synthetic memory series for testing leak
// detection: the patterns a healthy job shows (warm-up, sawtooth of
// variable batches, model switching, a flat line, one step up) and leaks
// (plain, under a sawtooth, slow on a large base, starting late, in steps).
//
// Every series is a deterministic function of its seed. Memory at time t is
//
//	floor(t) + sawtooth(t) + noise
//
// where floor is the pattern's resting memory, sawtooth models training
// steps of random length (0.2–1 s) and random peak (each step rests at the
// floor for its first quarter, rises over half of it, falls back over the
// last quarter), and noise is Gaussian per sample. Sample times are spaced
// by the interval with ±20% jitter, and 2% of samples are dropped, so
// series are irregular.
package detecttest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/vramhq/vram/detect"
)

// MiB and GiB are 2^20 and 2^30 bytes.
const (
	MiB = 1 << 20
	GiB = 1 << 30
	mib = MiB
	gib = GiB
)

// Spec says how to sample a pattern.
type Spec struct {
	Interval time.Duration // mean time between samples
	Noise    float64       // standard deviation of per-sample noise, bytes
}

// Series is one generated run.
type Series struct {
	Pattern   string
	Leak      bool          // whether the pattern leaks
	LeakStart time.Duration // when the leak begins (for leaks)
	Duration  time.Duration
	Samples   []detect.Sample
}

// Pattern builds the memory model of one run.
type Pattern struct {
	Name string
	Leak bool
	// Describe is a short description for tables.
	Describe string
	// Sawtooth says whether the pattern has training steps on top of its
	// floor (then sampling at 1 s often misses the floor).
	Sawtooth bool
	build    func(r *rand.Rand) model
}

type model struct {
	floor     func(t float64) float64
	saw       bool
	sawMin    float64 // smallest step peak above the floor
	sawMax    float64 // largest
	duration  float64
	leakStart float64
}

// LeakWindow is how long after its start a leak should be called.
const LeakWindow = 60 * time.Second

// LeakTail is how long leaking runs go on after the leak starts, so that
// slower calls can be measured too.
const LeakTail = 180 * time.Second

// QuietDuration is the length of the non-leaking runs.
const QuietDuration = 300 * time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func quiet() float64  { return QuietDuration.Seconds() }
func within() float64 { return LeakTail.Seconds() }

// Patterns lists every pattern, non-leaking first.
var Patterns = []Pattern{
	{Name: "flat", Describe: "flat line with noise", build: func(r *rand.Rand) model {
		base := uniform(r, 2*gib, 40*gib)
		return model{floor: func(float64) float64 { return base }, duration: quiet()}
	}},
	{Name: "warmup", Sawtooth: true, Describe: "fast rise (τ 2–8 s) then flat, under a sawtooth", build: func(r *rand.Rand) model {
		lo, hi := uniform(r, 0.3*gib, 1*gib), uniform(r, 4*gib, 30*gib)
		tau := uniform(r, 2, 8)
		return model{floor: func(t float64) float64 { return hi - (hi-lo)*math.Exp(-t/tau) },
			saw: true, sawMin: 256 * mib, sawMax: 2 * gib, duration: quiet()}
	}},
	{Name: "warmup-ramp", Describe: "linear rise over 10–40 s then flat", build: func(r *rand.Rand) model {
		lo, hi := uniform(r, 0.3*gib, 1*gib), uniform(r, 2*gib, 20*gib)
		ramp := uniform(r, 10, 40)
		return model{floor: func(t float64) float64 { return lo + (hi-lo)*min(t/ramp, 1) }, duration: quiet()}
	}},
	{Name: "sawtooth", Sawtooth: true, Describe: "variable batches: random peaks 0.5–4 GiB each step, same floor", build: func(r *rand.Rand) model {
		base := uniform(r, 2*gib, 30*gib)
		return model{floor: func(float64) float64 { return base }, saw: true, sawMin: 512 * mib, sawMax: 4 * gib, duration: quiet()}
	}},
	{Name: "model-switch", Sawtooth: true, Describe: "plateaus of 20–90 s at random levels 2–24 GiB, up and down", build: func(r *rand.Rand) model {
		var ends, levels []float64
		for t := 0.0; t < quiet(); {
			t += uniform(r, 20, 90)
			ends = append(ends, t)
			levels = append(levels, uniform(r, 2*gib, 24*gib))
		}
		return model{floor: func(t float64) float64 {
			for i, e := range ends {
				if t < e {
					return levels[i]
				}
			}
			return levels[len(levels)-1]
		}, saw: true, sawMin: 256 * mib, sawMax: 1 * gib, duration: quiet()}
	}},
	{Name: "one-step", Sawtooth: true, Describe: "flat, one step up of 64 MiB–2 GiB at 20–80% of the run", build: func(r *rand.Rand) model {
		base, step := uniform(r, 2*gib, 30*gib), uniform(r, 64*mib, 2*gib)
		at := uniform(r, 0.2, 0.8) * quiet()
		return model{floor: func(t float64) float64 {
			if t >= at {
				return base + step
			}
			return base
		}, saw: true, sawMin: 256 * mib, sawMax: 2 * gib, duration: quiet()}
	}},
	{Name: "leak", Leak: true, Describe: "1–4 MiB/s from the start after a 5 s warm-up", build: func(r *rand.Rand) model {
		base, rate := uniform(r, 2*gib, 20*gib), uniform(r, 1*mib, 4*mib)
		return model{floor: func(t float64) float64 { return base*(1-math.Exp(-t/1.5)) + rate*t },
			duration: within()}
	}},
	fastLeak(8), fastLeak(16), fastLeak(64),
	{Name: "leak-short", Leak: true, Describe: "60 s job: warm-up, flat until 20 s, then 1 MiB/s", build: func(r *rand.Rand) model {
		base := uniform(r, 2*gib, 20*gib)
		return model{floor: func(t float64) float64 { return base*(1-math.Exp(-t/1.5)) + mib*max(0, t-20) },
			duration: 60, leakStart: 20}
	}},
	{Name: "leak-sawtooth", Leak: true, Sawtooth: true, Describe: "1 MiB/s under a sawtooth of random peaks", build: func(r *rand.Rand) model {
		base := uniform(r, 2*gib, 20*gib)
		return model{floor: func(t float64) float64 { return base + mib*t },
			saw: true, sawMin: 512 * mib, sawMax: 4 * gib, duration: within()}
	}},
	{Name: "leak-slow-40g", Leak: true, Describe: "1 MiB/s on a 40 GiB base", build: func(r *rand.Rand) model {
		return model{floor: func(t float64) float64 { return 40*gib + mib*t }, duration: within()}
	}},
	{Name: "leak-late", Leak: true, Sawtooth: true, Describe: "flat under a sawtooth for 2–20 min, then 1 MiB/s", build: func(r *rand.Rand) model {
		base, start := uniform(r, 2*gib, 20*gib), uniform(r, 120, 1200)
		return model{floor: func(t float64) float64 { return base + mib*max(0, t-start) },
			saw: true, sawMin: 256 * mib, sawMax: 2 * gib, duration: start + within(), leakStart: start}
	}},
	{Name: "leak-staircase", Leak: true, Describe: "20 MiB steps every 20 s (1 MiB/s in whole segments)", build: func(r *rand.Rand) model {
		base, phase := uniform(r, 2*gib, 20*gib), uniform(r, 0, 20)
		return model{floor: func(t float64) float64 { return base + 20*mib*math.Floor((t+phase)/20) },
			duration: within()}
	}},
	{Name: "leak-big-steps", Leak: true, Describe: "256 MiB steps every 30–60 s, never released", build: func(r *rand.Rand) model {
		base := uniform(r, 2*gib, 20*gib)
		var at []float64
		for t := 0.0; t < 600; {
			t += uniform(r, 30, 60)
			at = append(at, t)
		}
		return model{floor: func(t float64) float64 {
			n := 0
			for n < len(at) && at[n] <= t {
				n++
			}
			return base + 256*mib*float64(n)
		}, duration: 600}
	}},
}

// fastLeak is a leak of rate MiB/s from the very start, after a fast
// warm-up (τ 1.5 s) to a base of 2–20 GiB: the rise never slows down, which
// is what tells it from a warm-up.
func fastLeak(rate float64) Pattern {
	return Pattern{Name: fmt.Sprintf("leak-%g", rate), Leak: true,
		Describe: fmt.Sprintf("%g MiB/s from the start after a 5 s warm-up", rate),
		build: func(r *rand.Rand) model {
			base := uniform(r, 2*gib, 20*gib)
			return model{floor: func(t float64) float64 { return base*(1-math.Exp(-t/1.5)) + rate*mib*t },
				duration: within()}
		}}
}

// Lookup returns the pattern with the given name.
func Lookup(name string) (Pattern, bool) {
	for _, p := range Patterns {
		if p.Name == name {
			return p, true
		}
	}
	return Pattern{}, false
}

// Generate samples pattern p with spec, deterministically from seed.
func Generate(p Pattern, seed uint64, spec Spec) (Series, error) {
	if p.build == nil {
		return Series{}, fmt.Errorf("detecttest: pattern %q is not one of Patterns", p.Name)
	}
	if spec.Interval < time.Microsecond || spec.Interval > time.Minute {
		return Series{}, fmt.Errorf("detecttest: interval %v is outside 1µs–1m", spec.Interval)
	}
	if spec.Noise < 0 || math.IsNaN(spec.Noise) || math.IsInf(spec.Noise, 0) {
		return Series{}, fmt.Errorf("detecttest: noise %v is not a finite number ≥ 0", spec.Noise)
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	m := p.build(r)
	s := Series{
		Pattern:   p.Name,
		Leak:      p.Leak,
		LeakStart: time.Duration(m.leakStart * 1e9),
		Duration:  time.Duration(m.duration * 1e9),
	}
	iv := spec.Interval.Seconds()
	saw := newSawtooth(r, m)
	s.Samples = make([]detect.Sample, 0, int(m.duration/iv)+1)
	for i := 0; ; i++ {
		t := (float64(i) + uniform(r, -0.2, 0.2)) * iv
		if t < 0 {
			t = 0
		}
		if t >= m.duration {
			break
		}
		if r.Float64() < 0.02 {
			continue
		}
		b := m.floor(t) + saw.at(t) + r.NormFloat64()*spec.Noise
		s.Samples = append(s.Samples, detect.Sample{
			T:     epoch.Add(time.Duration(t * 1e9)),
			Bytes: uint64(max(b, 0)),
		})
	}
	return s, nil
}

// sawtooth yields the step-shaped memory above the floor. Times must be
// asked in increasing order.
type sawtooth struct {
	r              *rand.Rand
	on             bool
	lo, hi         float64
	start, end, pk float64
}

func newSawtooth(r *rand.Rand, m model) *sawtooth {
	s := &sawtooth{r: rand.New(rand.NewPCG(r.Uint64(), 1)), on: m.saw, lo: m.sawMin, hi: m.sawMax}
	s.next(0)
	return s
}

func (s *sawtooth) next(from float64) {
	s.start = from
	s.end = from + uniform(s.r, 0.2, 1.0)
	s.pk = uniform(s.r, s.lo, s.hi)
}

func (s *sawtooth) at(t float64) float64 {
	if !s.on {
		return 0
	}
	for t >= s.end {
		s.next(s.end)
	}
	ph := (t - s.start) / (s.end - s.start)
	switch {
	case ph < 0.25:
		return 0
	case ph < 0.75:
		return s.pk * (ph - 0.25) / 0.5
	default:
		return s.pk * (1 - ph) / 0.25
	}
}

func uniform(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
