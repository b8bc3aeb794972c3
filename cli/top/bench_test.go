package top

import (
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
)

// BenchmarkRender renders the main screen of an 8-GPU simulated host (28
// processes) with a full history of maxWindowSamples samples: the cost paid
// on every sample at the shortest intervals.
func BenchmarkRender(b *testing.B) {
	r := newSimRig(&testing.T{}, 8, Config{Interval: 10 * time.Millisecond, Window: maxWindowSamples})
	r.send(tea.WindowSizeMsg{Width: 160, Height: 60})
	r.samples(maxWindowSamples)
	b.ResetTimer()
	for b.Loop() {
		_ = r.m.render()
	}
}

// BenchmarkSample is the cost of one sample message in Update (history
// bookkeeping and re-anchoring the selection), without the sampling itself.
func BenchmarkSample(b *testing.B) {
	r := newSimRig(&testing.T{}, 8, Config{Interval: 10 * time.Millisecond, Window: maxWindowSamples})
	r.samples(maxWindowSamples)
	r.now = r.now.Add(time.Second)
	snap, err := r.sampler.Sample()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		r.send(sampleMsg{snap: snap})
	}
}
