package gpu

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLError is an NVML call that did not return SUCCESS. It names the NVML
// function, unwraps to the nvml.Return, and matches ErrNotSupported and
// ErrNoDriver with errors.Is where the code means that.
type NVMLError struct {
	Func   string
	Return nvml.Return
}

func (e *NVMLError) Error() string { return fmt.Sprintf("%s: %s", e.Func, returnString(e.Return)) }

// Unwrap returns the nvml.Return, which is itself an error.
func (e *NVMLError) Unwrap() error { return e.Return }

// Is matches the package's sentinels.
func (e *NVMLError) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.Return == nvml.ERROR_NOT_SUPPORTED || e.Return == nvml.ERROR_FUNCTION_NOT_FOUND
	case ErrNoDriver:
		return e.Return == nvml.ERROR_LIBRARY_NOT_FOUND || e.Return == nvml.ERROR_DRIVER_NOT_LOADED
	}
	return false
}

// returnString spells a Return without needing the library (nvml's own
// string function is only installed once the library is loaded).
func returnString(r nvml.Return) string {
	switch r {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	}
	return r.Error()
}

func nvmlErr(fn string, r nvml.Return) error {
	if r == nvml.SUCCESS {
		return nil
	}
	return &NVMLError{Func: fn, Return: r}
}

// NVML is a Host backed by the NVIDIA Management Library.
type NVML struct {
	lib  nvml.Interface
	info HostInfo

	mu      sync.Mutex
	devices []Device // discovered on first use
}

var _ Host = (*NVML)(nil)

// OpenNVML loads libnvidia-ml.so.1 and initialises it. When the library or
// the driver is missing the error wraps ErrNoDriver and says so in words.
func OpenNVML() (*NVML, error) { return NewNVML(nvml.New()) }

// NewNVML initialises lib (the real library from nvml.New, or a mock) and
// wraps it. Close shuts it down.
func NewNVML(lib nvml.Interface) (*NVML, error) {
	if r := lib.Init(); r != nvml.SUCCESS {
		err := nvmlErr("nvmlInit", r)
		switch r {
		case nvml.ERROR_LIBRARY_NOT_FOUND:
			return nil, fmt.Errorf("NVML library libnvidia-ml.so.1 not found: no NVIDIA driver on this host (%w)", err)
		case nvml.ERROR_DRIVER_NOT_LOADED:
			return nil, fmt.Errorf("NVIDIA kernel driver not loaded (libnvidia-ml.so.1 is installed, the nvidia module is not): %w", err)
		case nvml.ERROR_NO_PERMISSION:
			return nil, fmt.Errorf("no permission to open the NVIDIA devices (/dev/nvidia*): %w", err)
		}
		return nil, fmt.Errorf("initialise NVML: %w", err)
	}
	h := &NVML{lib: lib, info: HostInfo{Backend: "nvml"}}
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		h.info.Driver = v
	}
	if v, r := lib.SystemGetNVMLVersion(); r == nvml.SUCCESS {
		h.info.NVML = v
	}
	if v, r := lib.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		h.info.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	return h, nil
}

// Info describes the driver.
func (h *NVML) Info() HostInfo { return h.info }

// Close shuts NVML down.
func (h *NVML) Close() error { return nvmlErr("nvmlShutdown", h.lib.Shutdown()) }

// Devices lists the devices. The list is read once: NVML does not see
// devices that appear after nvmlInit.
func (h *NVML) Devices() ([]Device, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.devices != nil {
		return h.devices, nil
	}
	n, r := h.lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return nil, nvmlErr("nvmlDeviceGetCount", r)
	}
	devs := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d, r := h.lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %w", i, nvmlErr("nvmlDeviceGetHandleByIndex", r))
		}
		devs = append(devs, &nvmlDevice{dev: d, index: i})
	}
	h.devices = devs
	return devs, nil
}

// nvmlDevice is one NVML device handle. Identity is cached; memory falls
// back to the v1 call once v2 has said it is not supported.
type nvmlDevice struct {
	dev   nvml.Device
	index int

	mu    sync.Mutex
	id    *Identity
	memV1 bool // GetMemoryInfo_v2 unsupported: use v1
}

func (d *nvmlDevice) Identity() (Identity, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.id != nil {
		return *d.id, nil
	}
	id := Identity{Index: d.index}
	var r nvml.Return
	if id.UUID, r = d.dev.GetUUID(); r != nvml.SUCCESS {
		return Identity{}, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetUUID", r))
	}
	if id.Name, r = d.dev.GetName(); r != nvml.SUCCESS {
		return Identity{}, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetName", r))
	}
	d.id = &id
	return id, nil
}

func (d *nvmlDevice) Memory() (Memory, error) {
	d.mu.Lock()
	v1 := d.memV1
	d.mu.Unlock()
	if !v1 {
		m, r := d.dev.GetMemoryInfo_v2()
		if r == nvml.SUCCESS {
			return Memory{Total: m.Total, Used: m.Used, Free: m.Free, Reserved: m.Reserved, ReservedKnown: true}, nil
		}
		if r != nvml.ERROR_NOT_SUPPORTED && r != nvml.ERROR_FUNCTION_NOT_FOUND && r != nvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			return Memory{}, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetMemoryInfo_v2", r))
		}
		d.mu.Lock()
		d.memV1 = true
		d.mu.Unlock()
	}
	m, r := d.dev.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return Memory{}, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetMemoryInfo", r))
	}
	return Memory{Total: m.Total, Used: m.Used, Free: m.Free}, nil
}

func (d *nvmlDevice) Utilization() (Utilization, error) {
	u, r := d.dev.GetUtilizationRates()
	if r != nvml.SUCCESS {
		return Utilization{}, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetUtilizationRates", r))
	}
	return Utilization{GPU: u.Gpu, Memory: u.Memory, Known: true}, nil
}

// notAvailable is what NVML puts in usedGpuMemory when it cannot say.
const notAvailable = math.MaxUint64

func (d *nvmlDevice) Processes() ([]DriverProcess, error) {
	compute, r := d.dev.GetComputeRunningProcesses()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetComputeRunningProcesses", r))
	}
	graphics, r := d.dev.GetGraphicsRunningProcesses()
	if r != nvml.SUCCESS && r != nvml.ERROR_NOT_SUPPORTED {
		return nil, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetGraphicsRunningProcesses", r))
	}
	return mergeProcesses(compute, graphics), nil
}

// mergeProcesses merges the compute and graphics lists by PID. A process in
// both lists has one context, so its memory is the larger of the two
// figures, not their sum.
func mergeProcesses(compute, graphics []nvml.ProcessInfo) []DriverProcess {
	out := make([]DriverProcess, 0, len(compute)+len(graphics))
	at := make(map[uint32]int, len(compute)+len(graphics))
	add := func(list []nvml.ProcessInfo, kind ProcessKind) {
		for _, p := range list {
			known := p.UsedGpuMemory != notAvailable
			mem := p.UsedGpuMemory
			if !known {
				mem = 0
			}
			if i, ok := at[p.Pid]; ok {
				out[i].Kind |= kind
				if known {
					out[i].MemoryKnown = true
					out[i].Memory = max(out[i].Memory, mem)
				}
				continue
			}
			at[p.Pid] = len(out)
			out = append(out, DriverProcess{PID: p.Pid, Memory: mem, MemoryKnown: known, Kind: kind})
		}
	}
	add(compute, KindCompute)
	add(graphics, KindGraphics)
	return out
}

func (d *nvmlDevice) ProcessUtilization(since time.Time) ([]ProcessUtilization, error) {
	var ts uint64
	if !since.IsZero() {
		ts = uint64(since.UnixMicro())
	}
	samples, r := d.dev.GetProcessUtilization(ts)
	if r == nvml.ERROR_NOT_FOUND {
		return nil, nil // no sample newer than since
	}
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetProcessUtilization", r))
	}
	out := make([]ProcessUtilization, 0, len(samples))
	for _, s := range samples {
		out = append(out, ProcessUtilization{PID: s.Pid, Time: time.UnixMicro(int64(s.TimeStamp)), SM: s.SmUtil, Memory: s.MemUtil})
	}
	return out, nil
}

func (d *nvmlDevice) AccountingEnabled() (bool, error) {
	mode, r := d.dev.GetAccountingMode()
	if r != nvml.SUCCESS {
		return false, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetAccountingMode", r))
	}
	return mode == nvml.FEATURE_ENABLED, nil
}

func (d *nvmlDevice) Accounting() ([]AccountingRecord, error) {
	pids, r := d.dev.GetAccountingPids()
	if r != nvml.SUCCESS {
		return nil, fmt.Errorf("device %d: %w", d.index, nvmlErr("nvmlDeviceGetAccountingPids", r))
	}
	out := make([]AccountingRecord, 0, len(pids))
	for _, pid := range pids {
		s, r := d.dev.GetAccountingStats(uint32(pid))
		if r == nvml.ERROR_NOT_FOUND {
			continue // dropped from the driver's circular buffer meanwhile
		}
		if r != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d pid %d: %w", d.index, pid, nvmlErr("nvmlDeviceGetAccountingStats", r))
		}
		rec := AccountingRecord{
			PID:       uint32(pid),
			MaxMemory: s.MaxMemoryUsage,
			GPUUtil:   s.GpuUtilization,
			MemUtil:   s.MemoryUtilization,
			Running:   s.IsRunning != 0,
			Duration:  time.Duration(s.Time) * time.Millisecond,
		}
		if s.StartTime != 0 {
			rec.StartTime = time.UnixMicro(int64(s.StartTime))
		}
		out = append(out, rec)
	}
	return out, nil
}

// IsNoDriver reports whether err means that NVML or the driver is missing.
func IsNoDriver(err error) bool { return errors.Is(err, ErrNoDriver) }
