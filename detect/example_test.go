package detect_test

import (
	"fmt"
	"time"

	"github.com/vramhq/vram/detect"
)

// A sampler feeds a Detector as readings arrive; the verdict can be asked at
// any time and costs no more on a long job than on a short one.
func ExampleDetector() {
	d, err := detect.New(detect.Config{Capacity: 80 << 30})
	if err != nil {
		fmt.Println(err)
		return
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 1200 { // two minutes at 100 ms
		at := time.Duration(i) * 100 * time.Millisecond
		floor := 12<<30 + uint64(at.Seconds()*3*detect.MiB) // leaking 3 MiB/s
		batch := uint64(i%7) << 28                          // steps of varying size on top
		d.Add(start.Add(at), floor+batch)
	}
	v := d.Verdict()
	fmt.Println(v.Kind)
	fmt.Printf("%.0f MiB/min\n", v.MiBPerMin())
	left, _ := v.TimeToOOM(80 << 30)
	fmt.Println(left.Round(time.Hour))
	// Output:
	// leak
	// 180 MiB/min
	// 6h0m0s
}

// Analyze is the batch form: one verdict for a recorded series. Memory that
// grows once and then stays flat is not a leak.
func ExampleAnalyze() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var samples []detect.Sample
	for s := range 300 { // five minutes at 1 s
		b := uint64(8 << 30)
		if s >= 120 {
			b += 1 << 30 // the cache grows once for a bigger batch
		}
		samples = append(samples, detect.Sample{T: start.Add(time.Duration(s) * time.Second), Bytes: b})
	}
	v, err := detect.Analyze(samples, detect.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.Kind, v.StepsUp)
	fmt.Println(v.Reason)
	// Output:
	// no-leak 1
	// floor not rising: 0.00 MiB/s over 4m55s (p=1); 1 one-off step(s) up and 0 down left out, largest +1024 MiB at 2m0s
}

// A monitor that alerts while the job runs asks for a verdict every few
// seconds and acts only once the leak has been called for 15 s in a row.
func ExampleConfirm() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := detect.New(detect.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var c detect.Confirm // DefaultHold: 15 s
	for ms := 0; ms <= 90_000; ms += 100 {
		at := start.Add(time.Duration(ms) * time.Millisecond)
		d.Add(at, uint64(4<<30+ms*(32<<20)/1000)) // 32 MiB/s from the start
		if ms%5000 == 0 && c.Update(at, d.Verdict()) {
			fmt.Println("leak confirmed at", time.Duration(ms)*time.Millisecond)
			return
		}
	}
	// Output:
	// leak confirmed at 1m5s
}
