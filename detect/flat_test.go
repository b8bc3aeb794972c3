package detect

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestFlatMatchesGeneral: on floors that do not move, the shortcut's
// verdict is the general path's, field for field, over the sizes, sample
// rates and configurations a detector meets; and the shortcut is taken.
func TestFlatMatchesGeneral(t *testing.T) {
	configs := []Config{
		{},
		{Window: 2 * time.Second, MinWindows: 6, RatchetSteps: 3, Alpha: 0.2},
		{Window: 10 * time.Second, MaxWindows: 64, Capacity: 80 << 30, MinGrowth: 1},
	}
	r := rand.New(rand.NewPCG(11, 12))
	taken := 0
	for trial := range 300 {
		cfg := configs[trial%len(configs)]
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		base := uint64(1+r.IntN(80)) << 30
		step := time.Duration(50+r.IntN(2000)) * time.Millisecond
		samples := 1 + r.IntN(6000)
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range samples {
			// A sawtooth that touches the floor in every window, or a
			// level that never moves.
			b := base
			if trial%2 == 0 && i%7 != 0 {
				b += uint64(r.IntN(4096)) << 20
			}
			d.Add(at, b)
			at = at.Add(step + time.Duration(r.IntN(20))*time.Millisecond)
		}
		if _, ok := d.flat(d.points(nil)); ok {
			taken++
		}
		got := d.Verdict()
		noFlatShortcut = true
		want := d.Verdict()
		noFlatShortcut = false
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d (%d samples every %v, config %+v):\nshortcut %+v\ngeneral  %+v", trial, samples, step, cfg, got, want)
		}
	}
	if taken < 100 {
		t.Fatalf("the shortcut was taken in %d of 300 trials; the test no longer covers it", taken)
	}
}

// The shortcut is not taken where the floor moves.
func TestFlatNotTakenOnMovingFloor(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3000 {
		d.Add(at.Add(time.Duration(i)*100*time.Millisecond), 1<<30+uint64(i/1000)<<20)
	}
	if _, ok := d.flat(d.points(nil)); ok {
		t.Fatal("the shortcut was taken on a floor that stepped up twice")
	}
}
