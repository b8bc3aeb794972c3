package alert

import (
	"fmt"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/sample"
)

// BenchmarkEvaluate: one sample of a busy node (8 GPUs, 200 processes each)
// against the five rules of docs/alerts.md. In "quiet" nothing holds; in
// "firing" a few subjects have their condition holding, their alerts firing
// (one GPU above 90 %, a leaking and an orphaned process on each GPU), and
// everything else is healthy.
func BenchmarkEvaluate(b *testing.B) {
	b.Run("quiet", func(b *testing.B) { benchmarkEvaluate(b, false) })
	b.Run("firing", func(b *testing.B) { benchmarkEvaluate(b, true) })
}

func benchmarkEvaluate(b *testing.B, firing bool) {
	rules := []Rule{
		{Name: "leak", When: WhenLeak, MinSlope: 1 << 20},
		{Name: "gpu-nearly-full", When: WhenUsedAbove, Percent: 90, For: 5 * time.Minute},
		{Name: "orphan-holding", When: WhenOrphanHolding, MinBytes: 1 << 30},
		{Name: "unattributed", When: WhenUnattributedAbove, MinBytes: 2 << 30, For: 2 * time.Minute},
		{Name: "gpu-unhealthy", When: WhenDeviceUnhealthy},
	}
	var in Input
	for i := range 8 {
		d := Device{Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, i), Name: "NVIDIA H200",
			Total: 140 << 30, Used: 60 << 30, Unattributed: 100 << 20, Healthy: true}
		if firing && i == 3 {
			d.Used = 130 << 30
		}
		in.Devices = append(in.Devices, d)
		for j := range 200 {
			p := sample.Process{GPU: d.UUID, PID: uint32(1000 + 200*i + j), StartTime: t0.Add(-time.Duration(j) * time.Minute),
				Display: "python -m torch.distributed.run --nproc-per-node 8 train.py --config big.yaml", Bytes: 300 << 20}
			switch {
			case !firing:
			case j == 7:
				p.Leak, p.Slope = true, 4<<20
			case j == 9:
				p.Flags, p.Bytes = gpu.FlagOrphaned, 6<<30
			}
			in.Processes = append(in.Processes, p)
		}
	}
	e := NewEngine(rules)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		in.Time = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		e.Evaluate(in)
	}
}
