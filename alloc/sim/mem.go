package sim

import (
	"fmt"
	"sort"
)

// span is a piece of an accessed device range that lives in one backing.
type span struct {
	mem      *backing
	off, len uint64
}

// resolveLocked maps the device range [addr, addr+n) to the backings that
// hold it, or returns an ErrIllegalAddress error saying what is wrong with
// the range. n is not zero.
func (d *Device) resolveLocked(addr, n uint64) ([]span, error) {
	end := addr + n
	if end < addr {
		return nil, fmt.Errorf("sim: range %#x+%d wraps around: %w", addr, n, ErrIllegalAddress)
	}
	_, r := d.regionAtLocked(addr)
	switch {
	case r == nil:
		return nil, fmt.Errorf("sim: %#x is not in any allocation or reservation: %w", addr, ErrIllegalAddress)
	case !r.reserve:
		if end > r.base+r.req {
			return nil, fmt.Errorf("sim: range %#x+%d runs past the end of allocation %#x of %d bytes: %w",
				addr, n, r.base, r.req, ErrIllegalAddress)
		}
		return []span{{&r.mem, addr - r.base, n}}, nil
	}
	// Reserved address space: walk the mappings that cover the range.
	var spans []span
	i := sort.Search(len(d.mappings), func(i int) bool { return d.mappings[i].va+d.mappings[i].size > addr })
	for a := addr; a < end; i++ {
		if i >= len(d.mappings) || d.mappings[i].va > a {
			return nil, fmt.Errorf("sim: range %#x+%d: page at %#x is not mapped: %w",
				addr, n, a&^(d.cfg.Granularity-1), ErrIllegalAddress)
		}
		m := d.mappings[i]
		if !m.access {
			return nil, fmt.Errorf("sim: range %#x+%d: mapping %#x+%d has no access set (MemSetAccess): %w",
				addr, n, m.va, m.size, ErrIllegalAddress)
		}
		k := min(end, m.va+m.size) - a
		spans = append(spans, span{&m.h.mem, m.off + (a - m.va), k})
		a += k
	}
	return spans, nil
}

// Memset implements alloc.Device.
func (d *Device) Memset(addr uint64, value byte, n uint64) (err error) {
	c, err := d.enter(KindMemset, n, addr)
	defer d.leave(c, &err)
	if err != nil || n == 0 {
		return err
	}
	spans, err := d.resolveLocked(addr, n)
	if err != nil {
		return fmt.Errorf("memset: %w", err)
	}
	for _, s := range spans {
		s.mem.fill(s.off, s.len, value)
	}
	return nil
}

// CopyHtoD implements alloc.Device.
func (d *Device) CopyHtoD(dst uint64, src []byte) (err error) {
	c, err := d.enter(KindCopyHtoD, uint64(len(src)), dst)
	defer d.leave(c, &err)
	if err != nil || len(src) == 0 {
		return err
	}
	spans, err := d.resolveLocked(dst, uint64(len(src)))
	if err != nil {
		return fmt.Errorf("copy host to device: %w", err)
	}
	writeSpans(spans, 0, src)
	return nil
}

// CopyDtoH implements alloc.Device.
func (d *Device) CopyDtoH(dst []byte, src uint64) (err error) {
	c, err := d.enter(KindCopyDtoH, uint64(len(dst)), src)
	defer d.leave(c, &err)
	if err != nil || len(dst) == 0 {
		return err
	}
	spans, err := d.resolveLocked(src, uint64(len(dst)))
	if err != nil {
		return fmt.Errorf("copy device to host: %w", err)
	}
	readSpans(spans, 0, dst)
	return nil
}

// copyPiece bounds the host buffer CopyDtoD uses.
const copyPiece = 1 << 20

// CopyDtoD implements alloc.Device. Overlapping ranges are copied as
// memmove would copy them.
func (d *Device) CopyDtoD(dst, src uint64, n uint64) (err error) {
	c, err := d.enter(KindCopyDtoD, n, dst)
	defer d.leave(c, &err)
	if err != nil || n == 0 {
		return err
	}
	from, err := d.resolveLocked(src, n)
	if err != nil {
		return fmt.Errorf("copy device to device: source: %w", err)
	}
	to, err := d.resolveLocked(dst, n)
	if err != nil {
		return fmt.Errorf("copy device to device: destination: %w", err)
	}
	buf := make([]byte, min(n, copyPiece))
	// Copying backwards is safe when the destination is above the source;
	// forwards otherwise. The spans of a range that aliases itself through
	// two mappings of one handle are not detected as overlapping: like the
	// driver, the result is then unspecified.
	backward := dst > src
	for done := uint64(0); done < n; {
		k := min(n-done, copyPiece)
		off := done
		if backward {
			off = n - done - k
		}
		readSpans(from, off, buf[:k])
		writeSpans(to, off, buf[:k])
		done += k
	}
	return nil
}

// readSpans reads len(dst) bytes starting at offset off of the range that
// spans describes.
func readSpans(spans []span, off uint64, dst []byte) {
	for _, s := range spans {
		if len(dst) == 0 {
			return
		}
		if off >= s.len {
			off -= s.len
			continue
		}
		k := min(uint64(len(dst)), s.len-off)
		s.mem.read(s.off+off, dst[:k])
		dst, off = dst[k:], 0
	}
}

// writeSpans is readSpans' counterpart.
func writeSpans(spans []span, off uint64, src []byte) {
	for _, s := range spans {
		if len(src) == 0 {
			return
		}
		if off >= s.len {
			off -= s.len
			continue
		}
		k := min(uint64(len(src)), s.len-off)
		s.mem.write(s.off+off, src[:k])
		src, off = src[k:], 0
	}
}
