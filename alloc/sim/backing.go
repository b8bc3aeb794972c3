package sim

// chunkSize is the unit of lazily allocated host backing.
const chunkSize = 64 << 10

// backing holds the contents of one Malloc allocation or one physical
// handle, as 64 KiB chunks keyed by chunk index. An absent chunk reads as
// zero, so memory that was never written (or was set to zero) costs nothing.
type backing struct {
	chunks map[uint64][]byte
}

func (b *backing) read(off uint64, dst []byte) {
	for len(dst) > 0 {
		idx, in := off/chunkSize, off%chunkSize
		n := min(uint64(len(dst)), chunkSize-in)
		if c, ok := b.chunks[idx]; ok {
			copy(dst[:n], c[in:])
		} else {
			clear(dst[:n])
		}
		dst, off = dst[n:], off+n
	}
}

func (b *backing) write(off uint64, src []byte) {
	for len(src) > 0 {
		idx, in := off/chunkSize, off%chunkSize
		n := min(uint64(len(src)), chunkSize-in)
		copy(b.chunk(idx)[in:], src[:n])
		src, off = src[n:], off+n
	}
}

func (b *backing) fill(off, n uint64, v byte) {
	for n > 0 {
		idx, in := off/chunkSize, off%chunkSize
		k := min(n, chunkSize-in)
		if c, ok := b.chunks[idx]; ok {
			if k == chunkSize && v == 0 {
				delete(b.chunks, idx)
			} else {
				fillBytes(c[in:in+k], v)
			}
		} else if v != 0 {
			fillBytes(b.chunk(idx)[in:in+k], v)
		}
		off, n = off+k, n-k
	}
}

func (b *backing) chunk(idx uint64) []byte {
	if b.chunks == nil {
		b.chunks = make(map[uint64][]byte)
	}
	c, ok := b.chunks[idx]
	if !ok {
		c = make([]byte, chunkSize)
		b.chunks[idx] = c
	}
	return c
}

// hostBytes is the host memory the backing uses.
func (b *backing) hostBytes() uint64 { return uint64(len(b.chunks)) * chunkSize }

func fillBytes(p []byte, v byte) {
	if v == 0 {
		clear(p)
		return
	}
	for i := range p {
		p[i] = v
	}
}
