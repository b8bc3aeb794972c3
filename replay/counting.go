package replay

import (
	"sync/atomic"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// fullDevice is what alloc/cudadev's Device offers: memory, virtual-memory
// management and waits on streams and events. The allocator looks for the
// last two by interface, so a wrapper must offer them all to change
// nothing in its behaviour.
type fullDevice interface {
	alloc.Device
	alloc.VirtualMemory
	SynchronizeStream(s alloc.Stream) error
	EventSynchronize(ev alloc.Event) error
}

// countingDevice counts the calls that obtain or give back device memory
// or address space on a device that does not count them itself (the CUDA
// backend), so that --device cuda reports the same driver calls as the
// simulated device: every MemMap, MemSetAccess and MemUnmap included,
// which the allocator's statistics do not all count. Only calls that
// succeed are counted, as the simulated device counts them.
type countingDevice struct {
	fullDevice
	malloc, free, reserve, freeVA, create, release, mmap, access, unmap atomic.Uint64
}

func count(c *atomic.Uint64, err error) error {
	if err == nil {
		c.Add(1)
	}
	return err
}

func (d *countingDevice) Malloc(n uint64) (uint64, error) {
	p, err := d.fullDevice.Malloc(n)
	return p, count(&d.malloc, err)
}

func (d *countingDevice) Free(addr uint64) error { return count(&d.free, d.fullDevice.Free(addr)) }

func (d *countingDevice) AddressReserve(size uint64) (uint64, error) {
	p, err := d.fullDevice.AddressReserve(size)
	return p, count(&d.reserve, err)
}

func (d *countingDevice) AddressFree(addr, size uint64) error {
	return count(&d.freeVA, d.fullDevice.AddressFree(addr, size))
}

func (d *countingDevice) MemCreate(size uint64) (alloc.PhysHandle, error) {
	h, err := d.fullDevice.MemCreate(size)
	return h, count(&d.create, err)
}

func (d *countingDevice) MemRelease(h alloc.PhysHandle) error {
	return count(&d.release, d.fullDevice.MemRelease(h))
}

func (d *countingDevice) MemMap(addr, size uint64, h alloc.PhysHandle) error {
	return count(&d.mmap, d.fullDevice.MemMap(addr, size, h))
}

func (d *countingDevice) MemSetAccess(addr, size uint64) error {
	return count(&d.access, d.fullDevice.MemSetAccess(addr, size))
}

func (d *countingDevice) MemUnmap(addr, size uint64) error {
	return count(&d.unmap, d.fullDevice.MemUnmap(addr, size))
}

// Calls returns the counts in the simulated device's shape.
func (d *countingDevice) Calls() sim.Calls {
	return sim.Calls{
		Malloc: d.malloc.Load(), Free: d.free.Load(),
		AddressReserve: d.reserve.Load(), AddressFree: d.freeVA.Load(),
		MemCreate: d.create.Load(), MemRelease: d.release.Load(),
		MemMap: d.mmap.Load(), MemSetAccess: d.access.Load(), MemUnmap: d.unmap.Load(),
	}
}
