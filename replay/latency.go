package replay

import (
	"math/bits"
	"slices"
	"time"
)

// Latency summarises the host time of the timed operations of a pass, in
// nanoseconds, after the timer's own cost was subtracted.
type Latency struct {
	Samples int64
	P50     int64
	P99     int64
	Max     int64
	// TimerOverhead is the median cost of an empty time.Now/time.Since
	// pair on this machine, subtracted from every sample.
	TimerOverhead int64
}

// The histogram is exact below linearLimit ns; above, each power of two is
// cut into subBuckets buckets, so a value is off by less than 1/subBuckets.
const (
	linearBits  = 10
	linearLimit = 1 << linearBits // 1024 ns
	subBits     = 6
	subBuckets  = 1 << subBits
	numBuckets  = linearLimit + (64-linearBits)*subBuckets
)

// histogram counts nanosecond values in fixed memory (about 30 KiB).
type histogram struct {
	counts [numBuckets]int64
	n      int64
	max    int64
}

func bucketOf(v int64) int {
	if v < linearLimit {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // v is in [2^e, 2^(e+1))
	sub := int(uint64(v)>>(e-subBits)) & (subBuckets - 1)
	return linearLimit + (e-linearBits)*subBuckets + sub
}

// lowerBound is the smallest value of bucket i.
func lowerBound(i int) int64 {
	if i < linearLimit {
		return int64(i)
	}
	i -= linearLimit
	e := i/subBuckets + linearBits
	sub := i % subBuckets
	return int64(1)<<e | int64(sub)<<(e-subBits)
}

func (h *histogram) add(v int64) {
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.n++
	if v > h.max {
		h.max = v
	}
}

// quantile returns the lower bound of the bucket that holds the value of
// rank ceil(q·n) (1-based), or 0 for an empty histogram.
func (h *histogram) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return lowerBound(i)
		}
	}
	return h.max
}

func (h *histogram) latency(overhead int64) *Latency {
	return &Latency{Samples: h.n, P50: h.quantile(0.50), P99: h.quantile(0.99), Max: h.max, TimerOverhead: overhead}
}

// calibrateTimer returns the median duration, in ns, of an empty
// time.Now/time.Since pair: what timing one operation adds to its figure.
func calibrateTimer() int64 {
	const rounds = 4001
	d := make([]int64, rounds)
	for i := range d {
		t0 := time.Now()
		d[i] = int64(time.Since(t0))
	}
	slices.Sort(d)
	return d[rounds/2]
}
