package job_test

import (
	"context"
	"fmt"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/job"
)

func ExampleMatchLine() {
	m, ok := job.MatchLine("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated memory 61.50 GiB is allocated by PyTorch, and 16.03 GiB is reserved by PyTorch but unallocated.")
	fmt.Println(ok, m.Framework, units.FormatBytes(m.Tried), units.FormatBytes(m.Capacity), units.FormatBytes(m.Unallocated))
	// Output: true pytorch 2.00 GiB 79.25 GiB 16.03 GiB
}

func ExampleParseLimit() {
	for _, s := range []string{"8GiB", "50%"} {
		l, _ := job.ParseLimit(s)
		fmt.Println(l, units.FormatBytes(l.On(job.Device{Total: 80 << 30})))
	}
	// Output:
	// 8.00 GiB 8.00 GiB
	// 50% 40.00 GiB
}

func ExampleSparkline() {
	fmt.Println(job.Sparkline([]uint64{1, 2, 4, 8, 8, 8, 4, 2}, 8))
	// Output: ▁▂▄███▄▂
}

// Run without a memory source: the job still runs, its status is kept and
// its output is scanned for OOM messages. A bare CUDA error states no
// sizes, and without memory figures nothing tells its cause: unknown.
func ExampleRun() {
	res, err := job.Run(context.Background(), job.Spec{
		Args:       []string{"sh", "-c", "echo 'RuntimeError: CUDA error: out of memory' >&2; exit 3"},
		SourceNote: "no NVML on this host",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.ExitCode, res.OOM.Detected, res.OOM.Message.Framework, res.OOM.Cause)
	// Output: 3 true cuda unknown
}
