package detect

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMannKendall(t *testing.T) {
	tests := []struct {
		name string
		x    []float64
		seg  []int
		s    int64
		v    float64
		z    float64
		p    float64
	}{
		// Hand-computed: VarS = n(n−1)(2n+5)/18 = 5·4·15/18; Z = (S−1)/√VarS.
		{"rising", []float64{1, 2, 3, 4, 5}, nil, 10, 300.0 / 18, 9 / math.Sqrt(300.0/18), 0.013746},
		{"falling", []float64{5, 4, 3, 2, 1}, nil, -10, 300.0 / 18, -9 / math.Sqrt(300.0/18), 0.986254},
		// Two tie groups of two: VarS = (300 − 2·2·1·9)/18.
		{"ties", []float64{1, 1, 2, 2, 3}, nil, 8, 264.0 / 18, 7 / math.Sqrt(264.0/18), 0.033789},
		{"all equal", []float64{7, 7, 7, 7}, nil, 0, 0, 0, 0.5},
		{"one point", []float64{7}, nil, 0, 0, 0, 0.5},
		{"empty", nil, nil, 0, 0, 0, 0.5},
		// Blocked: only pairs inside a segment count; the level shift adds nothing.
		{"segments", []float64{1, 2, 10, 11}, []int{0, 0, 1, 1}, 2, 2, 1 / math.Sqrt(2), 0.239750},
		{"shift only", []float64{1, 1, 10, 10}, []int{0, 0, 1, 1}, 0, 0, 0, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mkTest(tc.x, tc.seg, make([]float64, len(tc.x)))
			if r.S != tc.s || !near(r.VarS, tc.v, 1e-9) || !near(r.Z, tc.z, 1e-9) || !near(r.P, tc.p, 1e-5) {
				t.Errorf("mkTest(%v) = %+v, want S=%d VarS=%v Z=%v P=%v", tc.x, r, tc.s, tc.v, tc.z, tc.p)
			}
		})
	}
}

func TestTheilSen(t *testing.T) {
	tests := []struct {
		name string
		t, x []float64
		seg  []int
		want float64
	}{
		{"line", []float64{0, 1, 2, 3}, []float64{0, 2, 4, 6}, nil, 2},
		// Pair slopes 2, 50, 2, 98, 2, −94: the outlier moves only the tails.
		{"outlier", []float64{0, 1, 2, 3}, []float64{0, 2, 100, 6}, nil, 2},
		{"irregular times", []float64{0, 0.5, 3, 10}, []float64{1, 2, 7, 21}, nil, 2},
		{"flat", []float64{0, 1, 2}, []float64{5, 5, 5}, nil, 0},
		{"equal times", []float64{1, 1, 1}, []float64{1, 5, 9}, nil, 0},
		{"one point", []float64{1}, []float64{1}, nil, 0},
		// Two flat segments at different levels: the jump is not a slope.
		{"segments", []float64{0, 1, 2, 3}, []float64{5, 5, 9, 9}, []int{0, 0, 1, 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := theilSen(tc.t, tc.x, tc.seg, nil)
			if !near(got, tc.want, 1e-12) {
				t.Errorf("theilSen = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMedianMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := 1 + r.IntN(60)
		v := make([]float64, n)
		for i := range v {
			switch trial % 3 {
			case 0:
				v[i] = r.NormFloat64()
			case 1:
				v[i] = float64(r.IntN(4)) // many ties
			default:
				v[i] = float64(i) // sorted
			}
		}
		s := slices.Clone(v)
		slices.Sort(s)
		want := s[n/2]
		if n%2 == 0 {
			want = (s[n/2-1] + s[n/2]) / 2
		}
		if got := median(v); !near(got, want, 1e-12) {
			t.Fatalf("median(%v) = %v, want %v", s, got, want)
		}
	}
}

func TestNoiseScale(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float64, 5000)
	for i := range x {
		x[i] = 1e9 + 0.5*float64(i) + 8*r.NormFloat64() // a gentle trend plus σ=8 noise
	}
	// A few big outliers and a step must not move the estimate much.
	for i := 100; i < len(x); i += 97 {
		x[i] += 5000
	}
	for i := 2500; i < len(x); i++ {
		x[i] += 1e7
	}
	if got := noiseScale(x, make([]float64, len(x))); got < 6 || got > 10 {
		t.Errorf("noiseScale = %v, want about 8", got)
	}
	// A trend much steeper than the noise hides it: documented, and the
	// callers' thresholds have floors.
	steep := make([]float64, 100)
	for i := range steep {
		steep[i] = 1e6*float64(i) + 8*r.NormFloat64()
	}
	if got := noiseScale(steep, make([]float64, len(steep))); got > 8 {
		t.Errorf("noiseScale on a steep trend = %v, want at most the true σ", got)
	}
	if got := noiseScale([]float64{1, 2}, make([]float64, 2)); got != 0 {
		t.Errorf("noiseScale of two points = %v, want 0", got)
	}
}

func TestDespike(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want []float64
	}{
		{"lone spike", []float64{0, 0, 100, 0, 0}, []float64{0, 0, 0, 0, 0}},
		{"run of two", []float64{0, 0, 100, 90, 0, 0}, []float64{0, 0, 0, 0, 0, 0}},
		{"run of three stays", []float64{0, 0, 100, 100, 100, 0, 0}, []float64{0, 0, 100, 100, 100, 0, 0}},
		{"step stays", []float64{0, 0, 0, 100, 100, 100}, []float64{0, 0, 0, 100, 100, 100}},
		{"rise stays", []float64{0, 50, 100, 150, 200}, []float64{0, 50, 100, 150, 200}},
		{"dip stays", []float64{100, 100, 0, 100, 100}, []float64{100, 100, 0, 100, 100}},
		{"small bump stays", []float64{0, 0, 5, 0, 0}, []float64{0, 0, 5, 0, 0}},
		{"newest stays", []float64{0, 0, 0, 100}, []float64{0, 0, 0, 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := despike(make([]float64, len(tc.in)), tc.in, 10, spikeRun); !slices.Equal(got, tc.want) {
				t.Errorf("despike(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*max(1, math.Abs(b)) }

func TestPairFloors(t *testing.T) {
	tests := []struct {
		name    string
		f, want []float64
		thr     float64
		wantT   []float64
	}{
		{"a miss borrows the next floor", []float64{10, 90, 10, 10}, []float64{10, 10, 10, 10}, 5, []float64{0, 2, 2, 3}},
		{"two misses in a row keep the first", []float64{10, 90, 80, 10}, []float64{10, 80, 10, 10}, 5, []float64{0, 2, 3, 3}},
		{"noise within thr is left", []float64{10, 13, 11, 12}, []float64{10, 13, 11, 12}, 5, []float64{0, 1, 2, 3}},
		{"a rise is left", []float64{10, 20, 30, 40}, []float64{10, 20, 30, 40}, 0, []float64{0, 1, 2, 3}},
		{"the newest window keeps its floor", []float64{10, 10, 90}, []float64{10, 10, 90}, 5, []float64{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tt := []float64{0, 1, 2, 3}[:len(tc.f)]
			f := append([]float64(nil), tc.f...)
			pairFloors(tt, f, tc.thr)
			if !slices.Equal(f, tc.want) || !slices.Equal(tt, tc.wantT) {
				t.Errorf("pairFloors(%v) = %v at %v, want %v at %v", tc.f, f, tt, tc.want, tc.wantT)
			}
		})
	}
}

// randomSegmented is a series of n points in a few segments, with many
// ties (flat segments among them) when ties is set.
func randomSegmented(r *rand.Rand, n int, ties bool) (t, x []float64, seg []int) {
	t, x, seg = make([]float64, n), make([]float64, n), make([]int, n)
	id, level := 0, 0.0
	for i := range x {
		if i > 0 && r.IntN(8) == 0 {
			id++
			level = float64(r.IntN(5))
		}
		seg[i] = id
		t[i] = float64(i) + float64(r.IntN(3))/4 // some equal times
		switch {
		case ties && id%2 == 0:
			x[i] = level // a flat segment
		case ties:
			x[i] = level + float64(r.IntN(3))
		default:
			x[i] = level + r.NormFloat64()
		}
	}
	return t, x, seg
}

// The nested horizons' S from shared rows is mkTest's S (the pair loop)
// on each suffix, whatever order the suffixes are asked in, with ties and
// at the detector's largest sizes.
func TestKendallRowsMatchMkTest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 500 {
		n := 1 + r.IntN(70)
		if trial%10 == 0 {
			n = 200 + r.IntN(120)
		}
		_, x, seg := randomSegmented(r, n, trial%2 == 0)
		if trial%5 == 0 {
			seg = nil
		}
		if trial%3 == 1 { // ties: few distinct values
			for i := range x {
				x[i] = math.Round(x[i] / 2)
			}
		}
		rows := newKendallRows(x, seg)
		for _, lo := range []int{n - 1, n - min(n, 12), n / 2, 0, n / 3, n - 1} {
			var sh []int
			if seg != nil {
				sh = seg[lo:]
			}
			want := mkTest(x[lo:], sh, make([]float64, n)).S
			if got := rows.suffixS(lo); got != want {
				t.Fatalf("trial %d: S of x[%d:] = %d, want %d (x %v, seg %v)", trial, lo, got, want, x, seg)
			}
		}
	}
}

// theilSen's shortcut for flat segments gives the median of the pairs,
// and so does its general path on the series that take it.
func TestTheilSenMatchesPairs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 1000 {
		n := 1 + r.IntN(40)
		if trial%4 == 1 { // large enough to be bracketed
			n = bracketMin + r.IntN(260)
		}
		tt, x, seg := randomSegmented(r, n, trial%2 == 0)
		switch trial % 3 {
		case 0: // every segment flat
			for i := range x {
				x[i] = float64(seg[i] % 3)
			}
		case 2: // many equal slopes, and windows at one time (dt = 0)
			for i := range x {
				x[i] = math.Round(x[i])
				if i > 0 && r.IntN(10) == 0 {
					tt[i] = tt[i-1]
				}
			}
		}
		want := pairsMedian(tt, x, seg)
		if got, _ := theilSen(tt, x, seg, nil); got != want {
			t.Fatalf("trial %d: theilSen = %v, want %v (t %v, x %v, seg %v)", trial, got, want, tt, x, seg)
		}
	}
}

// pairsMedian is the Theil–Sen slope by its definition: every pair's
// slope, sorted.
func pairsMedian(tt, x []float64, seg []int) float64 {
	var pairs []float64
	for i := range x {
		for j := i + 1; j < len(x); j++ {
			if (seg == nil || seg[j] == seg[i]) && tt[j] > tt[i] {
				pairs = append(pairs, (x[j]-x[i])/(tt[j]-tt[i]))
			}
		}
	}
	if len(pairs) == 0 {
		return 0
	}
	slices.Sort(pairs)
	m := pairs[len(pairs)/2]
	if len(pairs)%2 == 0 {
		lo := pairs[len(pairs)/2-1]
		m = lo + (m-lo)/2
	}
	return m
}

// The bracketed median is the median of every pair, where it answers, on
// the long segments it is meant for: trends under noise, steps, ties and
// plateaus; and it answers for nearly all of them.
func TestTheilSenBracketed(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	answered := 0
	const trials = 400
	for trial := range trials {
		n := bracketMin + r.IntN(260)
		tt, x := make([]float64, n), make([]float64, n)
		var seg []int
		if trial%2 == 1 { // two or three long segments
			seg = make([]int, n)
			for i := range seg {
				seg[i] = 3 * i / n
				if trial%4 == 1 {
					seg[i] = 2 * i / n
				}
			}
		}
		slope := float64(r.IntN(5)-2) * 1e6
		for i := range x {
			tt[i] = 5 * float64(i)
			switch trial % 3 {
			case 0: // a trend under noise
				x[i] = 20e9 + slope*tt[i] + 4e6*r.NormFloat64()
			case 1: // plateaus: many equal slopes
				x[i] = 20e9 + float64(r.IntN(4))*(1<<20)
			case 2: // a trend in whole MiB, with equal times
				x[i] = math.Round((20e9+slope*tt[i])/(1<<20)) * (1 << 20)
				if i > 0 && r.IntN(8) == 0 {
					tt[i] = tt[i-1]
				}
			}
		}
		want := pairsMedian(tt, x, seg)
		got, _, ok := theilSenBracketed(tt, x, seg, nil)
		if !ok {
			continue
		}
		answered++
		if got != want {
			t.Fatalf("trial %d: bracketed median %v, want %v", trial, got, want)
		}
	}
	if answered < trials*9/10 {
		t.Fatalf("the bracket answered %d of %d series; want at least 90 %%", answered, trials)
	}
}
