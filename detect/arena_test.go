package detect

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestArenaMatchesFresh checks that the series a verdict takes from its
// arena give the verdict that freshly made ones give: leaks, steps,
// sawtooths and warm-ups, each judged many times as it grows, so that the
// arena is reused across verdicts and detectors and its buffers grow on
// the way. An arena slice that overlapped another, or kept a value from an
// earlier verdict, would change a verdict.
func TestArenaMatchesFresh(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	shapes := []func(sec float64) float64{
		func(sec float64) float64 { return 4<<30 + 2<<20*sec },                       // a leak
		func(sec float64) float64 { return 4<<30 + float64(int(sec/90))*(64<<20) },   // a ratchet
		func(sec float64) float64 { return 8<<30 + 3<<30*math.Abs(math.Sin(sec/7)) }, // a sawtooth-like load
		func(sec float64) float64 { return 2<<30 + 6<<30*(1-math.Exp(-sec/60)) },     // a warm-up
		func(sec float64) float64 { return 6<<30 + float64(r.IntN(64))*(1<<20) },     // noise
	}
	judged := 0
	for trial := range 40 {
		cfg := Config{}
		if trial%3 == 1 {
			cfg = Config{Window: 2 * time.Second, MaxWindows: 64}
		}
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		shape := shapes[trial%len(shapes)]
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		step := time.Duration(200+r.IntN(1800)) * time.Millisecond
		for i := range 3000 {
			sec := float64(i) * step.Seconds()
			d.Add(at, uint64(max(0, shape(sec)+float64(r.IntN(8<<20)))))
			at = at.Add(step)
			if i%97 != 96 {
				continue
			}
			got := d.Verdict()
			want := d.analyze(d.points(nil)) // no arena: every series made afresh
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("trial %d, sample %d:\narena %+v\nfresh %+v", trial, i, got, want)
			}
			judged++
		}
	}
	t.Logf("%d verdicts compared", judged)
}
