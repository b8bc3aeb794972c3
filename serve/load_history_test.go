package serve

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// TestLoadHistoryTicksWithJitter: samples taken by a ticker arrive about
// Interval apart, a little early or late. A tick is written when a sample
// is HistoryInterval or more after the previous tick, so a sample a
// millisecond early waits for the next one: with history_interval equal to
// interval (which the command also settles to when history_interval is
// shorter, logging "history is written at every sample") about half the
// samples get a tick, and the real binary wrote 6.3 ticks a second at
// 100 ms and 0.95 at 1 s (docs/serve.md, "Load and faults"). Nothing is
// lost (the skipped sample's peaks go into the next tick), but ticks are
// further apart than configured. A fix: compare against HistoryInterval
// less half the sample interval, or stamp intervals on a grid of
// HistoryInterval. Known to fail; run it with VRAM_LOAD_KNOWN_BUGS=1.
func TestLoadHistoryTicksWithJitter(t *testing.T) {
	if os.Getenv("VRAM_LOAD_KNOWN_BUGS") == "" {
		t.Skip("known to fail: set VRAM_LOAD_KNOWN_BUGS=1")
	}
	tests := []struct {
		name        string
		history     time.Duration
		samples     int
		wantAtLeast int64
	}{
		{"history every sample", 100 * time.Millisecond, 200, 190},
		{"history every 10 samples", time.Second, 400, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Interval, cfg.HistoryInterval = 100*time.Millisecond, tt.history
			d, clk := loadDaemon(t, 1, 5, cfg)
			// A ticker's schedule, each sample stamped 0-5 ms after its
			// slot (the time a sample takes to read the GPUs varies).
			rng := rand.New(rand.NewPCG(1, 2))
			start, at := clk.Now(), clk.Now()
			for i := range tt.samples {
				next := start.Add(time.Duration(i+1)*cfg.Interval + time.Duration(rng.Int64N(int64(5*time.Millisecond))))
				clk.Advance(next.Sub(at))
				at = next
				d.tick()
			}
			(&testEnv{d: d, clk: clk}).flush(t)
			if got := d.w.ticks.Load(); got < tt.wantAtLeast {
				t.Errorf("%d samples over %v wrote %d history ticks, want at least %d (one per %v)", tt.samples, time.Duration(tt.samples)*cfg.Interval, got, tt.wantAtLeast, tt.history)
			}
		})
	}
}
