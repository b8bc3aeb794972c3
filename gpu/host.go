package gpu

import (
	"errors"
	"time"
)

// Host is what the sampler needs from a GPU host. NVML (real driver) and Sim
// (simulated host) implement it.
type Host interface {
	// Info describes the driver and whether the host is simulated.
	Info() HostInfo
	// Devices lists every device the driver sees, in index order.
	Devices() ([]Device, error)
	// Close releases the driver library.
	Close() error
}

// Device is one GPU as the sampler queries it. Methods that the driver does
// not support on this device return an error wrapping ErrNotSupported.
type Device interface {
	// Identity is read once per device; implementations cache it.
	Identity() (Identity, error)
	// Memory is the fast path: one driver call.
	Memory() (Memory, error)
	Utilization() (Utilization, error)
	// Processes lists the processes holding a context on the device,
	// compute and graphics lists merged by PID.
	Processes() ([]DriverProcess, error)
	// ProcessUtilization returns the driver's per-process utilization
	// samples taken after since.
	ProcessUtilization(since time.Time) ([]ProcessUtilization, error)
	// AccountingEnabled reports whether the driver keeps per-process
	// accounting on this device (nvidia-smi -am 1).
	AccountingEnabled() (bool, error)
	// Accounting returns the driver's accounting records, including
	// processes that have exited. It fails when accounting is off.
	Accounting() ([]AccountingRecord, error)
}

// HostInfo describes the driver side of a host. Its JSON (backend and
// versions) is that part of the "host" object of vram status --json; the
// simulation fields, which vram status writes at its top level, and the
// note are left out.
type HostInfo struct {
	Backend    string `json:"backend"`             // "nvml" or "simulated"
	Driver     string `json:"driver_version"`      // driver version, e.g. "580.65.06"
	NVML       string `json:"nvml_version"`        // NVML library version
	CUDA       string `json:"cuda_driver_version"` // CUDA driver API version, e.g. "13.0"
	Simulated  bool   `json:"-"`                   // true for Sim: every output says so
	SimSeed    int64  `json:"-"`                   // the simulator's seed when Simulated
	DeviceNote string `json:"-"`                   // free-form note about the host, may be empty
}

// Identity names a device.
type Identity struct {
	Index int    // NVML index (PCI bus order)
	UUID  string // "GPU-..."
	Name  string // "NVIDIA H200"
}

// Memory is a device's memory in bytes: Total = Reserved + Used + Free when
// ReservedKnown (GetMemoryInfo_v2); otherwise Used includes the driver's
// reserve (GetMemoryInfo v1) and Reserved is 0.
type Memory struct {
	Total, Used, Free, Reserved uint64
	ReservedKnown               bool
}

// Utilization is the device's utilization over the driver's last sample
// period, in percent. Known is false when the device does not report it.
type Utilization struct {
	GPU, Memory uint32
	Known       bool
}

// ProcessKind says in which driver list a process appeared.
type ProcessKind uint8

// Process kinds; a process in both lists is KindCompute|KindGraphics.
const (
	KindCompute ProcessKind = 1 << iota
	KindGraphics
)

// String returns "compute", "graphics" or "compute+graphics".
func (k ProcessKind) String() string {
	switch k {
	case KindCompute:
		return "compute"
	case KindGraphics:
		return "graphics"
	case KindCompute | KindGraphics:
		return "compute+graphics"
	}
	return "unknown"
}

// DriverProcess is one entry of a device's process list.
type DriverProcess struct {
	PID uint32
	// Memory is the process's device memory in bytes; MemoryKnown is false
	// when the driver cannot say (MIG, WDDM: NVML reports all ones).
	Memory      uint64
	MemoryKnown bool
	Kind        ProcessKind
}

// ProcessUtilization is one per-process utilization sample of the driver.
type ProcessUtilization struct {
	PID        uint32
	Time       time.Time
	SM, Memory uint32 // percent
}

// AccountingRecord is the driver's accounting of one process on a device.
type AccountingRecord struct {
	PID       uint32
	MaxMemory uint64 // the most device memory the process ever held, bytes
	GPUUtil   uint32 // percent, averaged over the process's life
	MemUtil   uint32
	Running   bool
	StartTime time.Time
	Duration  time.Duration // how long its context was active; 0 while running
}

// ErrNotSupported is wrapped by errors for queries the driver or the device
// does not support.
var ErrNotSupported = errors.New("not supported")

// ErrNoDriver is wrapped by the error of OpenNVML when the NVML library or
// the kernel driver is missing.
var ErrNoDriver = errors.New("no NVIDIA driver")
