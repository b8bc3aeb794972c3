package sim

import (
	"fmt"
	"unsafe"
)

// HostAlloc implements alloc.HostMemory with an ordinary Go slice.
func (d *Device) HostAlloc(n uint64) (b []byte, err error) {
	c, err := d.enter(KindHostAlloc, n, 0)
	defer d.leave(c, &err)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("sim: host alloc of 0 bytes: %w", ErrInvalidValue)
	}
	if d.cfg.HostCapacity != 0 && n > d.cfg.HostCapacity-min(d.hostBytes, d.cfg.HostCapacity) {
		return nil, fmt.Errorf("sim: host alloc of %d bytes: pinned host memory exhausted (%d of %d in use)",
			n, d.hostBytes, d.cfg.HostCapacity)
	}
	b = make([]byte, n)
	d.host[unsafe.SliceData(b)] = n
	d.hostBytes += n
	return b, nil
}

// HostFree implements alloc.HostMemory; b must start where a slice from
// HostAlloc started.
func (d *Device) HostFree(b []byte) (err error) {
	c, err := d.enter(KindHostFree, uint64(len(b)), 0)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	p := unsafe.SliceData(b)
	n, ok := d.host[p]
	if !ok || p == nil {
		return fmt.Errorf("sim: host free of %d bytes: not memory from HostAlloc: %w", len(b), ErrInvalidValue)
	}
	delete(d.host, p)
	d.hostBytes -= n
	return nil
}
