package synth_test

import (
	"fmt"

	"github.com/vramhq/vram/trace/synth"
)

func Example() {
	// Training at batch sizes 8, 9 and 10, one step each.
	recs, err := synth.BatchWalk(synth.BatchWalkConfig{Seed: 1, StartBatch: 8, EndBatch: 10, StepsPerBatch: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := synth.Validate(recs)
	fmt.Println(len(recs), s.Allocations == s.Frees, s.EndLive, err)
	fmt.Printf("peak %.0f MiB\n", float64(s.PeakLiveBytes)/(1<<20))
	// Output:
	// 192 true 0 <nil>
	// peak 1049 MiB
}
