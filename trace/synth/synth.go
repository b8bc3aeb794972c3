// Package synth generates synthetic allocation traces, in the record type of
// package trace/rmm, for tests, benchmarks and what-if replays of workloads
// that were not recorded:
//
//   - Random: RMM's random_allocations benchmark: uniform sizes, a cap on the
//     number and bytes of live allocations, a fixed allocate/free mix.
//   - BatchWalk: training steps whose activations grow with the batch size,
//     walking the batch N, N+1, ... the way one searches for the largest batch
//     that fits.
//   - KVCache: serving: sequences whose key/value caches grow block by block
//     as tokens are generated and are freed when the sequence ends.
//   - FromProfile: a size distribution, an allocation rate and a target live
//     count, in the manner of TCMalloc's empirical driver; ProfileOf derives
//     one from a recorded trace.
//
// Every generator is deterministic: the same configuration (seed included)
// gives the same trace, on every platform, because the random numbers come
// from math/rand/v2's PCG generator through this package's own integer
// mappings. Every trace frees everything it allocated before it ends, every
// free names a live allocation with its size, and times never decrease;
// Validate checks these properties and sums a trace up.
//
// ParseSpec reads the generators' specs as vram replay takes them
// ("random:seed=1,max=64MiB", SpecSyntax); its errors name the spec's keys.
//
// Pointers in generated traces are keys that pair a free with its
// allocation, not a model of any allocator's placement: each allocation gets
// a fresh address above 0x7f0000000000, never reused. Everything happens on
// thread 0 and stream 0 unless a configuration says otherwise.
package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/vramhq/vram/trace/rmm"
)

// base is the first synthetic pointer.
const base = 0x7f0000000000

// rng draws the random numbers of a generator. Its mappings from 64-bit
// outputs to ranges are fixed here, so traces do not change when a Go
// release changes how math/rand/v2 maps them.
type rng struct{ src *rand.PCG }

func newRNG(seed uint64) rng { return rng{rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)} }

// between returns a uniform integer in [lo, hi] (lo ≤ hi), without the bias
// of a plain modulo.
func (r rng) between(lo, hi uint64) uint64 {
	n := hi - lo + 1
	if n == 0 { // the whole uint64 range
		return r.src.Uint64()
	}
	limit := math.MaxUint64 - math.MaxUint64%n
	for {
		if v := r.src.Uint64(); v < limit {
			return lo + v%n
		}
	}
}

// float returns a uniform float64 in [0, 1).
func (r rng) float() float64 { return float64(r.src.Uint64()>>11) / (1 << 53) }

// builder accumulates a trace, tracks what is live and keeps time.
type builder struct {
	recs      []rmm.Record
	now       time.Duration
	step      time.Duration // added to now after each record
	next      uint64        // next synthetic pointer
	live      map[uint64]uint64
	liveBytes uint64
	stream    uint64
}

func newBuilder(step time.Duration, stream uint64) *builder {
	if step <= 0 {
		step = time.Microsecond
	}
	return &builder{step: step, next: base, live: make(map[uint64]uint64), stream: stream}
}

// alloc records an allocation of size bytes and returns its pointer.
func (b *builder) alloc(size uint64) uint64 {
	p := b.next
	b.next += (max(size, 1) + 511) &^ 511
	b.live[p] = size
	b.liveBytes += size
	b.emit(rmm.Allocate, p, size)
	return p
}

// free records the free of a live pointer.
func (b *builder) free(p uint64) {
	size, ok := b.live[p]
	if !ok {
		panic(fmt.Sprintf("synth: internal error: free of %#x, not live", p))
	}
	delete(b.live, p)
	b.liveBytes -= size
	b.emit(rmm.Free, p, size)
}

func (b *builder) emit(a rmm.Action, p, size uint64) {
	b.recs = append(b.recs, rmm.Record{Time: b.now, Action: a, Pointer: p, Size: size, Stream: b.stream})
	b.now += b.step
}

// Summary describes a trace.
type Summary struct {
	Allocations      int           // allocate records
	Failures         int           // allocate failure records
	Frees            int           // free records
	AllocatedBytes   uint64        // bytes of all allocations
	PeakLiveBytes    uint64        // most bytes live at once
	PeakLive         int           // most allocations live at once
	EndLiveBytes     uint64        // bytes still live at the end (a leak, or a trace cut short)
	EndLive          int           // allocations still live at the end
	Duration         time.Duration // time of the last record
	MinSize, MaxSize uint64        // of the allocations
}

// Validate checks that every free names a live allocation with the same size
// and that times never decrease, and sums the trace up. Allocations left
// live at the end are reported in the Summary, not as an error.
func Validate(recs []rmm.Record) (Summary, error) {
	var s Summary
	live := make(map[uint64]uint64)
	var liveBytes uint64
	var last time.Duration
	for i, r := range recs {
		if r.Time < last {
			return s, fmt.Errorf("record %d: time %v is before the previous record's %v", i, r.Time, last)
		}
		last = r.Time
		switch r.Action {
		case rmm.Allocate:
			if _, dup := live[r.Pointer]; dup {
				return s, fmt.Errorf("record %d: allocation at %#x, which is already live", i, r.Pointer)
			}
			live[r.Pointer] = r.Size
			liveBytes += r.Size
			s.Allocations++
			s.AllocatedBytes += r.Size
			if s.Allocations == 1 || r.Size < s.MinSize {
				s.MinSize = r.Size
			}
			s.MaxSize = max(s.MaxSize, r.Size)
			s.PeakLiveBytes = max(s.PeakLiveBytes, liveBytes)
			s.PeakLive = max(s.PeakLive, len(live))
		case rmm.Free:
			size, ok := live[r.Pointer]
			if !ok {
				return s, fmt.Errorf("record %d: free of %#x, which is not live", i, r.Pointer)
			}
			if size != r.Size {
				return s, fmt.Errorf("record %d: free of %#x with size %d, allocated with %d", i, r.Pointer, r.Size, size)
			}
			delete(live, r.Pointer)
			liveBytes -= size
			s.Frees++
		case rmm.AllocateFailure:
			s.Failures++
		default:
			return s, fmt.Errorf("record %d: unknown action %v", i, r.Action)
		}
	}
	s.EndLive, s.EndLiveBytes, s.Duration = len(live), liveBytes, last
	return s, nil
}
