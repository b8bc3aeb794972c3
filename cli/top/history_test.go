package top

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
)

const mib = 1 << 20

// ramp builds n samples one second apart of f(seconds).
func ramp(n int, f func(s float64) float64) []point {
	pts := make([]point, n)
	for i := range pts {
		pts[i] = point{t0.Add(time.Duration(i) * time.Second), uint64(max(f(float64(i)), 0))}
	}
	return pts
}

func TestGrowth(t *testing.T) {
	const base = 10 << 30
	tests := []struct {
		name   string
		pts    []point
		want   float64 // MiB/min
		tol    float64
		wantOK bool
	}{
		{"flat", ramp(60, func(float64) float64 { return base }), 0, 0.01, true},
		{"linear leak 60 MiB/min", ramp(120, func(s float64) float64 { return base + s*mib }), 60, 0.5, true},
		{"shrinking", ramp(120, func(s float64) float64 { return base - 2*s*mib }), -120, 1, true},
		// A training job's saw-tooth of 4 GiB every 20 s over a floor that
		// does not move: the raw series has a slope depending on the phase,
		// the floor has none.
		{"saw-tooth, flat floor", ramp(300, func(s float64) float64 { return base + math.Mod(s+7, 20)/20*4096*mib }), 0, 1, true},
		{"saw-tooth on a 30 MiB/min leak", ramp(300, func(s float64) float64 { return base + s*mib/2 + math.Mod(s+7, 20)/20*4096*mib }), 30, 3, true},
		// One spike of 40 GiB for one sample moves a minimum nowhere.
		{"spike", ramp(100, func(s float64) float64 {
			if s == 50 {
				return base + 40<<30
			}
			return base
		}), 0, 0.01, true},
		{"too few points", ramp(5, func(s float64) float64 { return base + s*mib }), 0, 0, false},
		{"too short a span", func() []point {
			p := ramp(50, func(s float64) float64 { return base + s*mib })
			for i := range p {
				p[i].t = t0.Add(time.Duration(i) * 100 * time.Millisecond)
			}
			return p
		}(), 0, 0, false},
		{"no time passes", func() []point {
			p := ramp(50, func(s float64) float64 { return base + s*mib })
			for i := range p {
				p[i].t = t0
			}
			return p
		}(), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := growth(tt.pts)
			if ok != tt.wantOK {
				t.Fatalf("ok %v, want %v", ok, tt.wantOK)
			}
			if ok && (!finite(got) || math.Abs(mibPerMin(got)-tt.want) > tt.tol) {
				t.Errorf("growth %.3f MiB/min, want %.3f ± %.3f", mibPerMin(got), tt.want, tt.tol)
			}
		})
	}
}

func TestTheilSenIgnoresOutliers(t *testing.T) {
	x := []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	y := []float64{0, 2, 4, 6, 1000, 10, 12, -500, 16, 18}
	got, ok := theilSen(x, y)
	if !ok || math.Abs(got-2) > 0.5 {
		t.Errorf("slope %v, want about 2 despite two outliers", got)
	}
	if _, ok := theilSen([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("a slope from points with one x")
	}
}

func TestSeriesKeepsTheNewest(t *testing.T) {
	s := newSeries(5)
	for i := 0; i < 23; i++ {
		s.add(t0.Add(time.Duration(i)*time.Second), uint64(i))
		w := s.window()
		if len(w) != min(i+1, 5) || w[len(w)-1].v != uint64(i) || w[0].v != uint64(max(0, i-4)) {
			t.Fatalf("after %d adds the window is %v", i+1, w)
		}
	}
	if cap(s.pts) > 10 {
		t.Errorf("the series grew to %d points of storage for a window of 5", cap(s.pts))
	}
}

func TestResample(t *testing.T) {
	pts := func(vs ...uint64) []point {
		var out []point
		for i, v := range vs {
			out = append(out, point{t0.Add(time.Duration(i) * time.Second), v})
		}
		return out
	}
	tests := []struct {
		name     string
		pts      []point
		capacity int
		cols     int
		want     string // one character per column: the value, or . when empty
	}{
		{"full, one per column", pts(1, 2, 3, 4), 4, 4, "1234"},
		{"half full: empty on the left", pts(1, 2), 4, 4, "..12"},
		{"two per column take the maximum", pts(1, 5, 2, 3, 9, 0), 6, 3, "539"},
		{"stretched", pts(1, 2), 2, 4, "1122"},
		{"empty", nil, 4, 4, "...."},
		{"more points than capacity widen the axis", pts(1, 2, 3, 4, 5, 6), 3, 6, "123456"},
	}
	for _, tt := range tests {
		vals, ok := resample(tt.pts, tt.capacity, tt.cols)
		var b strings.Builder
		for i := range vals {
			if ok[i] {
				b.WriteByte(byte('0' + vals[i]))
			} else {
				b.WriteByte('.')
			}
		}
		if b.String() != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, b.String(), tt.want)
		}
	}
}

func TestSparklineAndGraph(t *testing.T) {
	up := ramp(8, func(s float64) float64 { return s })
	if got := sparkline(up, 8, 8); got != "▁▂▃▄▅▆▇█" {
		t.Errorf("sparkline of a ramp: %q", got)
	}
	if got := sparkline(ramp(4, func(float64) float64 { return 7 }), 8, 8); got != "    ▁▁▁▁" {
		t.Errorf("sparkline of a flat half window: %q", got)
	}
	// A full-scale column fills every dot; an empty one none; zero shows
	// the blank braille cell, no history a space.
	g := graphLines([]point{{t0, 0}, {t0, 100}}, 4, 100, 6+2, 2, "top", "0")
	if len(g) != 2 {
		t.Fatalf("%d rows", len(g))
	}
	if got := ansi.Strip(g[0]); got != "  top  ⢸" {
		t.Errorf("top row %q", got)
	}
	if got := ansi.Strip(g[1]); got != "    0  ⢸" {
		t.Errorf("bottom row %q", got)
	}
}
