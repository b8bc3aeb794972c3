package top_test

import (
	"fmt"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vramhq/vram/cli/top"
	"github.com/vramhq/vram/gpu"
)

// The model runs without a terminal: commands do the sampling, Update takes
// their messages, View renders. Here three samples of a simulated host on a
// fixed clock go through it, and the header and the first process row of
// the frame are printed.
func Example() {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sim, _ := gpu.NewSim(1, 1, clock)
	sampler, _ := gpu.NewSampler(sim, gpu.SamplerOptions{Procs: sim, Now: clock})

	var m tea.Model = top.New(top.Config{Interval: time.Second, ReadOnly: true}, sampler.Sample)
	m, _ = m.Update(tea.WindowSizeMsg{Width: 100, Height: 24})
	for i := 0; i < 3; i++ {
		now = now.Add(time.Second)
		m, _ = m.Update(m.Init()()) // Init's command takes one sample
	}
	lines := strings.Split(ansi.Strip(m.View().Content), "\n")
	fmt.Println(strings.TrimSpace(lines[0]))
	for _, l := range lines {
		if strings.HasPrefix(l, "▶") {
			fmt.Println(strings.TrimSpace(l))
		}
	}
	// Output:
	// vram top · CUDA 13.0 · every 1s · 12:00:03                                         SIMULATED seed 1
	// ▶   28400 alice        0  25.0 GiB         –                  python train.py --model resnet152 --b…
}
