package alloc

import (
	"math/rand/v2"
	"testing"
)

// checkPtrMap compares m with the model: same size, every model entry
// found, every table entry in the model and reachable from its home slot
// without crossing an empty slot (what get relies on).
func checkPtrMap(t *testing.T, m *ptrMap, model map[uint64]*block) {
	t.Helper()
	if m.len() != len(model) {
		t.Fatalf("len = %d, model has %d", m.len(), len(model))
	}
	for addr, b := range model {
		if got := m.get(addr); got != b {
			t.Fatalf("get(%#x) = %p, want %p", addr, got, b)
		}
	}
	n := 0
	for b := range m.all() {
		n++
		if model[b.addr] != b {
			t.Fatalf("table holds %#x, the model does not", b.addr)
		}
	}
	if n != len(model) {
		t.Fatalf("all yielded %d blocks, model has %d", n, len(model))
	}
	if len(m.slots) > 0 && 4*m.n > len(m.slots) {
		t.Fatalf("load %d/%d above one half", m.n, len(m.slots))
	}
}

func TestPtrMapCases(t *testing.T) {
	const base = 0x7f0000000000
	tests := []struct {
		name string
		ops  []int64 // >0: put base+512·op; <0: del base+512·(-op)
	}{
		{"empty", nil},
		{"one", []int64{1}},
		{"put twice", []int64{1, 1}},
		{"put then delete", []int64{1, -1}},
		{"delete absent", []int64{-5, 1, -5}},
		{"delete in the middle of runs", []int64{1, 2, 3, 4, 5, 6, 7, 8, -4, -1, -8, 4, 9, -2}},
		{"grow past the first size", func() []int64 {
			var ops []int64
			for i := int64(1); i <= 200; i++ {
				ops = append(ops, i)
			}
			for i := int64(1); i <= 200; i += 3 {
				ops = append(ops, -i)
			}
			return ops
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m ptrMap
			model := map[uint64]*block{}
			for _, op := range tt.ops {
				if op > 0 {
					b := &block{addr: base + 512*uint64(op)}
					m.put(b)
					model[b.addr] = b
				} else {
					addr := base + 512*uint64(-op)
					m.del(addr)
					delete(model, addr)
				}
				checkPtrMap(t, &m, model)
			}
			if m.get(0) != nil || m.get(base) != nil {
				t.Fatal("found an address never put")
			}
		})
	}
}

// TestPtrMapZeroAddress: address 0 is a key like any other.
func TestPtrMapZeroAddress(t *testing.T) {
	var m ptrMap
	b := &block{addr: 0}
	m.put(b)
	if m.get(0) != b {
		t.Fatal("get(0) after put")
	}
	m.del(0)
	if m.get(0) != nil || m.len() != 0 {
		t.Fatal("get(0) after del")
	}
}

// TestPtrMapRandom drives the table and a Go map with the same random
// puts and deletes over a small set of addresses (so that runs collide,
// wrap around the end of the table and shrink in every order) and
// compares them after every step.
func TestPtrMapRandom(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 99))
		var m ptrMap
		model := map[uint64]*block{}
		keys := 40 + r.IntN(400)
		steps := 4000
		if testing.Short() {
			steps = 1000
		}
		for range steps {
			addr := 0x10000000 + 512*uint64(r.IntN(keys))
			if r.IntN(3) == 0 {
				if got := m.take(addr); got != model[addr] {
					t.Fatalf("take(%#x) = %p, want %p", addr, got, model[addr])
				}
				delete(model, addr)
			} else {
				b := &block{addr: addr}
				m.put(b)
				model[addr] = b
			}
			checkPtrMap(t, &m, model)
		}
		for addr := range model {
			m.del(addr)
			delete(model, addr)
			checkPtrMap(t, &m, model)
		}
	}
}

// BenchmarkLiveTable compares the table with the Go map it replaced on the
// allocator's pattern: 64 live blocks, each step deletes the oldest and
// inserts a new one, and looks one up.
func BenchmarkLiveTable(b *testing.B) {
	const window = 64
	blocks := make([]*block, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range blocks {
		blocks[i] = &block{addr: 0x7f0000000000 + 512*r.Uint64N(1<<24)}
	}
	b.Run("ptrMap", func(b *testing.B) {
		var m ptrMap
		for i := range window {
			m.put(blocks[i])
		}
		b.ResetTimer()
		for i := range b.N {
			old := blocks[i%len(blocks)]
			if m.get(old.addr) == nil {
				m.put(old)
			}
			m.del(old.addr)
			m.put(blocks[(i+window)%len(blocks)])
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[uint64]*block{}
		for i := range window {
			m[blocks[i].addr] = blocks[i]
		}
		b.ResetTimer()
		for i := range b.N {
			old := blocks[i%len(blocks)]
			if m[old.addr] == nil {
				m[old.addr] = old
			}
			delete(m, old.addr)
			m[blocks[(i+window)%len(blocks)].addr] = blocks[(i+window)%len(blocks)]
		}
	})
}
