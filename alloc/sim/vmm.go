package sim

import (
	"fmt"
	"sort"

	"github.com/vramhq/vram/alloc"
)

// phys is a physical allocation made by MemCreate. Its contents live in mem
// and follow it from mapping to mapping.
type phys struct {
	id       alloc.PhysHandle
	size     uint64
	mem      backing
	mapped   uint64 // bytes of address space mapped to it
	released bool   // MemRelease was called while mapped (Config.AllowReleaseMapped)
}

// mapping maps [va, va+size) to h's bytes [off, off+size).
type mapping struct {
	va, size uint64
	h        *phys
	off      uint64
	access   bool
}

func (d *Device) checkAlignedLocked(op string, addr, size uint64) error {
	g := d.cfg.Granularity
	switch {
	case size == 0:
		return fmt.Errorf("sim: %s: size is 0: %w", op, ErrInvalidValue)
	case addr%g != 0:
		return fmt.Errorf("sim: %s: address %#x is not a multiple of the granularity %d: %w", op, addr, g, ErrInvalidValue)
	case size%g != 0:
		return fmt.Errorf("sim: %s: size %d is not a multiple of the granularity %d: %w", op, size, g, ErrInvalidValue)
	case addr+size < addr:
		return fmt.Errorf("sim: %s: range %#x+%d wraps around: %w", op, addr, size, ErrInvalidValue)
	}
	return nil
}

// Granularity implements alloc.VirtualMemory.
func (d *Device) Granularity() (g uint64, err error) {
	c, err := d.enter(KindGranularity, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, err
	}
	return d.cfg.Granularity, nil
}

// AddressReserve implements alloc.VirtualMemory. The range is aligned to the
// granularity.
func (d *Device) AddressReserve(size uint64) (addr uint64, err error) {
	c, err := d.enter(KindAddressReserve, size, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, err
	}
	if err := d.checkAlignedLocked("address reserve", 0, size); err != nil {
		return 0, err
	}
	addr, ok := d.va.alloc(size, d.cfg.Granularity)
	if !ok {
		return 0, fmt.Errorf("sim: address reserve of %d bytes: virtual address space exhausted", size)
	}
	d.insertRegionLocked(&region{base: addr, size: size, req: size, reserve: true})
	return addr, nil
}

// AddressFree implements alloc.VirtualMemory. The range must be one that
// AddressReserve returned, with nothing mapped in it.
func (d *Device) AddressFree(addr, size uint64) (err error) {
	c, err := d.enter(KindAddressFree, size, addr)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	i, r := d.regionAtLocked(addr)
	if r == nil || !r.reserve || r.base != addr || r.size != size {
		return fmt.Errorf("sim: address free of %#x+%d: not a range returned by AddressReserve: %w", addr, size, ErrInvalidValue)
	}
	if j := d.firstMappingLocked(addr); j < len(d.mappings) && d.mappings[j].va < addr+size {
		m := d.mappings[j]
		return fmt.Errorf("sim: address free of %#x+%d: %#x+%d is still mapped: %w", addr, size, m.va, m.size, ErrInvalidValue)
	}
	d.regions = append(d.regions[:i], d.regions[i+1:]...)
	d.va.release(addr, size)
	return nil
}

// MemCreate implements alloc.VirtualMemory.
func (d *Device) MemCreate(size uint64) (h alloc.PhysHandle, err error) {
	c, err := d.enter(KindMemCreate, size, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, err
	}
	if err := d.checkAlignedLocked("mem create", 0, size); err != nil {
		return 0, err
	}
	if size > d.availLocked() {
		return 0, d.oomError("mem create", size)
	}
	d.lastPhys++
	p := &phys{id: d.lastPhys, size: size}
	d.handles[p.id] = p
	d.physB += size
	d.notePeakLocked()
	return p.id, nil
}

// MemRelease implements alloc.VirtualMemory.
func (d *Device) MemRelease(h alloc.PhysHandle) (err error) {
	c, err := d.enter(KindMemRelease, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	p, ok := d.handles[h]
	if !ok || p.released {
		return fmt.Errorf("sim: mem release of handle %d: no such handle: %w", h, ErrInvalidValue)
	}
	if p.mapped > 0 {
		if !d.cfg.AllowReleaseMapped {
			return fmt.Errorf("sim: mem release of handle %d: %d bytes of it are still mapped: %w", h, p.mapped, ErrInvalidValue)
		}
		p.released = true // freed by the last MemUnmap
		return nil
	}
	d.dropHandleLocked(p)
	return nil
}

func (d *Device) dropHandleLocked(p *phys) {
	delete(d.handles, p.id)
	d.physB -= p.size
}

// MemMap implements alloc.VirtualMemory: it maps the first size bytes of h at
// addr, which must lie inside one reservation and not be mapped yet.
func (d *Device) MemMap(addr, size uint64, h alloc.PhysHandle) (err error) {
	c, err := d.enter(KindMemMap, size, addr)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	if err := d.checkAlignedLocked("mem map", addr, size); err != nil {
		return err
	}
	p, ok := d.handles[h]
	if !ok || p.released {
		return fmt.Errorf("sim: mem map at %#x: no such handle %d: %w", addr, h, ErrInvalidValue)
	}
	if size > p.size {
		return fmt.Errorf("sim: mem map at %#x: size %d exceeds handle %d's %d bytes: %w", addr, size, h, p.size, ErrInvalidValue)
	}
	if _, r := d.regionAtLocked(addr); r == nil || !r.reserve || addr+size > r.base+r.size {
		return fmt.Errorf("sim: mem map at %#x+%d: not inside a range from AddressReserve: %w", addr, size, ErrInvalidValue)
	}
	i := d.firstMappingLocked(addr)
	if i < len(d.mappings) && d.mappings[i].va < addr+size {
		m := d.mappings[i]
		return fmt.Errorf("sim: mem map at %#x+%d: overlaps mapping %#x+%d: %w", addr, size, m.va, m.size, ErrInvalidValue)
	}
	d.mappings = append(d.mappings, nil)
	copy(d.mappings[i+1:], d.mappings[i:])
	d.mappings[i] = &mapping{va: addr, size: size, h: p}
	p.mapped += size
	return nil
}

// MemSetAccess implements alloc.VirtualMemory. Every page of the range must
// be mapped.
func (d *Device) MemSetAccess(addr, size uint64) (err error) {
	c, err := d.enter(KindMemSetAccess, size, addr)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	i, j, err := d.coverLocked("mem set access", addr, size)
	if err != nil {
		return err
	}
	for _, m := range d.mappings[i:j] {
		m.access = true
	}
	return nil
}

// MemUnmap implements alloc.VirtualMemory. Every page of the range must be
// mapped; parts of mappings may be unmapped.
func (d *Device) MemUnmap(addr, size uint64) (err error) {
	c, err := d.enter(KindMemUnmap, size, addr)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	i, j, err := d.coverLocked("mem unmap", addr, size)
	if err != nil {
		return err
	}
	for _, m := range d.mappings[i:j] {
		m.h.mapped -= m.size
		if m.h.released && m.h.mapped == 0 {
			d.dropHandleLocked(m.h)
		}
	}
	d.mappings = append(d.mappings[:i], d.mappings[j:]...)
	return nil
}

// firstMappingLocked returns the index of the first mapping that ends after addr.
func (d *Device) firstMappingLocked(addr uint64) int {
	return sort.Search(len(d.mappings), func(i int) bool { return d.mappings[i].va+d.mappings[i].size > addr })
}

// coverLocked checks that [addr, addr+size) is aligned and wholly mapped,
// splits the mappings at its ends, and returns the index range [i, j) of
// the mappings that now exactly cover it.
func (d *Device) coverLocked(op string, addr, size uint64) (i, j int, err error) {
	if err := d.checkAlignedLocked(op, addr, size); err != nil {
		return 0, 0, err
	}
	end := addr + size
	i = d.firstMappingLocked(addr)
	a := addr
	for j = i; a < end; j++ {
		if j >= len(d.mappings) || d.mappings[j].va > a {
			return 0, 0, fmt.Errorf("sim: %s of %#x+%d: page %#x is not mapped: %w", op, addr, size, a, ErrInvalidValue)
		}
		a = d.mappings[j].va + d.mappings[j].size
	}
	d.splitLocked(end)
	d.splitLocked(addr)
	i = d.firstMappingLocked(addr)
	j = d.firstMappingLocked(end - 1)
	return i, j + 1, nil
}

// splitLocked splits the mapping that strictly contains x into two at x.
func (d *Device) splitLocked(x uint64) {
	i := d.firstMappingLocked(x)
	if i >= len(d.mappings) || d.mappings[i].va >= x {
		return
	}
	m := d.mappings[i]
	k := x - m.va
	tail := &mapping{va: x, size: m.size - k, h: m.h, off: m.off + k, access: m.access}
	m.size = k
	d.mappings = append(d.mappings, nil)
	copy(d.mappings[i+2:], d.mappings[i+1:])
	d.mappings[i+1] = tail
}
