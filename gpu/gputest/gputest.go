// Package gputest builds fake GPU hosts for tests of packages that use
// package gpu: a DGX A100 from go-nvml's mock with every function package gpu
// calls set, fixed UUIDs and consistent memory figures. The processes on GPU
// 0 match the fake proc tree in gpu/testdata/proc.
package gputest

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

const gib = 1 << 30

// MockServer returns a DGX A100 mock where every device function the
// package calls is set: device 0 holds the fixture processes, the others are
// empty. Memory is consistent: total = reserved + used + free.
func MockServer() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		var procs []nvml.ProcessInfo
		used := uint64(300 << 20)
		if i == 0 {
			procs = []nvml.ProcessInfo{
				{Pid: 1000, UsedGpuMemory: 12 * gib},
				{Pid: 2000, UsedGpuMemory: 1 * gib},
				{Pid: 3000, UsedGpuMemory: 4 * gib},
				{Pid: 4000, UsedGpuMemory: 6 * gib},
				{Pid: 5000, UsedGpuMemory: 5 * gib},
				{Pid: 7000, UsedGpuMemory: 512 << 20},
			}
			used = 30 * gib
		}
		uuid := fmt.Sprintf("GPU-%08x-1111-2222-3333-444455556666", 0xa100+i)
		dev.GetUUIDFunc = func() (string, nvml.Return) { return uuid, nvml.SUCCESS }
		total := dev.MemoryInfo.Total
		reserved := uint64(600 << 20)
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: total, Reserved: reserved, Used: used, Free: total - reserved - used}, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 57, Memory: 21}, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
		dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if i == 0 { // the trainer also has a graphics context
				return []nvml.ProcessInfo{{Pid: 1000, UsedGpuMemory: 12 * gib}}, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		}
		dev.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			if i != 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return []nvml.ProcessUtilizationSample{{Pid: 1000, TimeStamp: since + 1, SmUtil: 80, MemUtil: 30}}, nvml.SUCCESS
		}
		dev.GetAccountingModeFunc = func() (nvml.EnableState, nvml.Return) {
			if i == 0 {
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		dev.GetAccountingPidsFunc = func() ([]int, nvml.Return) { return []int{1000, 900}, nvml.SUCCESS }
		dev.GetAccountingStatsFunc = func(pid uint32) (nvml.AccountingStats, nvml.Return) {
			if pid == 900 { // exited
				return nvml.AccountingStats{MaxMemoryUsage: 70 * gib, Time: 5000, StartTime: 1_700_000_000_000_000, GpuUtilization: 90}, nvml.SUCCESS
			}
			return nvml.AccountingStats{MaxMemoryUsage: 24 * gib, IsRunning: 1, StartTime: 1_700_000_100_000_000}, nvml.SUCCESS
		}
	}
	return s
}
