package cuda

import (
	"fmt"
	"strconv"
	"structs"
	"unsafe"
)

// Virtual memory management: the driver separates address space from
// physical memory. A range of device addresses is reserved
// (MemAddressReserve), physical memory is created in multiples of the
// allocation granularity (MemCreate), mapped into the range (MemMap) and made
// accessible (MemSetAccess). Undoing it runs the other way: MemUnmap,
// MemRelease, MemAddressFree. Physical memory stays allocated while it is
// mapped even after MemRelease.
//
// The structs below are laid out exactly as in cuda.h (CUDA 12 and 13,
// 64-bit); layout_test.go checks sizes and offsets.

// MemLocationType is a CUmemLocationType.
type MemLocationType int32

// MemLocationDevice is CU_MEM_LOCATION_TYPE_DEVICE: the location is a device ordinal.
const MemLocationDevice MemLocationType = 1

// MemLocation is a CUmemLocation.
type MemLocation struct {
	_    structs.HostLayout
	Type MemLocationType
	ID   int32
}

// AllocationType is a CUmemAllocationType.
type AllocationType int32

// AllocationPinned is CU_MEM_ALLOCATION_TYPE_PINNED, ordinary device memory
// that stays resident.
const AllocationPinned AllocationType = 1

// HandleType is a CUmemAllocationHandleType: how a physical allocation may
// be exported to other processes. HandleNone allows no export.
type HandleType int32

const (
	HandleNone       HandleType = 0x0 // CU_MEM_HANDLE_TYPE_NONE
	HandlePosixFD    HandleType = 0x1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	HandleFabricType HandleType = 0x8 // CU_MEM_HANDLE_TYPE_FABRIC
)

// AllocFlags is the allocFlags member of CUmemAllocationProp.
type AllocFlags struct {
	_                    structs.HostLayout
	CompressionType      uint8
	GPUDirectRDMACapable uint8
	Usage                uint16
	Reserved             [4]uint8
}

// AllocationProp is a CUmemAllocationProp (32 bytes).
type AllocationProp struct {
	_                    structs.HostLayout
	Type                 AllocationType
	RequestedHandleTypes HandleType
	Location             MemLocation
	Win32HandleMetaData  uintptr // void*, unused on Linux
	AllocFlags           AllocFlags
}

// DeviceAllocationProp describes pinned physical memory on the device with
// the given ordinal, not exportable: what a caching allocator maps.
func DeviceAllocationProp(ordinal int) AllocationProp {
	return AllocationProp{
		Type:     AllocationPinned,
		Location: MemLocation{Type: MemLocationDevice, ID: int32(ordinal)},
	}
}

// AccessFlags is a CUmemAccess_flags.
type AccessFlags int32

const (
	AccessNone      AccessFlags = 0x0 // CU_MEM_ACCESS_FLAGS_PROT_NONE
	AccessRead      AccessFlags = 0x1 // CU_MEM_ACCESS_FLAGS_PROT_READ
	AccessReadWrite AccessFlags = 0x3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
)

// AccessDesc is a CUmemAccessDesc (12 bytes).
type AccessDesc struct {
	_        structs.HostLayout
	Location MemLocation
	Flags    AccessFlags
}

// ReadWriteAccess gives the device with the given ordinal read and write access.
func ReadWriteAccess(ordinal int) AccessDesc {
	return AccessDesc{Location: MemLocation{Type: MemLocationDevice, ID: int32(ordinal)}, Flags: AccessReadWrite}
}

// GranularityOption is a CUmemAllocationGranularity_flags.
type GranularityOption int32

const (
	GranularityMinimum     GranularityOption = 0x0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	GranularityRecommended GranularityOption = 0x1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
)

// MemHandle is a CUmemGenericAllocationHandle: physical memory from MemCreate.
type MemHandle uint64

// MemGetAllocationGranularity returns the size that MemCreate sizes and
// MemMap sizes and offsets must be multiples of, for memory described by prop
// (cuMemGetAllocationGranularity).
func (c *Context) MemGetAllocationGranularity(prop *AllocationProp, opt GranularityOption) (uint64, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: cuMemGetAllocationGranularity: nil allocation properties")
	}
	var g uint64
	if r, err := c.call(c.fns().cuMemGetAllocationGranularity, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(prop)), uintptr(opt)); err != nil || r != success {
		return 0, fail(err, r, "cuMemGetAllocationGranularity", "device "+strconv.Itoa(int(prop.Location.ID)), strconv.Itoa(int(opt)))
	}
	return g, nil
}

// MemAddressReserve reserves size bytes of device address space aligned to
// alignment (0: the driver's default), preferably at addr (0: anywhere)
// (cuMemAddressReserve). No memory is allocated.
func (c *Context) MemAddressReserve(size, alignment uint64, addr DevicePtr) (DevicePtr, error) {
	var p DevicePtr
	if r, err := c.call(c.fns().cuMemAddressReserve, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(alignment), uintptr(addr), 0); err != nil || r != success {
		return 0, fail(err, r, "cuMemAddressReserve", dec(size), dec(alignment), hex(uint64(addr)))
	}
	return p, nil
}

// MemAddressFree frees a range reserved by MemAddressReserve; size must be
// the reserved size (cuMemAddressFree).
func (c *Context) MemAddressFree(p DevicePtr, size uint64) error {
	if r, err := c.call(c.fns().cuMemAddressFree, uintptr(p), uintptr(size)); err != nil || r != success {
		return fail(err, r, "cuMemAddressFree", hex(uint64(p)), dec(size))
	}
	return nil
}

// MemCreate allocates size bytes of physical memory described by prop
// (cuMemCreate). When the device is full the error satisfies IsOutOfMemory.
func (c *Context) MemCreate(size uint64, prop *AllocationProp) (MemHandle, error) {
	if prop == nil {
		return 0, fmt.Errorf("cuda: cuMemCreate(%d): nil allocation properties", size)
	}
	var h MemHandle
	if r, err := c.call(c.fns().cuMemCreate, uintptr(unsafe.Pointer(&h)), uintptr(size), uintptr(unsafe.Pointer(prop)), 0); err != nil || r != success {
		return 0, fail(err, r, "cuMemCreate", dec(size), "device "+strconv.Itoa(int(prop.Location.ID)))
	}
	return h, nil
}

// MemRelease releases the handle (cuMemRelease). Memory still mapped stays
// allocated until it is unmapped.
func (c *Context) MemRelease(h MemHandle) error {
	if r, err := c.call(c.fns().cuMemRelease, uintptr(h)); err != nil || r != success {
		return fail(err, r, "cuMemRelease", hex(uint64(h)))
	}
	return nil
}

// MemMap maps size bytes of h, starting offset bytes into it, at p, which
// must lie in a reserved range and not be mapped yet (cuMemMap). The range
// is not accessible until MemSetAccess.
func (c *Context) MemMap(p DevicePtr, size, offset uint64, h MemHandle) error {
	if r, err := c.call(c.fns().cuMemMap, uintptr(p), uintptr(size), uintptr(offset), uintptr(h), 0); err != nil || r != success {
		return fail(err, r, "cuMemMap", hex(uint64(p)), dec(size), dec(offset), hex(uint64(h)))
	}
	return nil
}

// MemUnmap unmaps [p, p+size) (cuMemUnmap).
func (c *Context) MemUnmap(p DevicePtr, size uint64) error {
	if r, err := c.call(c.fns().cuMemUnmap, uintptr(p), uintptr(size)); err != nil || r != success {
		return fail(err, r, "cuMemUnmap", hex(uint64(p)), dec(size))
	}
	return nil
}

// MemSetAccess sets the access of each described location to the mapped
// range [p, p+size) (cuMemSetAccess).
func (c *Context) MemSetAccess(p DevicePtr, size uint64, desc []AccessDesc) error {
	if len(desc) == 0 {
		return fmt.Errorf("cuda: cuMemSetAccess(%#x, %d): no access descriptors", uint64(p), size)
	}
	if r, err := c.call(c.fns().cuMemSetAccess, uintptr(p), uintptr(size), uintptr(unsafe.Pointer(unsafe.SliceData(desc))), uintptr(len(desc))); err != nil || r != success {
		return fail(err, r, "cuMemSetAccess", hex(uint64(p)), dec(size), strconv.Itoa(len(desc))+" descriptors")
	}
	return nil
}
