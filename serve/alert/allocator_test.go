package alert

import (
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/serve/sample"
)

const mib = 1 << 20

// onAllocator is p on vram's allocator: reserved bytes of which free are
// cached free, largest the largest free block, with ooms OOM errors.
func onAllocator(p sample.Process, allocated, reserved, free, largest, ooms int64) sample.Process {
	p.Alloc = &statchan.Record{Figures: statchan.Figures{Allocated: allocated, Reserved: reserved, FreeCached: free, LargestFree: largest, NumOOMs: ooms}}
	return p
}

func TestAllocatorRules(t *testing.T) {
	frag := Rule{Name: "frag", When: WhenFragmentationAbove, Percent: 20, For: 5 * time.Minute}
	dev := []Device{h200(0, 50*gib)}
	// 1 GiB reserved: 300 MiB cached free, 50 MiB of it in the largest
	// block, so 250 MiB outside it (24.4 %); then 100 MiB (9.7 %).
	fragmented := func(pid uint32) sample.Process {
		return onAllocator(proc(0, pid, 1200*mib), 700*mib, gib, 300*mib, 50*mib, 0)
	}
	tidy := func(pid uint32) sample.Process {
		return onAllocator(proc(0, pid, 1200*mib), 700*mib, gib, 150*mib, 50*mib, 0)
	}
	const firing = "firing frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0: allocator 24.4% fragmented " +
		"(250.00 MiB cached free outside the largest free block of 50.00 MiB; 1.00 GiB reserved, 700.00 MiB allocated) for 5m0s"
	tests := []struct {
		name  string
		rules []Rule
		steps []step
	}{
		{"fragmentation above 20 % for 5 m fires and resolves", []Rule{frag}, []step{
			{0, dev, []sample.Process{fragmented(7), proc(0, 8, 3*gib)}, nil},
			{4 * time.Minute, dev, []sample.Process{fragmented(7), proc(0, 8, 3*gib)}, nil},
			{5 * time.Minute, dev, []sample.Process{fragmented(7), proc(0, 8, 3*gib)}, []string{firing}},
			{6 * time.Minute, dev, []sample.Process{fragmented(7), proc(0, 8, 3*gib)}, nil},
			{7 * time.Minute, dev, []sample.Process{tidy(7), proc(0, 8, 3*gib)}, []string{
				"resolved frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0: allocator 9.7% fragmented " +
					"(100.00 MiB cached free outside the largest free block of 50.00 MiB; 1.00 GiB reserved, 700.00 MiB allocated), under 20% again"}},
		}},
		{"one tidy sample starts the wait over", []Rule{frag}, []step{
			{0, dev, []sample.Process{fragmented(7)}, nil},
			{3 * time.Minute, dev, []sample.Process{tidy(7)}, nil},
			{4 * time.Minute, dev, []sample.Process{fragmented(7)}, nil},
			{8 * time.Minute, dev, []sample.Process{fragmented(7)}, nil},
			{9 * time.Minute, dev, []sample.Process{fragmented(7)}, []string{firing}},
		}},
		{"a process off the allocator never fires; one that leaves it keeps its alert until it exits",
			[]Rule{{Name: "frag", When: WhenFragmentationAbove, Percent: 20}}, []step{
				{0, dev, []sample.Process{fragmented(7), proc(0, 8, 3*gib)}, []string{
					"firing frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0: allocator 24.4% fragmented " +
						"(250.00 MiB cached free outside the largest free block of 50.00 MiB; 1.00 GiB reserved, 700.00 MiB allocated)"}},
				{time.Second, dev, []sample.Process{proc(0, 7, 3*gib), proc(0, 8, 3*gib)}, nil},
				{2 * time.Second, dev, []sample.Process{proc(0, 8, 3*gib)}, []string{
					"resolved frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0 is no longer listed on the GPU (it exited or released its memory)"}},
			}},
		{"min_bytes: a small cache does not count", []Rule{{Name: "frag", When: WhenFragmentationAbove, Percent: 20, MinBytes: 2 * gib}}, []step{
			{0, dev, []sample.Process{fragmented(7)}, nil},
			{time.Second, dev, []sample.Process{onAllocator(proc(0, 7, 5*gib), 3*gib, 4*gib, 2*gib, gib, 0)}, []string{
				"firing frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0: allocator 25% fragmented " +
					"(1.00 GiB cached free outside the largest free block of 1.00 GiB; 4.00 GiB reserved, 3.00 GiB allocated)"}},
			{2 * time.Second, dev, []sample.Process{fragmented(7)}, []string{
				"resolved frag warning GPU-0 pid 7: process 7 (python train.py) on GPU 0: allocator 24.4% fragmented " +
					"(250.00 MiB cached free outside the largest free block of 50.00 MiB; 1.00 GiB reserved, 700.00 MiB allocated), under 2.00 GiB reserved"}},
		}},
		{"allocator_oom fires at the first OOM", []Rule{{Name: "oom", When: WhenAllocatorOOM, Severity: SeverityCritical}}, []step{
			{0, dev, []sample.Process{tidy(7)}, nil},
			{time.Second, dev, []sample.Process{onAllocator(proc(0, 7, 5*gib), 3*gib, 4*gib, 0, 0, 2)}, []string{
				"firing oom critical GPU-0 pid 7: process 7 (python train.py) on GPU 0: vram's allocator has returned 2 out-of-memory errors " +
					"(4.00 GiB reserved, 3.00 GiB allocated, cap none)"}},
			{2 * time.Second, dev, []sample.Process{onAllocator(proc(0, 7, 5*gib), 3*gib, 4*gib, 0, 0, 3)}, nil},
			{3 * time.Second, dev, nil, []string{
				"resolved oom critical GPU-0 pid 7: process 7 (python train.py) on GPU 0 is no longer listed on the GPU (it exited or released its memory)"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { run(t, NewEngine(tc.rules), tc.steps) })
	}
}
