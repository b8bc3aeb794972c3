package alloc

// freeTree is a pool's index of free blocks: a treap ordered by (stream,
// size, address) whose nodes are the blocks themselves (fields left, right
// and prio), so inserting and removing allocate nothing. A treap keeps the
// expected depth at O(log n) with random priorities and no rebalancing
// bookkeeping beyond rotations. See doc.go for how the pools are used.
type freeTree struct {
	root *block
	n    int    // number of blocks in the tree
	rng  uint32 // xorshift state for priorities; never zero
}

// blockLess orders blocks by (stream, size, address). Addresses are unique,
// so the order is total.
func blockLess(a, b *block) bool {
	if a.stream != b.stream {
		return a.stream < b.stream
	}
	if a.size != b.size {
		return a.size < b.size
	}
	return a.addr < b.addr
}

func (t *freeTree) nextPrio() uint32 {
	x := t.rng
	if x == 0 {
		x = 0x9E3779B9
	}
	x ^= x << 13
	x ^= x >> 17
	x ^= x << 5
	t.rng = x
	return x
}

// insert adds b, which must not be in any tree.
func (t *freeTree) insert(b *block) {
	b.left, b.right = nil, nil
	b.prio = t.nextPrio()
	t.root = treapInsert(t.root, b)
	t.n++
}

func treapInsert(root, b *block) *block {
	if root == nil {
		return b
	}
	if blockLess(b, root) {
		root.left = treapInsert(root.left, b)
		if root.left.prio > root.prio {
			l := root.left
			root.left, l.right = l.right, root
			return l
		}
		return root
	}
	root.right = treapInsert(root.right, b)
	if root.right.prio > root.prio {
		r := root.right
		root.right, r.left = r.left, root
		return r
	}
	return root
}

// remove deletes b, which must be in t. Its key fields (stream, size,
// address) must not have changed since it was inserted.
func (t *freeTree) remove(b *block) {
	link := &t.root
	for n := *link; n != b; n = *link {
		if n == nil {
			panic("alloc: internal error: block not in its pool")
		}
		if blockLess(b, n) {
			link = &n.left
		} else {
			link = &n.right
		}
	}
	*link = treapMerge(b.left, b.right)
	b.left, b.right = nil, nil
	t.n--
}

// treapMerge joins two treaps where every key of l is below every key of r.
func treapMerge(l, r *block) *block {
	if l == nil {
		return r
	}
	if r == nil {
		return l
	}
	if l.prio > r.prio {
		l.right = treapMerge(l.right, r)
		return l
	}
	r.left = treapMerge(l, r.left)
	return r
}

// lowerBound returns the first block at or after (s, size, 0), or nil.
// The caller checks that the result is on stream s.
func (t *freeTree) lowerBound(s Stream, size uint64) *block {
	var best *block
	for n := t.root; n != nil; {
		if n.stream > s || (n.stream == s && n.size >= size) {
			best = n
			n = n.left
		} else {
			n = n.right
		}
	}
	return best
}

// walk calls f for every block in order.
func (t *freeTree) walk(f func(*block)) {
	var rec func(*block)
	rec = func(n *block) {
		if n == nil {
			return
		}
		rec(n.left)
		f(n)
		rec(n.right)
	}
	rec(t.root)
}
