package alloc_test

import (
	"errors"
	"maps"
	"testing"

	"pgregory.net/rapid"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// chunkSizes returns the sizes of the physical allocations the device
// holds now, by size.
func (w *wholeVMM) chunkSizes() map[uint64]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[uint64]int{}
	for _, n := range w.size {
		out[n]++
	}
	return out
}

// With a cap, the fine regime: one chunk holds at most 20 MiB and at most
// 1/512 of the cap, rounded to the nearest page; without one, or with one
// above the device's memory, the coarse regime's 64 MiB chunks.
func TestPagedChunkBoundFromCap(t *testing.T) {
	const dev = 141 * giB
	tests := []struct {
		name  string
		conf  string
		gran  uint64
		share uint64 // 0: the default
		off   bool   // the bound turned off
		want  uint64
	}{
		{name: "no cap", conf: "page_mapped:true", want: 64 * miB},
		{name: "cap above the device", conf: "page_mapped:true,max_bytes:200GiB", want: 64 * miB},
		{name: "cap of 10 GiB", conf: "page_mapped:true,max_bytes:10GiB", want: 20 * miB},
		{name: "cap of 5 GiB", conf: "page_mapped:true,max_bytes:5GiB", want: 10 * miB},
		{name: "cap of 4.9 GiB rounds to the nearest page", conf: "page_mapped:true,max_bytes:5017MiB", want: 10 * miB},
		{name: "cap of 3 GiB", conf: "page_mapped:true,max_bytes:3GiB", want: 6 * miB},
		{name: "cap of 2 GiB", conf: "page_mapped:true,max_bytes:2GiB", want: 4 * miB},
		{name: "cap of 512 MiB: one page", conf: "page_mapped:true,max_bytes:512MiB", want: 2 * miB},
		{name: "cap of 64 MiB: at least one page", conf: "page_mapped:true,max_bytes:64MiB", want: 2 * miB},
		{name: "max_fraction", conf: "page_mapped:true,max_fraction:0.05", want: 14 * miB}, // 7.05 GiB / 512 = 14.1 MiB
		{name: "64 KiB pages", conf: "page_mapped:true,max_bytes:100MiB", gran: 64 << 10, want: 192 << 10},
		{name: "bound off", conf: "page_mapped:true,max_bytes:512MiB", off: true, want: 20 * miB},
		{name: "another share", conf: "page_mapped:true,max_bytes:512MiB", share: 64, want: 8 * miB},
		{name: "fine regime without a cap", conf: "page_mapped:true,page_regime:fine", want: 20 * miB},
		{name: "fine regime and a cap", conf: "page_mapped:true,page_regime:fine,max_bytes:2GiB", want: 4 * miB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch {
			case tt.off:
				defer alloc.SetChunkShare(0)()
			case tt.share != 0:
				defer alloc.SetChunkShare(tt.share)()
			}
			cfg, err := alloc.ParseConfig(tt.conf)
			if err != nil {
				t.Fatal(err)
			}
			d := sim.MustNew(sim.Config{Capacity: dev, Granularity: tt.gran})
			a, err := alloc.New(d, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.MaxChunkBytes(); got != tt.want {
				t.Errorf("%s: chunks of at most %d KiB, want %d KiB", tt.conf, got>>10, tt.want>>10)
			}
			if fine, want := a.FineRegime(), cfg.PageFine || cfg.MaxBytes != 0 && cfg.MaxBytes < dev || cfg.MaxFraction != 0; fine != want {
				t.Errorf("%s: fine regime %v, want %v", tt.conf, fine, want)
			}
		})
	}
}

// Under a 2 GiB cap a growth creates 4 MiB chunks; the same growth
// without a cap creates the coarse regime's chunks of up to 64 MiB.
func TestPagedCapChunksGrowth(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	for _, tt := range []struct {
		name     string
		maxBytes uint64
		creates  uint64
		sizes    map[uint64]int
	}{
		{"no cap", 0, 2, map[uint64]int{64 * miB: 1, 36 * miB: 1}},
		{"2 GiB cap", 2 * giB, 25, map[uint64]int{4 * miB: 25}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWholeVMM(sim.MustNew(sim.Config{Capacity: 16 * giB}))
			cfg := paged
			cfg.MaxBytes = tt.maxBytes
			a, err := alloc.New(w, cfg)
			if err != nil {
				t.Fatal(err)
			}
			p := mustMalloc(t, a, 100*miB, 0)
			check(t, a)
			if c := w.Calls(); c.MemCreate != tt.creates || c.MemMap != tt.creates || c.MemSetAccess != 1 {
				t.Errorf("100 MiB: %d MemCreate, %d MemMap, %d MemSetAccess; want %d, %d, 1", c.MemCreate, c.MemMap, c.MemSetAccess, tt.creates, tt.creates)
			}
			if sizes := w.chunkSizes(); !maps.Equal(sizes, tt.sizes) {
				t.Errorf("chunk sizes %v, want %v", sizes, tt.sizes)
			}
			mustFree(t, a, p)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// When MemCreate finds the device out of memory, the allocator bounds new
// chunks by 1/512 of what it holds plus what the device has left, stops
// growing ahead, and creates what is still needed in those smaller
// chunks; the bound stays when the memory comes back.
func TestPagedDeviceFullBoundsChunks(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	tests := []struct {
		name string
		// full makes the next MemCreate of 20 MiB fail with out of memory:
		// by another process's memory or by an injected fault.
		full      func(d *sim.Device, a *alloc.Allocator) (undo func())
		req       uint64 // the request after the pool holds 1280 MiB
		wantBound uint64
		wantNew   map[uint64]int // chunks created for req, by size
	}{
		{
			name: "another process leaves 12 MiB",
			full: func(d *sim.Device, a *alloc.Allocator) func() {
				st := d.Stats()
				d.SetReservedByOthers(2*giB - st.InUse - 12*miB)
				return func() { d.SetReservedByOthers(0) }
			},
			// 1280 + 12 MiB could be held: 2.5 MiB per chunk, one page.
			req: 4 * miB, wantBound: 2 * miB, wantNew: map[uint64]int{2 * miB: 2},
		},
		{
			name: "injected out of memory",
			full: func(d *sim.Device, _ *alloc.Allocator) func() {
				return d.FailNth(sim.KindMemCreate, 1)
			},
			// The device reports 2 GiB: 4 MiB per chunk.
			req: 30 * miB, wantBound: 4 * miB, wantNew: map[uint64]int{4 * miB: 7, 2 * miB: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := sim.MustNew(sim.Config{Capacity: 2 * giB})
			w := newWholeVMM(d)
			a, err := alloc.New(w, paged)
			if err != nil {
				t.Fatal(err)
			}
			base := mustMalloc(t, a, 1280*miB, 0) // from now on growth creates 20 MiB ahead
			fill(t, d, base+1280*miB-4096, 4096, 1)
			if got := a.MaxChunkBytes(); got != 64*miB || a.FineRegime() {
				t.Fatalf("before: chunks of %d MiB, fine regime %v; want the coarse regime's 64", got/miB, a.FineRegime())
			}
			before := w.chunkSizes()
			c0 := d.Calls()
			undo := tt.full(d, a)
			p := mustMalloc(t, a, tt.req, 0)
			undo()
			check(t, a)
			if got := a.MaxChunkBytes(); got != tt.wantBound {
				t.Errorf("after the device ran out: chunks of %d KiB, want %d KiB", got>>10, tt.wantBound>>10)
			}
			after := w.chunkSizes()
			made := map[uint64]int{}
			for n, k := range after {
				if k != before[n] {
					made[n] = k - before[n]
				}
			}
			if !equalCounts(made, tt.wantNew) {
				t.Errorf("chunks created for %d MiB: %v, want %v", tt.req/miB, made, tt.wantNew)
			}
			if got := d.Calls().MemCreate - c0.MemCreate; got != uint64(sumCounts(tt.wantNew))+1 {
				t.Errorf("%d MemCreate calls, want %d (one failed)", got, sumCounts(tt.wantNew)+1)
			}
			if r := a.Stats().ReservedBytes.All.Current; uint64(r) != 1280*miB+roundPages(tt.req) {
				t.Errorf("reserved %d MiB, want %d (nothing ahead of need)", r/miB, (1280*miB+roundPages(tt.req))/miB)
			}
			fill(t, d, p+tt.req-4096, 4096, 2)
			same(t, d, base+1280*miB-4096, 4096, 1)
			// The memory came back; the bound stays.
			q := mustMalloc(t, a, 40*miB, 0)
			if got := a.MaxChunkBytes(); got != tt.wantBound {
				t.Errorf("later: chunks of %d KiB, want %d KiB", got>>10, tt.wantBound>>10)
			}
			for n, k := range w.chunkSizes() {
				if n > tt.wantBound && k > before[n] {
					t.Errorf("%d chunks of %d KiB made after the bound became %d KiB", k-before[n], n>>10, tt.wantBound>>10)
				}
			}
			for _, x := range []uint64{p, q, base} {
				mustFree(t, a, x)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func roundPages(n uint64) uint64 { return (n + 2*miB - 1) / (2 * miB) * (2 * miB) }

func equalCounts(a, b map[uint64]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func sumCounts(m map[uint64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Under a cap, idle chunks of mixed sizes (20 MiB ones for 20 MiB blocks,
// page-sized ones for 2 MiB blocks, and the 6 and 10 MiB rests of larger
// growths) all move where a request needs them, and a request fails only
// when live memory leaves no room under the cap.
func TestPagedCapPressureMixedChunks(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	d := sim.MustNew(sim.Config{Capacity: 4 * giB})
	w := newWholeVMM(d)
	cfg := paged
	cfg.MaxBytes = 200 * miB
	defer alloc.SetChunkShare(8)() // 25 MiB under the cap: 20 MiB chunks
	a, err := alloc.New(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.MaxChunkBytes(); got != 20*miB {
		t.Fatalf("chunks of %d MiB under a 200 MiB cap with 1/8 shares, want 20", got/miB)
	}
	var big []uint64
	for range 4 { // 4 × 20 MiB chunks
		big = append(big, mustMalloc(t, a, 20*miB, 0))
	}
	var small []uint64
	for range 5 { // 5 × 2 MiB chunks
		small = append(small, mustMalloc(t, a, 2*miB, 0))
	}
	for i := range 2 { // 20 + 6 and 20 + 10 MiB
		big = append(big, mustMalloc(t, a, uint64(25+i*5)*miB, 0))
	}
	if sizes, want := w.chunkSizes(), map[uint64]int{20 * miB: 6, 2 * miB: 5, 6 * miB: 1, 10 * miB: 1}; !equalCounts(sizes, want) {
		t.Fatalf("chunk sizes %v, want %v", sizes, want)
	}
	for i, p := range big {
		fill(t, d, p, 4096, byte(i))
	}
	// Free two 20 MiB blocks and three 2 MiB ones: 46 MiB of idle chunks.
	mustFree(t, a, big[0])
	mustFree(t, a, big[2])
	for _, p := range small[:3] {
		mustFree(t, a, p)
	}
	r0 := a.Stats().ReservedBytes.All.Current
	c0 := d.Calls()
	p := mustMalloc(t, a, 46*miB, 0) // fits only by moving the idle chunks of both sizes
	check(t, a)
	if c := d.Calls(); c.MemCreate != c0.MemCreate {
		t.Errorf("%d chunks created, want none: 46 MiB of idle chunks could move", c.MemCreate-c0.MemCreate)
	}
	if r := a.Stats().ReservedBytes.All.Current; r != r0 {
		t.Errorf("reserved went from %d to %d MiB", r0/miB, r/miB)
	}
	for i, x := range big {
		if i != 0 && i != 2 {
			same(t, d, x, 4096, byte(i))
		}
	}
	// What is left under the cap is less than a request of 200 MiB - live.
	live := uint64(a.Stats().AllocatedBytes.All.Current)
	_, err = a.Malloc(200*miB-live+2*miB, 0)
	if !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("a request past the cap: %v, want out of memory", err)
	}
	if r := uint64(a.Stats().ReservedBytes.All.Current); r > 200*miB {
		t.Errorf("reserved %d MiB, above the 200 MiB cap", r/miB)
	}
	// Freeing everything but one block, the cap's worth fits again.
	mustFree(t, a, p)
	for _, x := range small[3:] {
		mustFree(t, a, x)
	}
	for i, x := range big {
		if i != 0 && i != 2 && i != 1 {
			mustFree(t, a, x)
		}
	}
	live = uint64(a.Stats().AllocatedBytes.All.Current)
	q := mustMalloc(t, a, 200*miB-live-2*miB, 0)
	check(t, a)
	same(t, d, big[1], 4096, 1)
	mustFree(t, a, q)
	mustFree(t, a, big[1])
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.err(); err != nil {
		t.Fatal(err)
	}
}

// TestPagedPressurePropertyRandomOps runs random operations under a cap,
// with the chunk bound drawn (off, coarse, fine), other processes taking
// and returning device memory and injected MemCreate failures, so that
// chunks of several sizes coexist and move while memory is tight. It
// checks what TestPagedPropertyRandomOps checks after every step.
func TestPagedPressurePropertyRandomOps(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := alloc.Config{PageMapped: true, MaxBytes: uint64(rapid.IntRange(24, 200).Draw(t, "capMiB")) << 20}
		if rapid.Bool().Draw(t, "window") {
			cfg.PageReleaseWindow = rapid.IntRange(1, 64).Draw(t, "windowAllocs")
		}
		defer alloc.SetChunkShare(rapid.SampledFrom([]uint64{0, 4, 8, 16, 512}).Draw(t, "chunkShare"))()
		const capacity = 256 << 20
		dev := sim.MustNew(sim.Config{Capacity: capacity, HoldEvents: true})
		wv := newWholeVMM(dev)
		a, err := alloc.New(wv, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{a: a, dev: dev, live: map[uint64]liveAlloc{}}
		streams := []alloc.Stream{0, 1}
		t.Repeat(m.withAllocFree(streams, map[string]func(*rapid.T){
			"completeEvents": func(t *rapid.T) { dev.CompleteEvents() },
			"othersHold": func(t *rapid.T) {
				dev.SetReservedByOthers(rapid.Uint64Range(0, capacity).Draw(t, "othersBytes"))
			},
			"failingCreate": func(t *rapid.T) {
				remove := dev.FailNth(sim.KindMemCreate, uint64(rapid.IntRange(1, 3).Draw(t, "nth")))
				defer remove()
				if err := m.alloc(rapid.Uint64Range(1<<20+1, 64<<20).Draw(t, "size"), rapid.SampledFrom(streams).Draw(t, "stream")); err != nil {
					t.Fatal(err)
				}
			},
			"emptyCache": func(t *rapid.T) {
				if _, err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
			},
			"": func(t *rapid.T) {
				if err := m.verify(); err != nil {
					t.Fatal(err)
				}
				for p, la := range m.live {
					if err := m.checkTag(p, la); err != nil {
						t.Fatal(err)
					}
				}
				if err := wv.err(); err != nil {
					t.Fatal(err)
				}
				s, ds := a.Stats(), dev.Stats()
				if r := uint64(s.ReservedBytes.All.Current); r > cfg.MaxBytes {
					t.Fatalf("reserved %d passes the cap %d", r, cfg.MaxBytes)
				}
				large := uint64(s.ReservedBytes.LargePool.Current)
				if ds.MappedBytes != large || ds.PhysBytes != large {
					t.Fatalf("large pool reserves %d, device maps %d and holds %d physical", large, ds.MappedBytes, ds.PhysBytes)
				}
				bound := a.MaxChunkBytes()
				if bound == 0 || bound > 20<<20 || bound%a.PageGranularity() != 0 {
					t.Fatalf("chunk bound %d: not whole pages up to 20 MiB", bound)
				}
			},
		}))
		dev.SetReservedByOthers(0)
		for p := range m.live {
			if err := m.free(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if st := dev.Stats(); st.InUse != 0 || st.Reservations != 0 {
			t.Fatalf("after Close: %d bytes in use, %d reservations", st.InUse, st.Reservations)
		}
		if err := wv.err(); err != nil {
			t.Fatal(err)
		}
	})
}

// A small job's chunks are small, a large job's 20 MiB (sizeShare): the
// bound follows the most the large pool has held.
func TestPagedChunksFollowTheJobsSize(t *testing.T) {
	dev := sim.MustNew(sim.Config{Capacity: 64 << 30})
	cfg, err := alloc.ParseConfig("page_mapped:true,page_regime:fine") // sizeShare bounds the fine regime's chunks
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	chunk := func(size uint64) uint64 {
		t.Helper()
		before := a.Stats()
		p, err := a.Malloc(size, 0)
		if err != nil {
			t.Fatal(err)
		}
		after := a.Stats()
		n := after.NumDeviceAlloc - before.NumDeviceAlloc
		if n == 0 {
			t.Fatalf("%d MiB: no chunk created", size>>20)
		}
		_ = p
		return uint64(after.ReservedBytes.LargePool.Current-before.ReservedBytes.LargePool.Current) / uint64(n)
	}
	if c := chunk(8 << 20); c != 2<<20 {
		t.Errorf("first request of a job: chunks of %d KiB, want 2048 (one page)", c>>10)
	}
	chunk(3 << 30) // the job now holds 3 GiB: 3 GiB/256 = 12 MiB
	if c := chunk(48 << 20); c != 12<<20 {
		t.Errorf("after 3 GiB: chunks of %d KiB, want 12288", c>>10)
	}
	chunk(8 << 30) // 11 GiB: past 256 × 20 MiB
	if c := chunk(100 << 20); c != 20<<20 {
		t.Errorf("after 11 GiB: chunks of %d KiB, want 20480", c>>10)
	}
}
