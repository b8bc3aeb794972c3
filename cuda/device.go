package cuda

import (
	"fmt"
	"strconv"
	"unsafe"
)

// DeviceCount returns the number of CUDA devices the driver sees (after
// CUDA_VISIBLE_DEVICES).
func DeviceCount() (int, error) {
	d, err := loaded()
	if err != nil {
		return 0, err
	}
	var n int32
	if r := callNoCtx(d.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))); r != success {
		return 0, newError(r, "cuDeviceGetCount")
	}
	return int(n), nil
}

// Device is a CUDA device (CUdevice). Its methods query the driver and need
// no context.
type Device struct {
	ordinal int
	handle  int32 // CUdevice
}

// GetDevice returns the device with the given ordinal, 0 ≤ ordinal < DeviceCount().
func GetDevice(ordinal int) (Device, error) {
	d, err := loaded()
	if err != nil {
		return Device{}, err
	}
	if ordinal < 0 {
		return Device{}, fmt.Errorf("cuda: device ordinal %d is negative", ordinal)
	}
	var h int32
	if r := callNoCtx(d.cuDeviceGet, uintptr(unsafe.Pointer(&h)), uintptr(ordinal)); r != success {
		return Device{}, newError(r, "cuDeviceGet", strconv.Itoa(ordinal))
	}
	return Device{ordinal: ordinal, handle: h}, nil
}

// Ordinal returns the device's index among the visible devices.
func (v Device) Ordinal() int { return v.ordinal }

// Name returns the product name, e.g. "NVIDIA H200".
func (v Device) Name() (string, error) {
	d, err := loaded()
	if err != nil {
		return "", err
	}
	var buf [256]byte
	if r := callNoCtx(d.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(v.handle)); r != success {
		return "", newError(r, "cuDeviceGetName", strconv.Itoa(v.ordinal))
	}
	return cString(buf[:]), nil
}

// UUID is a device's 16-byte identifier.
type UUID [16]byte

// String formats u as nvidia-smi does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (u UUID) String() string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 40)
	out = append(out, "GPU-"...)
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[b>>4], digits[b&15])
	}
	return string(out)
}

// UUID returns the device's UUID (cuDeviceGetUuid_v2).
func (v Device) UUID() (UUID, error) {
	d, err := loaded()
	if err != nil {
		return UUID{}, err
	}
	var u UUID
	if r := callNoCtx(d.cuDeviceGetUuid, uintptr(unsafe.Pointer(&u)), uintptr(v.handle)); r != success {
		return UUID{}, newError(r, d.uuidName, strconv.Itoa(v.ordinal))
	}
	return u, nil
}

// TotalMem returns the device memory in bytes.
func (v Device) TotalMem() (uint64, error) {
	d, err := loaded()
	if err != nil {
		return 0, err
	}
	var n uint64
	if r := callNoCtx(d.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(v.handle)); r != success {
		return 0, newError(r, "cuDeviceTotalMem_v2", strconv.Itoa(v.ordinal))
	}
	return n, nil
}

// Attribute is a CUdevice_attribute.
type Attribute int32

// Device attributes used by this project; the numbers are cuda.h's.
const (
	AttrMultiprocessorCount     Attribute = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	AttrIntegrated              Attribute = 18  // CU_DEVICE_ATTRIBUTE_INTEGRATED
	AttrCanMapHostMemory        Attribute = 19  // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
	AttrComputeMode             Attribute = 20  // CU_DEVICE_ATTRIBUTE_COMPUTE_MODE
	AttrECCEnabled              Attribute = 32  // CU_DEVICE_ATTRIBUTE_ECC_ENABLED
	AttrPCIBusID                Attribute = 33  // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	AttrPCIDeviceID             Attribute = 34  // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
	AttrMemoryClockRate         Attribute = 36  // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz)
	AttrGlobalMemoryBusWidth    Attribute = 37  // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH (bits)
	AttrL2CacheSize             Attribute = 38  // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (bytes)
	AttrUnifiedAddressing       Attribute = 41  // CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
	AttrPCIDomainID             Attribute = 50  // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	AttrComputeCapabilityMajor  Attribute = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	AttrComputeCapabilityMinor  Attribute = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	AttrVirtualMemoryManagement Attribute = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	AttrMemoryPoolsSupported    Attribute = 115 // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
)

// Attribute returns the value of a device attribute (cuDeviceGetAttribute).
func (v Device) Attribute(a Attribute) (int, error) {
	d, err := loaded()
	if err != nil {
		return 0, err
	}
	var n int32
	if r := callNoCtx(d.cuDeviceGetAttr, uintptr(unsafe.Pointer(&n)), uintptr(a), uintptr(v.handle)); r != success {
		return 0, newError(r, "cuDeviceGetAttribute", strconv.Itoa(int(a)), strconv.Itoa(v.ordinal))
	}
	return int(n), nil
}

// ComputeCapability returns the device's compute capability, e.g. 9, 0 for Hopper.
func (v Device) ComputeCapability() (major, minor int, err error) {
	if major, err = v.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = v.Attribute(AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// MultiprocessorCount returns the number of streaming multiprocessors.
func (v Device) MultiprocessorCount() (int, error) { return v.Attribute(AttrMultiprocessorCount) }

// PCIBusID returns the device's PCI address as the driver formats it,
// domain:bus:device.function, e.g. "0000:19:00.0".
func (v Device) PCIBusID() (string, error) {
	d, err := loaded()
	if err != nil {
		return "", err
	}
	var buf [64]byte
	if r := callNoCtx(d.cuDeviceGetPCIBusId, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(v.handle)); r != success {
		return "", newError(r, "cuDeviceGetPCIBusId", strconv.Itoa(v.ordinal))
	}
	return cString(buf[:]), nil
}

// Properties gathers the device facts a memory manager reports.
type Properties struct {
	Ordinal             int
	Name                string
	UUID                UUID
	TotalMem            uint64 // bytes
	Major, Minor        int    // compute capability
	MultiprocessorCount int
	PCIBusID            string
	VirtualMemory       bool // cuMemCreate/cuMemMap are supported
	MemoryPools         bool // cuMemAllocAsync is supported
	UnifiedAddressing   bool
}

// Properties queries all of Properties at once.
func (v Device) Properties() (Properties, error) {
	p := Properties{Ordinal: v.ordinal}
	var err error
	if p.Name, err = v.Name(); err != nil {
		return p, err
	}
	if p.UUID, err = v.UUID(); err != nil {
		return p, err
	}
	if p.TotalMem, err = v.TotalMem(); err != nil {
		return p, err
	}
	if p.Major, p.Minor, err = v.ComputeCapability(); err != nil {
		return p, err
	}
	if p.MultiprocessorCount, err = v.MultiprocessorCount(); err != nil {
		return p, err
	}
	if p.PCIBusID, err = v.PCIBusID(); err != nil {
		return p, err
	}
	flags := []struct {
		a   Attribute
		dst *bool
	}{
		{AttrVirtualMemoryManagement, &p.VirtualMemory},
		{AttrMemoryPoolsSupported, &p.MemoryPools},
		{AttrUnifiedAddressing, &p.UnifiedAddressing},
	}
	for _, f := range flags {
		n, err := v.Attribute(f.a)
		if err != nil {
			return p, err
		}
		*f.dst = n != 0
	}
	return p, nil
}

// cString returns the bytes of buf up to the first NUL.
func cString(buf []byte) string {
	for i, b := range buf {
		if b == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}
