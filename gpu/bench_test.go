package gpu

import (
	"testing"
	"time"
)

// BenchmarkSample is one full sample on the go-nvml mock (8 GPUs, 6
// processes on GPU 0) with /proc enrichment from testdata/proc through the
// cache: the cost of this package's own work, not of the driver.
func BenchmarkSample(b *testing.B) {
	s := mockSampler(b)
	now := fixtureBoot.Add(24 * time.Hour)
	s.opts.Now = func() time.Time { now = now.Add(10 * time.Millisecond); return now }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSampleMemoryOnly is the fast path on the mock: one memory query
// per GPU.
func BenchmarkSampleMemoryOnly(b *testing.B) {
	s := mockSampler(b)
	var dst []MemorySample
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = s.SampleMemory(dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProcStatUncached reads one fixture process's stat and details,
// what a sample would cost per process without the cache.
func BenchmarkProcStatUncached(b *testing.B) {
	p := fixtureProcs(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Stat(1000); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Details(1000); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSampleSim1600 is a full sample of a simulated host of 8 GPUs with
// 200 processes each (the daemon's load figure): the simulated driver and
// /proc cost little, so this is mostly the sampler's own work.
func BenchmarkSampleSim1600(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { now = now.Add(100 * time.Millisecond); return now }
	sim, err := NewSimProcs(8, 200, 1, clock)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}
