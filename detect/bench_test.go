package detect_test

import (
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
)

// fullDetector returns a detector that has seen enough samples to hold
// MaxWindows windows (the worst case for Verdict).
func fullDetector(b *testing.B) (*detect.Detector, time.Time) {
	d, err := detect.New(detect.Config{})
	if err != nil {
		b.Fatal(err)
	}
	at := t0
	for i := range 4 * 3600 * 10 { // four hours at 100 ms
		at = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		d.Add(at, uint64(20<<30+(i%13)<<20))
	}
	return d, at
}

// BenchmarkAdd is the per-sample cost on a full detector (windows close and
// the oldest half is compacted once every 50 samples here).
func BenchmarkAdd(b *testing.B) {
	d, at := fullDetector(b)
	b.ResetTimer()
	for i := range b.N {
		at = at.Add(100 * time.Millisecond)
		d.Add(at, uint64(20<<30+(i%13)<<20))
	}
}

// aged returns a detector of maxWindows windows (0: the default, 256)
// that has seen four hours at 100 ms: a floor that does not move
// (fullDetector's sawtooth touches 20 GiB in every window), or with moving,
// a floor that wanders by a few MiB from window to window (a serving
// process whose cache breathes; the simulated host's training processes).
func aged(b *testing.B, maxWindows int, moving bool) *detect.Detector {
	cfg := detect.DefaultConfig()
	if maxWindows > 0 {
		cfg.MaxWindows = maxWindows
	}
	d, err := detect.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 4 * 3600 * 10 {
		v := uint64(20<<30 + (i%13)<<20)
		if moving {
			v += uint64((i/50)%7) << 20
		}
		d.Add(t0.Add(time.Duration(i)*100*time.Millisecond), v)
	}
	return d
}

func benchVerdict(b *testing.B, d *detect.Detector) {
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_ = d.Verdict()
	}
}

// BenchmarkVerdict is one verdict over MaxWindows (256) windows of a floor
// that does not move, the common case on a node: the flat shortcut.
func BenchmarkVerdict(b *testing.B) { benchVerdict(b, aged(b, 0, false)) }

// BenchmarkVerdictMovingFloor is one verdict over 256 windows of a moving
// floor: the general path.
func BenchmarkVerdictMovingFloor(b *testing.B) { benchVerdict(b, aged(b, 0, true)) }

// BenchmarkVerdictDaemon and BenchmarkVerdictDaemonMovingFloor are the same
// at the daemon's 64 windows (serve.DetectorConfig).
func BenchmarkVerdictDaemon(b *testing.B)            { benchVerdict(b, aged(b, 64, false)) }
func BenchmarkVerdictDaemonMovingFloor(b *testing.B) { benchVerdict(b, aged(b, 64, true)) }

// BenchmarkAddVerdict is what a monitor pays per second when it samples at
// 100 ms and asks for a verdict every second: ten Adds and one Verdict.
func BenchmarkAddVerdict(b *testing.B) {
	d, at := fullDetector(b)
	b.ResetTimer()
	for i := range b.N {
		for j := range 10 {
			at = at.Add(100 * time.Millisecond)
			d.Add(at, uint64(20<<30+((i+j)%13)<<20))
		}
		_ = d.Verdict()
	}
}
