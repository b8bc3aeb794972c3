package alloc

import "errors"

// Device is what the allocator needs from a device backend: raw memory,
// streams and events, and the copies and memsets that Buffer exposes.
// The real backend (package alloc/cudadev) calls the CUDA driver; the
// simulated one (package alloc/sim) models a device in host memory.
//
// Addresses are device virtual addresses (CUdeviceptr). Stream and Event are
// opaque backend handles; Stream 0 is the device's default (legacy) stream.
//
// Implementations must be safe for concurrent use. The allocator calls
// Malloc, Free and MemInfo only on its slow paths (growth, release, OOM); it
// never calls the device on a cached allocation or free.
type Device interface {
	// Malloc returns n bytes of device memory. When the device has no room
	// it returns an error that wraps ErrDeviceOutOfMemory.
	Malloc(n uint64) (addr uint64, err error)
	// Free returns memory obtained from Malloc.
	Free(addr uint64) error
	// MemInfo reports the device's free and total memory in bytes.
	MemInfo() (free, total uint64, err error)

	// EventCreate, EventRecord, EventQuery and EventDestroy guard the reuse
	// of blocks that were used on other streams (RecordStream).
	EventCreate() (Event, error)
	EventRecord(ev Event, s Stream) error
	// EventQuery reports whether all work captured by ev has completed.
	EventQuery(ev Event) (done bool, err error)
	EventDestroy(ev Event) error

	// Memset sets n bytes at addr to value.
	Memset(addr uint64, value byte, n uint64) error
	// CopyHtoD copies len(src) bytes from host memory to dst.
	CopyHtoD(dst uint64, src []byte) error
	// CopyDtoH copies len(dst) bytes from src to host memory.
	CopyDtoH(dst []byte, src uint64) error
	// CopyDtoD copies n bytes between device addresses.
	CopyDtoD(dst, src uint64, n uint64) error
}

// Stream is an opaque backend stream handle (CUstream). Zero is the default stream.
type Stream uint64

// Event is an opaque backend event handle (CUevent).
type Event uint64

// VirtualMemory is implemented by backends that expose the driver's
// virtual-memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, ...). The page-mapped mode of the allocator needs it; the
// default segment mode does not.
type VirtualMemory interface {
	// Granularity is the physical page size that MemCreate and MemMap require.
	Granularity() (uint64, error)
	// AddressReserve reserves size bytes of virtual address space (no memory).
	AddressReserve(size uint64) (addr uint64, err error)
	AddressFree(addr, size uint64) error
	// MemCreate allocates size bytes of physical memory; size is a multiple
	// of Granularity. It wraps ErrDeviceOutOfMemory when the device is full.
	MemCreate(size uint64) (PhysHandle, error)
	MemRelease(h PhysHandle) error
	// MemMap maps all of physical memory h (size bytes) at addr: the CUDA
	// driver maps no part of an allocation alone. MemSetAccess makes the
	// mapped range readable and writable by the device.
	MemMap(addr, size uint64, h PhysHandle) error
	MemSetAccess(addr, size uint64) error
	MemUnmap(addr, size uint64) error
}

// PhysHandle is an opaque handle to physical device memory (CUmemGenericAllocationHandle).
type PhysHandle uint64

// HostMemory is implemented by backends that can allocate page-locked
// (pinned) host memory, which the pinned-host pool caches.
type HostMemory interface {
	HostAlloc(n uint64) ([]byte, error)
	HostFree(b []byte) error
}

// ErrDeviceOutOfMemory is wrapped by backend errors that mean "the device has
// no room for this request" (CUDA_ERROR_OUT_OF_MEMORY). The allocator reacts
// to it by releasing cached memory and retrying; any other error is returned
// to the caller as is.
var ErrDeviceOutOfMemory = errors.New("device out of memory")

// AsyncCopier is implemented by backends that can queue host↔device copies
// on a stream (cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2). The host side
// must be page-locked memory (HostMemory.HostAlloc) and must not be touched
// until an event recorded after the copy has completed. Buffer's
// CopyFromHostAsync and CopyToHostAsync need it, and HostMemory for their
// staging buffers.
type AsyncCopier interface {
	// CopyHtoDAsync queues a copy of src to dst on stream s.
	CopyHtoDAsync(dst uint64, src []byte, s Stream) error
	// CopyDtoHAsync queues a copy of len(dst) bytes from src into dst on s.
	CopyDtoHAsync(dst []byte, src uint64, s Stream) error
}
