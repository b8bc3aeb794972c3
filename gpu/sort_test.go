package gpu

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// order runs o on driver lists whose devices' indices are their places.
func order(o *procOrder, lists [][]DriverProcess) []procKey {
	qs, devs := make([]deviceSample, len(lists)), make([]DeviceState, len(lists))
	for i, l := range lists {
		qs[i].list, devs[i].Index = l, i
	}
	return o.sorted(qs, devs)
}

func TestSortedProcesses(t *testing.T) {
	p := func(pid uint32, mem uint64) DriverProcess { return DriverProcess{PID: pid, Memory: mem} }
	tests := []struct {
		name  string
		lists [][]DriverProcess
		want  []string // device/PID of each, in order
	}{
		{"none", nil, nil},
		{"empty lists", [][]DriverProcess{{}, {}}, nil},
		{"by memory, largest first", [][]DriverProcess{{p(5, 1), p(6, 3)}, {p(7, 2)}}, []string{"0/6", "1/7", "0/5"}},
		{"ties by PID, then device", [][]DriverProcess{{p(9, 4), p(3, 4)}, {p(3, 4), p(2, 1)}}, []string{"0/3", "1/3", "0/9", "1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := order(new(procOrder), tt.lists)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d processes, want %d", len(got), len(tt.want))
			}
			for i, k := range got {
				if s := fmt.Sprint(k.dev, "/", k.pid); s != tt.want[i] {
					t.Errorf("process %d is %s, want %s", i, s, tt.want[i])
				}
				if l := tt.lists[k.list][k.at]; l.PID != k.pid || l.Memory != k.mem || int(k.dev) != int(k.list) {
					t.Errorf("key %d %+v does not point at its process %+v", i, k, l)
				}
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
// the snapshot's order used before sortKeys.
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

// A procOrder kept across samples gives what a fresh sort gives, whether
// the memory figures moved a little (the insertion sort finishes), a lot
// (it gives up and sorts afresh) or the lists changed length.
func TestProcOrderAcrossSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lists := make([][]DriverProcess, 4)
	for li := range lists {
		for i := range 50 {
			lists[li] = append(lists[li], DriverProcess{PID: uint32(1000 + 7*i + li), Memory: rng.Uint64N(64) << 20})
		}
	}
	var kept procOrder
	for sample := range 300 {
		switch {
		case sample%50 == 49: // every figure changes: far from the last order
			for _, l := range lists {
				for i := range l {
					l[i].Memory = rng.Uint64N(64) << 20
				}
			}
		case sample%20 == 19: // a process comes or goes
			li := rng.IntN(len(lists))
			if rng.IntN(2) == 0 && len(lists[li]) > 1 {
				lists[li] = lists[li][1:]
			} else {
				lists[li] = append(lists[li], DriverProcess{PID: uint32(5000 + sample), Memory: rng.Uint64N(64) << 20})
			}
		default: // a few move a little, one jumps (a sawtooth's drop)
			for range 5 {
				l := lists[rng.IntN(len(lists))]
				l[rng.IntN(len(l))].Memory += 1 << 20
			}
			l := lists[rng.IntN(len(lists))]
			l[rng.IntN(len(l))].Memory = rng.Uint64N(64) << 20
		}
		got := order(&kept, lists)
		want := order(new(procOrder), lists)
		if len(got) != len(want) {
			t.Fatalf("sample %d: %d processes, want %d", sample, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("sample %d: place %d holds %+v, want %+v", sample, i, got[i], want[i])
			}
			if l := lists[got[i].list][got[i].at]; l.PID != got[i].pid || l.Memory != got[i].mem {
				t.Fatalf("sample %d: key %+v does not point at its process %+v", sample, got[i], l)
			}
		}
		for i := 1; i < len(got); i++ {
			if !got[i-1].before(&got[i]) {
				t.Fatalf("sample %d: places %d and %d out of order", sample, i-1, i)
			}
		}
	}
}

// insertKeys gives up within its budget on a reversed list, and sorts a
// nearly sorted one.
func TestInsertKeysBudget(t *testing.T) {
	k := make([]procKey, 100)
	for i := range k {
		k[i] = procKey{mem: uint64(i)} // smallest first: reversed
	}
	if insertKeys(k, 200) {
		t.Error("a reversed list of 100 sorted within 200 moves")
	}
	for i := range k {
		k[i] = procKey{mem: uint64(len(k) - i)}
	}
	k[10], k[11] = k[11], k[10]
	if !insertKeys(k, 200) || !slices.IsSortedFunc(k, func(a, b procKey) int { return cmp.Compare(b.mem, a.mem) }) {
		t.Error("a list one swap from sorted was not sorted")
	}
}

// BenchmarkSortedNearly1600 is the snapshot's order at a sample where a
// few of 1,600 processes moved: the usual case.
func BenchmarkSortedNearly1600(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	lists := make([][]DriverProcess, 8)
	for li := range lists {
		for i := range 200 {
			lists[li] = append(lists[li], DriverProcess{PID: uint32(1000 + 8*i + li), Memory: rng.Uint64N(1<<14) << 20})
		}
	}
	var o procOrder
	order(&o, lists)
	for b.Loop() {
		l := lists[rng.IntN(len(lists))]
		l[rng.IntN(len(l))].Memory = rng.Uint64N(1<<14) << 20
		order(&o, lists)
	}
}
