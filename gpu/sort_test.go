package gpu

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSortedProcesses(t *testing.T) {
	p := func(dev int, pid uint32, mem uint64) Process {
		return Process{Device: dev, PID: pid, Memory: mem, Comm: fmt.Sprint(dev, "/", pid)}
	}
	tests := []struct {
		name  string
		lists [][]Process
		want  []string // Comm of each, in order
	}{
		{"none", nil, nil},
		{"empty lists", [][]Process{{}, {}}, nil},
		{"by memory, largest first", [][]Process{{p(0, 5, 1), p(0, 6, 3)}, {p(1, 7, 2)}}, []string{"0/6", "1/7", "0/5"}},
		{"ties by PID, then device", [][]Process{{p(0, 9, 4), p(0, 3, 4)}, {p(1, 3, 4), p(1, 2, 1)}}, []string{"0/3", "1/3", "0/9", "1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sortedProcesses(tt.lists)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d processes, want %d", len(got), len(tt.want))
			}
			for i, g := range got {
				if g.Comm != tt.want[i] {
					t.Errorf("process %d is %s, want %s", i, g.Comm, tt.want[i])
				}
			}
			if len(tt.want) == 0 && got != nil {
				t.Errorf("got %#v, want nil", got)
			}
		})
	}
}

// TestSortKeys checks sortKeys against the standard library's sort on
// shuffled, sorted, reversed and tie-heavy inputs of many sizes, including
// those that reach its heapsort fallback (depth 0).
func TestSortKeys(t *testing.T) {
	ref := func(k []procKey) {
		slices.SortFunc(k, func(a, b procKey) int {
			switch {
			case a.before(&b):
				return -1
			case b.before(&a):
				return 1
			}
			return 0
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func(i, n int) procKey{
		"random": func(i, n int) procKey {
			return procKey{mem: rng.Uint64N(1 << 40), pid: rng.Uint32N(1 << 20), dev: int32(rng.IntN(8))}
		},
		"sorted":   func(i, n int) procKey { return procKey{mem: uint64(n - i), pid: uint32(i)} },
		"reversed": func(i, n int) procKey { return procKey{mem: uint64(i), pid: uint32(i)} },
		"ties": func(i, n int) procKey {
			return procKey{mem: rng.Uint64N(3), pid: rng.Uint32N(4), dev: int32(rng.IntN(2))}
		},
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 2, 3, 12, 13, 50, 200, 1600, 5000} {
			for _, depth := range []int{-1, 0, 3} {
				k := make([]procKey, n)
				for i := range k {
					k[i] = gen(i, n)
					k[i].at = int32(i)
				}
				want := slices.Clone(k)
				ref(want)
				if depth < 0 {
					sortKeys(k)
				} else {
					quickKeys(k, depth)
				}
				for i := range k { // ties compare equal: only the order fields must match
					if k[i].mem != want[i].mem || k[i].pid != want[i].pid || k[i].dev != want[i].dev {
						t.Fatalf("%s, n=%d, depth %d: key %d is %+v, want %+v", name, n, depth, i, k[i], want[i])
					}
				}
				seen := make([]bool, n)
				for _, x := range k {
					if seen[x.at] {
						t.Fatalf("%s, n=%d: key %d twice", name, n, x.at)
					}
					seen[x.at] = true
				}
			}
		}
	}
}

func BenchmarkSortKeys1600(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]procKey, 1600)
	for i := range src {
		src[i] = procKey{mem: rng.Uint64N(1 << 40), pid: rng.Uint32N(1 << 20), dev: int32(i % 8), at: int32(i)}
	}
	k := make([]procKey, len(src))
	for b.Loop() {
		copy(k, src)
		sortKeys(k)
	}
}

// BenchmarkSortKeys1600Func is the same sort through slices.SortFunc, what
// sortedProcesses used before sortKeys.
func BenchmarkSortKeys1600Func(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]procKey, 1600)
	for i := range src {
		src[i] = procKey{mem: rng.Uint64N(1 << 40), pid: rng.Uint32N(1 << 20), dev: int32(i % 8), at: int32(i)}
	}
	k := make([]procKey, len(src))
	for b.Loop() {
		copy(k, src)
		slices.SortFunc(k, func(a, b procKey) int {
			switch {
			case a.mem != b.mem:
				return cmp.Compare(b.mem, a.mem)
			case a.pid != b.pid:
				return cmp.Compare(a.pid, b.pid)
			}
			return cmp.Compare(a.dev, b.dev)
		})
	}
}
