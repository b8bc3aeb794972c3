package main

import (
	"slices"
	"time"
)

// quantile returns the q-quantile (0 ≤ q ≤ 1) of xs by the nearest-rank
// method: the smallest value with at least q of the values at or below
// it. xs is not modified; 0 for no values.
func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999999)
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// quantileF is quantile for float64 values.
func quantileF(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(q*float64(len(s)) + 0.999999999)
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// maxGap returns the longest step between consecutive times (Unix ms),
// and how many steps are longer than limit.
func maxGap(ts []int64, limit time.Duration) (time.Duration, int) {
	var worst time.Duration
	n := 0
	for i := 1; i < len(ts); i++ {
		g := time.Duration(ts[i]-ts[i-1]) * time.Millisecond
		worst = max(worst, g)
		if g > limit {
			n++
		}
	}
	return worst, n
}
