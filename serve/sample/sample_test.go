package sample

import (
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
)

func TestFromGPU(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	rec := &statchan.Record{Figures: statchan.Figures{Allocated: 1 << 30, Reserved: 2 << 30}}
	tests := []struct {
		name string
		in   gpu.Process
		want Process
	}{
		{"known memory", gpu.Process{PID: 7, Device: 2, DeviceUUID: "GPU-2", Memory: 5 << 30, MemoryKnown: true, User: "ann", Cmdline: []string{"python", "a\nb.py"},
			Cgroup: "/kubepods/x", Container: gpu.Container{ID: "abc", PodUID: "pod-1"}, StartTime: start, Flags: gpu.FlagIdle},
			Process{GPU: "GPU-2", GPUIndex: 2, PID: 7, StartTime: start, User: "ann", Command: "python a\nb.py", Display: `python a\nb.py`,
				Cgroup: "/kubepods/x", ContainerID: "abc", PodUID: "pod-1", Bytes: 5 << 30, MemoryKnown: true, Flags: gpu.FlagIdle}},
		{"unknown memory counts as none", gpu.Process{PID: 8, DeviceUUID: "GPU-0", Memory: ^uint64(0), Comm: "x", Flags: gpu.FlagNoSuchProcess},
			Process{GPU: "GPU-0", PID: 8, Command: "[x]", Display: "[x]", Flags: gpu.FlagNoSuchProcess}},
		{"on vram's allocator", gpu.Process{PID: 9, DeviceUUID: "GPU-1", Memory: 3 << 30, MemoryKnown: true, Comm: "y", Alloc: rec},
			Process{GPU: "GPU-1", PID: 9, Command: "[y]", Display: "[y]", Bytes: 3 << 30, MemoryKnown: true, Alloc: rec}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromGPU(tt.in); got != tt.want {
				t.Errorf("FromGPU =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}
