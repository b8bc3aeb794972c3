package detect_test

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
)

// FuzzDetector feeds arbitrary sample sequences (times that jump forwards and
// backwards, repeat or stay equal; any byte values) and checks that the
// detector never panics and that no verdict field is NaN or out of range.
// Each sample is 10 bytes: a signed 16-bit time step in units chosen by the
// first byte, and a 64-bit value.
func FuzzDetector(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(make([]byte, 1000))
	seed := []byte{2}
	for i := range 300 {
		var rec [10]byte
		binary.LittleEndian.PutUint16(rec[:2], 1)
		binary.LittleEndian.PutUint64(rec[2:], uint64(i)<<30)
		seed = append(seed, rec[:]...)
	}
	f.Add(seed)
	huge := []byte{5}
	for range 100 {
		var rec [10]byte
		binary.LittleEndian.PutUint16(rec[:2], 0x7fff)
		binary.LittleEndian.PutUint64(rec[2:], math.MaxUint64)
		huge = append(huge, rec[:]...)
	}
	f.Add(huge)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			data = []byte{0}
		}
		units := []time.Duration{time.Nanosecond, time.Millisecond, 10 * time.Millisecond, time.Second, time.Minute, 24 * time.Hour}
		unit := units[int(data[0])%len(units)]
		d, err := detect.New(detect.Config{})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		data = data[1:]
		for i := 0; len(data) >= 10; i++ {
			step := time.Duration(int16(binary.LittleEndian.Uint16(data[:2]))) * unit
			at = at.Add(step)
			d.Add(at, binary.LittleEndian.Uint64(data[2:10]))
			data = data[10:]
			if i%50 == 0 {
				check(t, d.Verdict())
			}
		}
		check(t, d.Verdict())
	})
}

func check(t *testing.T, v detect.Verdict) {
	t.Helper()
	for name, x := range map[string]float64{"Slope": v.Slope, "Z": v.Z, "P": v.P, "Confidence": v.Confidence, "MiBPerMin": v.MiBPerMin()} {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("%s is %v in %+v", name, x, v)
		}
	}
	if v.P < 0 || v.P > 1 || v.Confidence < 0 || v.Confidence > 1 {
		t.Fatalf("P %v or Confidence %v out of [0, 1]", v.P, v.Confidence)
	}
	if v.Kind < detect.Insufficient || v.Kind > detect.Leak || v.Reason == "" {
		t.Fatalf("bad kind or empty reason: %+v", v)
	}
	if v.Horizon < 0 || v.WarmUp < 0 {
		t.Fatalf("negative duration: %+v", v)
	}
	if d, ok := v.TimeToOOM(1 << 40); ok && d < 0 {
		t.Fatalf("negative TimeToOOM %v", d)
	}
}
