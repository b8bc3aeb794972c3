// Package cudadev is the allocator's backend on a real GPU: it implements
// alloc.Device, alloc.VirtualMemory, alloc.HostMemory and alloc.AsyncCopier
// with the CUDA driver, through package cuda, on a device's primary context.
//
// The primary context is the one the CUDA runtime uses, so memory from this
// backend is ordinary device memory for PyTorch, CuPy or any runtime-API code
// running in the same process, and streams created here are valid there.
//
// # Mapping
//
//	alloc.Device        cuda.Context
//	Malloc / Free       cuMemAlloc_v2 / cuMemFree_v2
//	MemInfo             cuMemGetInfo_v2
//	Event*              cuEventCreate(CU_EVENT_DISABLE_TIMING), cuEventRecord,
//	                    cuEventQuery, cuEventSynchronize, cuEventDestroy_v2
//	Memset, Copy*       cuMemsetD8_v2, cuMemcpy{HtoD,DtoH,DtoD}_v2 on the
//	                    legacy default stream
//	VirtualMemory       cuMemGetAllocationGranularity (minimum), cuMemAddressReserve,
//	                    cuMemCreate (pinned, this device), cuMemMap,
//	                    cuMemSetAccess (read-write for this device), cuMemUnmap,
//	                    cuMemRelease, cuMemAddressFree
//	HostMemory          cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE), cuMemFreeHost
//	AsyncCopier         cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2 on the given
//	                    stream (host memory from HostAlloc only)
//
// alloc.Stream and alloc.Event are the CUstream and CUevent handle values;
// Stream 0 is the legacy default stream.
//
// # Errors
//
// Every error names the device and the failing driver call. When the driver
// reports CUDA_ERROR_OUT_OF_MEMORY the error wraps both
// alloc.ErrDeviceOutOfMemory, which the allocator reacts to, and the
// *cuda.Error, so errors.Is(err, alloc.ErrDeviceOutOfMemory) and
// cuda.IsOutOfMemory(err) both hold.
//
// # Ordering
//
// Memset and the synchronous copies run on the legacy default stream
// (CopyHtoDAsync and CopyDtoHAsync on the stream they are given), which waits for
// work on blocking streams (NewStream) and is waited for by them. Streams
// from NewNonBlockingStream are not ordered with it: synchronise them (or
// record an event and wait for it) before copying memory they use.
package cudadev

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/cuda"
)

// Device is an alloc.Device on one GPU. It is safe for concurrent use.
type Device struct {
	ctx     *cuda.Context
	ordinal int
	prop    cuda.AllocationProp // pinned physical memory on this device; read-only after Open
	access  [1]cuda.AccessDesc  // read-write for this device; read-only after Open

	granOnce sync.Once
	gran     uint64
	granErr  error
}

var (
	_ alloc.Device        = (*Device)(nil)
	_ alloc.VirtualMemory = (*Device)(nil)
	_ alloc.HostMemory    = (*Device)(nil)
	_ alloc.AsyncCopier   = (*Device)(nil)
)

// Open initialises the driver if needed and retains the primary context of
// the device with the given ordinal. Close releases it.
func Open(ordinal int) (*Device, error) {
	if err := cuda.Init(); err != nil {
		return nil, fmt.Errorf("cudadev: %w", err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("cudadev: %w", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cudadev: no GPU %d: the driver sees %d device(s) (check CUDA_VISIBLE_DEVICES)", ordinal, n)
	}
	dev, err := cuda.GetDevice(ordinal)
	if err != nil {
		return nil, fmt.Errorf("cudadev: GPU %d: %w", ordinal, err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		return nil, fmt.Errorf("cudadev: GPU %d: %w", ordinal, err)
	}
	return &Device{
		ctx:     ctx,
		ordinal: ordinal,
		prop:    cuda.DeviceAllocationProp(ordinal),
		access:  [1]cuda.AccessDesc{cuda.ReadWriteAccess(ordinal)},
	}, nil
}

// Close releases the primary context. Memory still allocated stays with the
// context, which lives on while other users in the process retain it.
func (d *Device) Close() error { return d.wrap(d.ctx.Release()) }

// Context returns the primary context, for driver calls this package does
// not wrap.
func (d *Device) Context() *cuda.Context { return d.ctx }

// Ordinal returns the device's ordinal.
func (d *Device) Ordinal() int { return d.ordinal }

// wrap adds the device to a driver error and, for out-of-memory errors, the
// allocator's sentinel.
func (d *Device) wrap(err error) error {
	if err == nil {
		return nil
	}
	if cuda.IsOutOfMemory(err) {
		return fmt.Errorf("cudadev: GPU %d: %w: %w", d.ordinal, alloc.ErrDeviceOutOfMemory, err)
	}
	return fmt.Errorf("cudadev: GPU %d: %w", d.ordinal, err)
}

// Malloc allocates n bytes of device memory (cuMemAlloc_v2).
func (d *Device) Malloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, fmt.Errorf("cudadev: GPU %d: Malloc of 0 bytes", d.ordinal)
	}
	p, err := d.ctx.MemAlloc(n)
	return uint64(p), d.wrap(err)
}

// Free frees memory from Malloc (cuMemFree_v2).
func (d *Device) Free(addr uint64) error { return d.wrap(d.ctx.MemFree(cuda.DevicePtr(addr))) }

// MemInfo reports the device's free and total memory (cuMemGetInfo_v2).
func (d *Device) MemInfo() (free, total uint64, err error) {
	free, total, err = d.ctx.MemGetInfo()
	return free, total, d.wrap(err)
}

// NewStream creates a blocking stream: its work and the legacy default
// stream's (Memset, the copies) wait for each other. Destroy it with
// DestroyStream.
func (d *Device) NewStream() (alloc.Stream, error) {
	s, err := d.ctx.StreamCreate(cuda.StreamDefault)
	return alloc.Stream(s), d.wrap(err)
}

// NewNonBlockingStream creates a stream that runs concurrently with the
// legacy default stream (CU_STREAM_NON_BLOCKING), as PyTorch's side streams do.
func (d *Device) NewNonBlockingStream() (alloc.Stream, error) {
	s, err := d.ctx.StreamCreate(cuda.StreamNonBlocking)
	return alloc.Stream(s), d.wrap(err)
}

// DestroyStream destroys a stream from NewStream or NewNonBlockingStream.
func (d *Device) DestroyStream(s alloc.Stream) error {
	if s == 0 {
		return fmt.Errorf("cudadev: GPU %d: the default stream cannot be destroyed", d.ordinal)
	}
	return d.wrap(d.ctx.StreamDestroy(cuda.Stream(s)))
}

// SynchronizeStream waits for all work queued on s.
func (d *Device) SynchronizeStream(s alloc.Stream) error {
	return d.wrap(d.ctx.StreamSynchronize(cuda.Stream(s)))
}

// Synchronize waits for all work queued on the device by this process's
// primary context.
func (d *Device) Synchronize() error { return d.wrap(d.ctx.Synchronize()) }

// EventCreate creates an event without timing, the cheapest fence.
func (d *Device) EventCreate() (alloc.Event, error) {
	e, err := d.ctx.EventCreate(cuda.EventDisableTiming)
	return alloc.Event(e), d.wrap(err)
}

// EventRecord captures in ev the work queued on s so far.
func (d *Device) EventRecord(ev alloc.Event, s alloc.Stream) error {
	return d.wrap(d.ctx.EventRecord(cuda.Event(ev), cuda.Stream(s)))
}

// EventQuery reports whether the work captured by ev has completed.
func (d *Device) EventQuery(ev alloc.Event) (bool, error) {
	done, err := d.ctx.EventQuery(cuda.Event(ev))
	return done, d.wrap(err)
}

// EventSynchronize waits until the work captured by ev has completed; the
// allocator uses it instead of polling when it must wait.
func (d *Device) EventSynchronize(ev alloc.Event) error {
	return d.wrap(d.ctx.EventSynchronize(cuda.Event(ev)))
}

// EventDestroy destroys ev.
func (d *Device) EventDestroy(ev alloc.Event) error {
	return d.wrap(d.ctx.EventDestroy(cuda.Event(ev)))
}

// Memset sets n bytes at addr to value and returns when done.
func (d *Device) Memset(addr uint64, value byte, n uint64) error {
	return d.wrap(d.ctx.MemsetD8(cuda.DevicePtr(addr), value, n))
}

// CopyHtoD copies src to dst and returns when done.
func (d *Device) CopyHtoD(dst uint64, src []byte) error {
	return d.wrap(d.ctx.MemcpyHtoD(cuda.DevicePtr(dst), src))
}

// CopyDtoH copies len(dst) bytes from src and returns when done.
func (d *Device) CopyDtoH(dst []byte, src uint64) error {
	return d.wrap(d.ctx.MemcpyDtoH(dst, cuda.DevicePtr(src)))
}

// CopyDtoD copies n bytes between device addresses on the legacy default
// stream.
func (d *Device) CopyDtoD(dst, src, n uint64) error {
	return d.wrap(d.ctx.MemcpyDtoD(cuda.DevicePtr(dst), cuda.DevicePtr(src), n))
}

// Granularity returns the minimum granularity of pinned physical memory on
// this device (2 MiB on current GPUs), asked once.
func (d *Device) Granularity() (uint64, error) {
	d.granOnce.Do(func() {
		d.gran, d.granErr = d.ctx.MemGetAllocationGranularity(&d.prop, cuda.GranularityMinimum)
		if d.granErr == nil && d.gran == 0 {
			d.granErr = errors.New("cuMemGetAllocationGranularity returned 0")
		}
		d.granErr = d.wrap(d.granErr)
	})
	return d.gran, d.granErr
}

// AddressReserve reserves size bytes of address space, aligned to the
// granularity.
func (d *Device) AddressReserve(size uint64) (uint64, error) {
	g, err := d.Granularity()
	if err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAddressReserve(size, g, 0)
	return uint64(p), d.wrap(err)
}

// AddressFree frees a reserved range.
func (d *Device) AddressFree(addr, size uint64) error {
	return d.wrap(d.ctx.MemAddressFree(cuda.DevicePtr(addr), size))
}

// MemCreate allocates size bytes of pinned physical memory on this device.
func (d *Device) MemCreate(size uint64) (alloc.PhysHandle, error) {
	h, err := d.ctx.MemCreate(size, &d.prop)
	return alloc.PhysHandle(h), d.wrap(err)
}

// MemRelease releases physical memory; mapped memory stays until unmapped.
func (d *Device) MemRelease(h alloc.PhysHandle) error {
	return d.wrap(d.ctx.MemRelease(cuda.MemHandle(h)))
}

// MemMap maps all of h (size bytes) at addr.
func (d *Device) MemMap(addr, size uint64, h alloc.PhysHandle) error {
	return d.wrap(d.ctx.MemMap(cuda.DevicePtr(addr), size, 0, cuda.MemHandle(h)))
}

// MemSetAccess makes [addr, addr+size) readable and writable by this device.
func (d *Device) MemSetAccess(addr, size uint64) error {
	return d.wrap(d.ctx.MemSetAccess(cuda.DevicePtr(addr), size, d.access[:]))
}

// MemUnmap unmaps [addr, addr+size).
func (d *Device) MemUnmap(addr, size uint64) error {
	return d.wrap(d.ctx.MemUnmap(cuda.DevicePtr(addr), size))
}

// HostAlloc allocates n bytes of page-locked host memory, pinned for every
// context (portable).
func (d *Device) HostAlloc(n uint64) ([]byte, error) {
	b, err := d.ctx.MemHostAlloc(n, cuda.HostAllocPortable)
	return b, d.wrap(err)
}

// HostFree frees memory from HostAlloc.
func (d *Device) HostFree(b []byte) error { return d.wrap(d.ctx.MemFreeHost(b)) }

// CopyHtoDAsync queues a copy of src to dst on stream s
// (cuMemcpyHtoDAsync_v2); src must be memory from HostAlloc.
func (d *Device) CopyHtoDAsync(dst uint64, src []byte, s alloc.Stream) error {
	return d.wrap(d.ctx.MemcpyHtoDAsync(cuda.DevicePtr(dst), src, cuda.Stream(s)))
}

// CopyDtoHAsync queues a copy of len(dst) bytes from src into dst on stream
// s (cuMemcpyDtoHAsync_v2); dst must be memory from HostAlloc.
func (d *Device) CopyDtoHAsync(dst []byte, src uint64, s alloc.Stream) error {
	return d.wrap(d.ctx.MemcpyDtoHAsync(dst, cuda.DevicePtr(src), cuda.Stream(s)))
}
