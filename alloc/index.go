package alloc

import "math/bits"

// A pool's free blocks are indexed by a two-level segregated fit (TLSF)
// table per stream: sizes (multiples of 512 B) map to size classes, each
// class holds a doubly linked list of blocks (through the blocks' left and
// right fields, so the index allocates nothing), and a two-level bitmap
// finds the first non-empty class at or above a size in a few
// instructions. Classes below 32 KiB are exact (one size each); above, each
// power of two is cut into 64 classes, so a class spans at most 1/64 of its
// sizes. Insert and remove are O(1); a search looks at no more than
// scanLimit blocks of the request's class and then of the next non-empty
// class, and returns the smallest fitting block among them, lowest address
// first (exact best fit whenever classes are short, which is the common
// case; never a block that is too small). See doc.go for an overview.

const (
	linearClasses = 64                          // classes 0..63: sizes 512 B × class, exact
	subBits       = 6                           // 64 classes per power of two above that
	numClasses    = linearClasses + 49<<subBits // enough for sizes up to 2^64
	bitmapWords   = (numClasses + 63) / 64
	scanLimit     = 16
)

// classOf returns the class of a size that is a positive multiple of 512.
func classOf(size uint64) int {
	u := size >> 9
	if u < linearClasses {
		return int(u)
	}
	fl := bits.Len64(u) - 1 // ≥ subBits
	sl := (u >> (fl - subBits)) & (1<<subBits - 1)
	return linearClasses + (fl-subBits)<<subBits + int(sl)
}

// sizeIndex holds the free blocks of one pool on one stream.
type sizeIndex struct {
	stream  Stream
	n       int
	summary uint64 // bit w set when words[w] != 0
	words   [bitmapWords]uint64
	heads   [numClasses]*block
}

func (x *sizeIndex) insert(b *block) {
	c := classOf(b.size)
	h := x.heads[c]
	b.left, b.right = nil, h
	if h != nil {
		h.left = b
	}
	x.heads[c] = b
	x.words[c>>6] |= 1 << (c & 63)
	x.summary |= 1 << (c >> 6)
	x.n++
}

func (x *sizeIndex) remove(b *block) {
	c := classOf(b.size)
	if b.left != nil {
		b.left.right = b.right
	} else {
		x.heads[c] = b.right
	}
	if b.right != nil {
		b.right.left = b.left
	}
	b.left, b.right = nil, nil
	if x.heads[c] == nil {
		w := c >> 6
		x.words[w] &^= 1 << (c & 63)
		if x.words[w] == 0 {
			x.summary &^= 1 << w
		}
	}
	x.n--
}

// nextClass returns the first non-empty class at or after c, or -1.
func (x *sizeIndex) nextClass(c int) int {
	if c >= numClasses {
		return -1
	}
	w := c >> 6
	if m := x.words[w] >> (c & 63); m != 0 {
		return c + bits.TrailingZeros64(m)
	}
	rest := x.summary >> (w + 1) << (w + 1)
	if w+1 >= 64 || rest == 0 {
		return -1
	}
	w = bits.TrailingZeros64(rest)
	return w<<6 + bits.TrailingZeros64(x.words[w])
}

// best returns a free block of at least size bytes (see the comment at the
// top of this file), or nil.
func (x *sizeIndex) best(size uint64) *block {
	c := classOf(size)
	if x.heads[c] != nil {
		if b := scanClass(x.heads[c], size); b != nil {
			return b
		}
	}
	c = x.nextClass(c + 1)
	if c < 0 {
		return nil
	}
	return scanClass(x.heads[c], size)
}

// scanClass returns the smallest block of at least size bytes, lowest
// address first, among the first scanLimit blocks of a class list.
func scanClass(h *block, size uint64) *block {
	var best *block
	n := 0
	for b := h; b != nil && n < scanLimit; b, n = b.right, n+1 {
		if b.size >= size && (best == nil || b.size < best.size || b.size == best.size && b.addr < best.addr) {
			best = b
		}
	}
	return best
}

// walk calls f for every block in the index.
func (x *sizeIndex) walk(f func(*block)) {
	for c := x.nextClass(0); c >= 0; c = x.nextClass(c + 1) {
		for b := x.heads[c]; b != nil; b = b.right {
			f(b)
		}
	}
}

// freePool is a pool's free blocks: one index per stream.
type freePool struct {
	idx  []*sizeIndex
	last *sizeIndex // the most recently used index, checked first
}

// index returns the stream's index, creating it when create is set.
func (p *freePool) index(s Stream, create bool) *sizeIndex {
	if p.last != nil && p.last.stream == s {
		return p.last
	}
	for _, x := range p.idx {
		if x.stream == s {
			p.last = x
			return x
		}
	}
	if !create {
		return nil
	}
	x := &sizeIndex{stream: s}
	p.idx = append(p.idx, x)
	p.last = x
	return x
}

func (p *freePool) insert(b *block) { p.index(b.stream, true).insert(b) }
func (p *freePool) remove(b *block) { p.index(b.stream, false).remove(b) }

// best returns a free block on stream s of at least size bytes, or nil.
func (p *freePool) best(s Stream, size uint64) *block {
	x := p.index(s, false)
	if x == nil || x.n == 0 {
		return nil
	}
	return x.best(size)
}

// walk calls f for every free block of the pool.
func (p *freePool) walk(f func(*block)) {
	for _, x := range p.idx {
		x.walk(f)
	}
}
