package serve

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestLoadHistoryTicksWithJitter: samples taken by a ticker arrive about
// Interval apart, a little early or late. Before the history comparison
// allowed half a sample interval, a sample a millisecond early waited for
// the next one: with history_interval equal to interval about half the
// samples got a tick (the real binary wrote 6.3 ticks a second at 100 ms
// and 0.95 at 1 s). Nothing was lost, but ticks were further apart than
// configured.
func TestLoadHistoryTicksWithJitter(t *testing.T) {
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
