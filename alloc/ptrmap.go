package alloc

import "iter"

// The live table: allocated blocks by address. See doc.go for an overview.
//
// Every Free looks its pointer up here and every Malloc inserts one, so the
// table sits on the cached path twice per allocation. A Go map costs a
// generic hash of the key, a control-byte match and, on insert, the map's
// growth checks; profiles of the cached path showed it as the largest single
// cost. This table is specialised to what the allocator needs:
//
//   - Open addressing with linear probing over one slice of (address,
//     block) slots, a power of two long. An empty slot has a nil block, so
//     every address, 0 included, is a valid key.
//   - The hash is Fibonacci hashing of addr>>9: every block address is a
//     multiple of 512 (minBlockSize), so the low 9 bits carry nothing;
//     multiplying by 2^64/φ and keeping the top bits spreads consecutive
//     block addresses over the whole table.
//   - The load is kept at or below one quarter: a lookup then probes about
//     1.2 slots when the key is present and 1.4 when it is absent (1.5 and
//     2.5 at one half), an insert finds its first slot empty about three
//     times in four, and a delete rarely has a run to shift. A slot is 16
//     bytes, so a probe almost always stays in one cache line. Against a
//     limit of one half, this cut the per-operation p50 and p99 of
//     BenchmarkCachedOpLatency by 11 % and 14 % (docs/alloc.md).
//   - Delete shifts the following slots of the run back (no tombstones), so
//     the table never degrades after many inserts and deletes.
//
// The table grows by doubling and never shrinks, like a Go map: its size
// follows the peak number of live allocations (64 to 128 bytes per live
// allocation at that peak, about what the block struct itself takes).
// Close empties it.

const (
	ptrMapMinSlots = 64
	fibMul         = 0x9E3779B97F4A7C15 // 2^64 / golden ratio, odd
)

type ptrSlot struct {
	addr uint64
	b    *block // nil: empty slot
}

// ptrMap maps block addresses to allocated blocks. The zero value is an
// empty table ready to use. It is guarded by the allocator's mutex.
type ptrMap struct {
	slots []ptrSlot // len is 0 or a power of two ≥ ptrMapMinSlots
	shift uint8     // 64 - log2(len(slots))
	n     int
}

// home is the slot where a probe for addr starts.
func (m *ptrMap) home(addr uint64) uint64 {
	return (addr >> 9) * fibMul >> m.shift
}

// get returns the block at addr, or nil.
func (m *ptrMap) get(addr uint64) *block {
	if m.n == 0 {
		return nil
	}
	mask := uint64(len(m.slots) - 1)
	for i := m.home(addr); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.b == nil {
			return nil
		}
		if s.addr == addr {
			return s.b
		}
	}
}

// put maps b.addr to b, replacing any block mapped there.
func (m *ptrMap) put(b *block) {
	if 4*(m.n+1) > len(m.slots) {
		m.grow()
	}
	mask := uint64(len(m.slots) - 1)
	for i := m.home(b.addr); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.b == nil {
			s.addr, s.b = b.addr, b
			m.n++
			return
		}
		if s.addr == b.addr {
			s.b = b
			return
		}
	}
}

// del removes addr from the table, if it is there.
func (m *ptrMap) del(addr uint64) { m.take(addr) }

// take removes addr from the table and returns its block, or returns nil
// when addr is not there. It closes the gap by moving back the slots of the
// run that follows whose probe started at or before the gap.
func (m *ptrMap) take(addr uint64) *block {
	if m.n == 0 {
		return nil
	}
	mask := uint64(len(m.slots) - 1)
	i := m.home(addr)
	for {
		s := &m.slots[i]
		if s.b == nil {
			return nil
		}
		if s.addr == addr {
			break
		}
		i = (i + 1) & mask
	}
	b := m.slots[i].b
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &m.slots[j]
		if s.b == nil {
			break
		}
		// s may fill the gap at i unless its home lies cyclically in
		// (i, j]: then a probe for it would stop at the gap first.
		if (j-m.home(s.addr))&mask >= (j-i)&mask {
			m.slots[i] = *s
			i = j
		}
	}
	m.slots[i] = ptrSlot{}
	m.n--
	return b
}

// grow doubles the table (or creates it) and reinserts every entry.
func (m *ptrMap) grow() {
	old := m.slots
	size := max(2*len(old), ptrMapMinSlots)
	m.slots = make([]ptrSlot, size)
	m.shift = uint8(64 - log2(uint64(size)))
	mask := uint64(size - 1)
	for _, s := range old {
		if s.b == nil {
			continue
		}
		i := m.home(s.addr)
		for m.slots[i].b != nil {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}

func log2(n uint64) int { return 63 - clz64(n) }

// len returns the number of entries.
func (m *ptrMap) len() int { return m.n }

// all yields every block in the table, in no particular order. The table
// must not change during the iteration.
func (m *ptrMap) all() iter.Seq[*block] {
	return func(yield func(*block) bool) {
		for _, s := range m.slots {
			if s.b != nil && !yield(s.b) {
				return
			}
		}
	}
}

// reset empties the table and drops its memory.
func (m *ptrMap) reset() { *m = ptrMap{} }
