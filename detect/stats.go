package detect

import (
	"math"
	"slices"
)

// This file holds the two rank statistics the detector is built on, for the
// small series it works with (at most Config.MaxWindows points). The pair
// loops (kendallS, theilSen's) are the definitions; the verdict counts the
// Mann–Kendall rows with a Fenwick tree (kendallRows) and brackets the
// Theil–Sen median (theilSenBracketed), each checked against them.

// mannKendall is the result of the Mann–Kendall trend test on one series.
type mannKendall struct {
	S    int64   // Σ_{i<j} sign(x_j − x_i)
	VarS float64 // variance of S under "no trend", corrected for ties
	Z    float64 // continuity-corrected normal score
	P    float64 // one-sided p-value for an upward trend, P(Z' ≥ Z)
}

// mkTest runs the Mann–Kendall test for an upward trend on x, taken in order.
// seg, when not nil, splits x into contiguous segments (seg[i] is the
// segment of x[i], equal ids are adjacent) and only pairs inside one segment
// are compared: the blocked form, whose S and VarS are the sums of the
// per-segment ones, so a level shift between segments adds nothing.
//
//	S    = Σ_{i<j} sign(x_j − x_i)
//	VarS = [n(n−1)(2n+5) − Σ_g t_g(t_g−1)(2t_g+5)] / 18   (t_g: size of tie group g)
//	Z    = (S−1)/√VarS if S > 0,  (S+1)/√VarS if S < 0,  0 otherwise
//	P    = 1 − Φ(Z)
//
// With VarS = 0 (every value equal, or too few points) Z is 0 and P is 0.5:
// the data say nothing either way. tmp is scratch space of at least len(x).
func mkTest(x []float64, seg []int, tmp []float64) mannKendall {
	var s int64
	for lo := 0; lo < len(x); {
		hi := segEnd(seg, lo, len(x))
		s += kendallS(x[lo:hi])
		lo = hi
	}
	return mkTestS(s, x, seg, tmp)
}

// mkTestS is mkTest with S given: the caller has summed it already (the
// verdict's nested horizons share their pairs, kendallRows).
func mkTestS(s int64, x []float64, seg []int, tmp []float64) mannKendall {
	var v float64
	for lo := 0; lo < len(x); {
		hi := segEnd(seg, lo, len(x))
		v += kendallVar(x[lo:hi], tmp)
		lo = hi
	}
	r := mannKendall{S: s, VarS: v, P: 0.5}
	if v <= 0 {
		return r
	}
	switch {
	case s > 0:
		r.Z = float64(s-1) / math.Sqrt(v)
	case s < 0:
		r.Z = float64(s+1) / math.Sqrt(v)
	}
	r.P = 0.5 * math.Erfc(r.Z/math.Sqrt2)
	return r
}

// segEnd returns the end of the segment that starts at lo.
func segEnd(seg []int, lo, n int) int {
	if seg == nil {
		return n
	}
	hi := lo + 1
	for hi < n && seg[hi] == seg[lo] {
		hi++
	}
	return hi
}

func kendallS(x []float64) int64 {
	var s int64
	for i, xi := range x {
		s += kendallRow(xi, x[i+1:])
	}
	return s
}

// kendallRow is Σ_j sign(x_j − xi) over x. The two comparisons are
// counted rather than branched on: on a noisy series the branch is a coin
// toss the processor mispredicts, and this loop is most of a verdict's
// rank statistics.
func kendallRow(xi float64, x []float64) int64 {
	var up, down int64
	for _, xj := range x {
		up += b2i(xj > xi)
		down += b2i(xj < xi)
	}
	return up - down
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// kendallRows holds, for a series split into segments, each point's row of
// the Mann–Kendall sum (the signs of the later points of its segment
// against it), computed from the newest point backwards as far as asked.
// The S of a suffix of the series is the sum of its rows, so nested
// horizons that end at the newest point share their pairs: testing
// horizons of 12, 24, 48 and 64 windows counts the pairs of 64 once.
//
// A row is counted, not compared pair by pair: the later points of the
// segment are kept in a Fenwick tree over the ranks of the values, so a
// row is the number of them above x[i] less the number below, two prefix
// sums of O(log n). The whole series costs O(n log n) where the pair loop
// (kendallS) cost n²/2 comparisons: at 256 windows, the full detector of
// a long-running daemon, that loop was most of a verdict.
type kendallRows struct {
	x    []float64
	seg  []int
	from int   // rows are known for x[from:]
	sum  int64 // their sum: the S of x[from:]
	// rank[i] is x[i]'s place among the distinct values of x, from 1;
	// tree is the Fenwick tree of the ranks of x[from:end], where end is
	// the end of x[from]'s segment, and in their number.
	rank []int32
	tree []int32
	in   int32
}

func newKendallRows(x []float64, seg []int) kendallRows {
	k := kendallRows{x: x, seg: seg, from: len(x), rank: make([]int32, len(x))}
	if len(x) == 0 {
		return k
	}
	vals := slices.Clone(x)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	for i, v := range x {
		r, _ := slices.BinarySearch(vals, v)
		k.rank[i] = int32(r + 1)
	}
	k.tree = make([]int32, len(vals)+1)
	return k
}

// count returns how many points of the tree rank at most r.
func (k *kendallRows) count(r int32) int32 {
	var n int32
	for ; r > 0; r -= r & -r {
		n += k.tree[r]
	}
	return n
}

// insert adds a point of rank r to the tree.
func (k *kendallRows) insert(r int32) {
	for ; int(r) < len(k.tree); r += r & -r {
		k.tree[r]++
	}
	k.in++
}

// suffixS returns the S of x[lo:] with seg[lo:] (mkTest's S on them).
// Asked for ever longer suffixes, as the horizons are, it counts each row
// once.
func (k *kendallRows) suffixS(lo int) int64 {
	if lo > k.from { // a shorter suffix than the last: start again
		*k = newKendallRows(k.x, k.seg)
	}
	for k.from > lo {
		k.from--
		i := k.from
		if k.seg != nil && i+1 < len(k.x) && k.seg[i] != k.seg[i+1] {
			clear(k.tree) // x[i] ends its segment: no later point pairs with it
			k.in = 0
		}
		r := k.rank[i]
		below, atMost := k.count(r-1), k.count(r)
		k.sum += int64(k.in-atMost) - int64(below)
		k.insert(r)
	}
	return k.sum
}

// kendallVar is the variance of S under "no trend" for one segment, with the
// tie correction.
func kendallVar(x []float64, tmp []float64) float64 {
	n := len(x)
	nf := float64(n)
	v := nf * (nf - 1) * (2*nf + 5)
	sorted := append(tmp[:0], x...)
	slices.Sort(sorted)
	for i := 0; i < n; {
		j := i + 1
		for j < n && sorted[j] == sorted[i] {
			j++
		}
		if g := float64(j - i); g > 1 {
			v -= g * (g - 1) * (2*g + 5)
		}
		i = j
	}
	return v / 18
}

// theilSen returns the Theil–Sen slope of x against t: the median of the
// pairwise slopes (x_j − x_i)/(t_j − t_i) over all pairs with t_j > t_i
// (inside one segment when seg is not nil, as for mkTest). It tolerates up
// to ~29% outliers and needs no distribution assumption. buf is scratch
// space, grown as needed and returned for reuse. With no usable pair the
// slope is 0.
func theilSen(t, x []float64, seg []int, buf []float64) (slope float64, out []float64) {
	buf = buf[:0]
	if flatSegments(x, seg) {
		return 0, buf // every pair's slope is 0: so is their median
	}
	if len(x) >= bracketMin {
		if slope, buf, ok := theilSenBracketed(t, x, seg, buf); ok {
			return slope, buf
		}
		buf = buf[:0]
	}
	for lo := 0; lo < len(x); {
		hi := segEnd(seg, lo, len(x))
		for i := lo; i < hi; i++ {
			for j := i + 1; j < hi; j++ {
				if dt := t[j] - t[i]; dt > 0 {
					buf = append(buf, (x[j]-x[i])/dt)
				}
			}
		}
		lo = hi
	}
	if len(buf) == 0 {
		return 0, buf
	}
	return median(buf), buf
}

// bracketMin is the least number of points for which theilSen brackets
// the median first; below it the pairs are few enough to keep them all.
const bracketMin = 48

// bracketSample is how many pairs theilSenBracketed draws, and
// bracketMargin how many ranks of them on either side of their median
// make the bracket. The sample's median stands within about √sample/2 ≈
// 11 ranks of the true median's place; 40 ranks leave the true median
// outside the bracket for about 1 series in 10⁴, where theilSen falls
// back to keeping every pair, and keep about 16 % of the pairs.
const (
	bracketSample = 512
	bracketMargin = 40
)

// theilSenBracketed is theilSen's median found without keeping every
// pairwise slope: it brackets the median with the slopes of a sample of
// pairs, then makes one pass over all pairs that counts the slopes below
// the bracket and at its lower end and keeps only those inside it, from
// which the median is selected. Every slope is computed as theilSen
// computes it and compared as it is, so the result is the same float64;
// only the work differs (one pass and a selection over a sixth of the
// pairs, where keeping them all costs a selection over every pair). ok is
// false when the median falls outside the bracket, or too few pairs were
// drawn, and the caller keeps every pair instead.
func theilSenBracketed(t, x []float64, seg []int, buf []float64) (slope float64, out []float64, ok bool) {
	n := len(x)
	var smp [bracketSample]float64
	m := 0
	rng := uint64(n)*0x9e3779b97f4a7c15 | 1 // deterministic: the result does not depend on it
	for try := 0; try < 4*bracketSample && m < bracketSample; try++ {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		i, j := int(rng%uint64(n)), int((rng>>32)%uint64(n))
		if i > j {
			i, j = j, i
		}
		if i == j || seg != nil && seg[i] != seg[j] {
			continue
		}
		if dt := t[j] - t[i]; dt > 0 {
			smp[m] = (x[j] - x[i]) / dt
			m++
		}
	}
	if m < bracketSample/2 {
		return 0, buf, false
	}
	sample := smp[:m]
	ia, ib := max(0, m/2-bracketMargin), min(m-1, m/2+bracketMargin)
	a := selectK(sample, ia)
	b := selectK(sample[ia:], ib-ia) // sample[ia:] holds the values ≥ a

	// Slopes < a are counted in below, slopes = a in atA, and those in
	// (a, b] kept in buf: ranks [0, below), [below, below+atA) and then
	// buf's.
	var total, below, atA int
	for lo := 0; lo < n; {
		hi := segEnd(seg, lo, n)
		for i := lo; i < hi; i++ {
			for j := i + 1; j < hi; j++ {
				dt := t[j] - t[i]
				if !(dt > 0) {
					continue
				}
				total++
				switch s := (x[j] - x[i]) / dt; {
				case s < a:
					below++
				case s == a:
					atA++
				case s <= b:
					buf = append(buf, s)
				}
			}
		}
		lo = hi
	}
	if total == 0 {
		return 0, buf, true
	}
	// The median's rank k (the upper middle when total is even) and, in
	// buf's terms, kb.
	k := total / 2
	kb := k - below - atA
	var hi float64
	switch {
	case k < below || kb >= len(buf):
		return 0, buf, false
	case kb < 0:
		hi = a
	default:
		hi = selectK(buf, kb)
	}
	if total%2 == 1 {
		return hi, buf, true
	}
	// The lower middle, rank k-1: below the bracket, a, or the largest
	// of buf[:kb], which selectK left below buf[kb].
	var lo float64
	switch {
	case k-1 < below:
		return 0, buf, false
	case kb-1 < 0:
		lo = a
	default:
		lo = buf[0]
		for _, s := range buf[1:kb] {
			if s > lo {
				lo = s
			}
		}
	}
	return lo + (hi-lo)/2, buf, true
}

// flatSegments reports whether x is constant inside each segment (seg as
// for mkTest): a process whose memory does not move, the common case on a
// node, whose pairwise slopes are all 0.
func flatSegments(x []float64, seg []int) bool {
	for i := 1; i < len(x); i++ {
		if x[i] != x[i-1] && (seg == nil || seg[i] == seg[i-1]) {
			return false
		}
	}
	return true
}

// median returns the median of v, reordering v in place (quickselect).
// It returns 0 for an empty slice.
func median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return 0
	}
	hi := selectK(v, n/2)
	if n%2 == 1 {
		return hi
	}
	// The lower middle is the largest value left of position n/2.
	lo := v[0]
	for _, x := range v[1 : n/2] {
		lo = max(lo, x)
	}
	return lo + (hi-lo)/2
}

// selectK reorders v so that v[k] holds the value it would hold if v were
// sorted, everything before it is ≤ v[k] and everything after is ≥ v[k].
func selectK(v []float64, k int) float64 {
	lo, hi := 0, len(v)-1
	for lo < hi {
		// Median-of-three pivot keeps sorted and reversed inputs linear.
		mid := lo + (hi-lo)/2
		if v[mid] < v[lo] {
			v[mid], v[lo] = v[lo], v[mid]
		}
		if v[hi] < v[lo] {
			v[hi], v[lo] = v[lo], v[hi]
		}
		if v[hi] < v[mid] {
			v[hi], v[mid] = v[mid], v[hi]
		}
		pivot := v[mid]
		i, j := lo, hi
		for i <= j {
			for v[i] < pivot {
				i++
			}
			for v[j] > pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return v[k]
		}
	}
	return v[k]
}

// robustScale returns the median of v and 1.4826 × its median absolute
// deviation (a standard-deviation estimate that ignores outliers). v is
// reordered; tmp is scratch of at least len(v).
func robustScale(v, tmp []float64) (med, scale float64) {
	med = median(v)
	dev := tmp[:len(v)]
	for i, x := range v {
		dev[i] = math.Abs(x - med)
	}
	return med, 1.4826 * median(dev)
}

// noiseScale estimates the standard deviation of the noise around a slowly
// moving level in x: the median absolute residual against the running median
// of three, times 3.16 (the factor that makes it σ for independent Gaussian
// noise; calibrated by simulation). Isolated outliers, steps and trends
// barely move it, unlike the MAD of first differences, which every outlier
// enters twice. A trend much steeper than the noise makes the series
// monotone and hides the noise (the estimate falls towards 0); callers put a
// floor under every threshold derived from it. tmp is scratch of at least
// len(x). Fewer than three points give 0.
func noiseScale(x, tmp []float64) float64 {
	if len(x) < 3 {
		return 0
	}
	res := tmp[:0]
	for i := 1; i+1 < len(x); i++ {
		a, b, c := x[i-1], x[i], x[i+1]
		m := max(min(a, b), min(max(a, b), c)) // median of three
		res = append(res, math.Abs(b-m))
	}
	return 3.16 * median(res)
}
