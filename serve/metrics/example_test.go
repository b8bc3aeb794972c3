package metrics_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/metrics"
)

// A daemon registers one Collector on its own registry and hands it each
// sample; scrapes mirror the latest one.
func ExampleCollector() {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	c := metrics.New(metrics.Options{Hostname: "node-1", TopN: 5, Now: func() time.Time { return now }})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	snap := &gpu.Snapshot{Time: now, Devices: []gpu.DeviceState{{
		Identity: gpu.Identity{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200"},
		Memory:   gpu.Memory{Total: 150754820096, Used: 40 << 30, Free: 150754820096 - 40<<30},
	}}}
	c.Update(snap, 2*time.Millisecond, nil)

	const want = `
# HELP vram_gpu_memory_used_bytes Device memory allocated by programs, including each CUDA context's overhead.
# TYPE vram_gpu_memory_used_bytes gauge
vram_gpu_memory_used_bytes{Hostname="node-1",UUID="GPU-0",gpu="0",modelName="NVIDIA H200"} 4.294967296e+10
`
	fmt.Println(testutil.GatherAndCompare(reg, strings.NewReader(want), "vram_gpu_memory_used_bytes"))
	// Output: <nil>
}
