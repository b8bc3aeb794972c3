package replay

import (
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/trace/synth"
)

// BenchmarkReplay measures replay throughput: one iteration is one pass of
// a generated trace (from its Compact copy, on a fresh simulated device)
// and ns/record is the cost per record, parsing excluded. The timed variant
// adds two clock reads per operation.
func BenchmarkReplay(b *testing.B) {
	recs, err := synth.Random(synth.RandomConfig{Seed: 1, Allocations: 20000, MaxSize: 8 << 20, MaxLive: 500})
	if err != nil {
		b.Fatal(err)
	}
	var c Compact
	for _, r := range recs {
		c.Add(r)
	}
	dev := SimDevice(141 << 30)
	for _, timed := range []bool{false, true} {
		name := "untimed"
		if timed {
			name = "timed"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, err := dev()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Replay(c.Source(), d, alloc.Config{}, Options{Time: timed}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.Len()), "ns/record")
		})
	}
}
