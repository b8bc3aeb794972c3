package alloc_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

var paged = alloc.Config{PageMapped: true}

// pagedFine runs the fine regime's growth and moves without a cap.
var pagedFine = alloc.Config{PageMapped: true, PageFine: true}

// pagedAtMove is c with deferred unmaps off (page_defer_unmap:false).
func pagedAtMove(c alloc.Config) alloc.Config {
	c.PageUnmapAtMove = true
	return c
}

// fill writes a pattern derived from seed over the whole of [p, p+n).
func fill(t testing.TB, d alloc.Device, p, n uint64, seed byte) {
	t.Helper()
	if err := d.CopyHtoD(p, pattern(n, seed)); err != nil {
		t.Fatalf("writing %#x+%d: %v", p, n, err)
	}
}

func pattern(n uint64, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// same checks that [p, p+n) still holds the pattern of seed.
func same(t testing.TB, d alloc.Device, p, n uint64, seed byte) {
	t.Helper()
	got := make([]byte, n)
	if err := d.CopyDtoH(got, p); err != nil {
		t.Fatalf("reading %#x+%d: %v", p, n, err)
	}
	if !bytes.Equal(got, pattern(n, seed)) {
		t.Fatalf("contents of %#x+%d changed", p, n)
	}
}

func TestPagedNeedsVirtualMemory(t *testing.T) {
	type plain struct{ alloc.Device } // hides the VirtualMemory methods
	_, err := alloc.New(plain{newDev(t, giB)}, paged)
	if err == nil || !strings.Contains(err.Error(), "VirtualMemory") {
		t.Fatalf("New on a device without VirtualMemory: %v", err)
	}
}

// Freed pages stay mapped and serve the next request of any size that
// fits them without a device call.
func TestPagedCachedReuse(t *testing.T) {
	a, d := newAlloc(t, giB, pagedFine)
	var ps []uint64
	for range 8 {
		ps = append(ps, mustMalloc(t, a, 16*miB, 0))
	}
	for _, p := range ps {
		mustFree(t, a, p)
	}
	before := d.Calls()
	for range 4 {
		mustMalloc(t, a, 32*miB, 0)
	}
	if after := d.Calls(); after.Allocation() != before.Allocation() {
		t.Errorf("4×32 MiB after 8×16 MiB freed: %d device calls, want none", after.Allocation()-before.Allocation())
	}
	if r := a.Stats().ReservedBytes.All.Current; r != 128*miB {
		t.Errorf("reserved %d MiB, want 128", r/miB)
	}
}

// A request that fits no free range is mapped from idle chunks taken from
// elsewhere, not from new physical memory, and the live blocks keep their
// contents. Blocks of 20 MiB each fill one chunk of their own.
func TestPagedRemapIdlePages(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	a, d := newAlloc(t, giB, paged)
	var ps [4]uint64
	for i := range ps {
		ps[i] = mustMalloc(t, a, 20*miB, 0)
		fill(t, d, ps[i], 20*miB, byte(i))
	}
	if c := d.Calls(); c.MemCreate != 4 || c.MemMap != 4 || c.MemSetAccess != 4 {
		t.Errorf("4 × 20 MiB: %d MemCreate, %d MemMap, %d MemSetAccess; want 4 of each", c.MemCreate, c.MemMap, c.MemSetAccess)
	}
	mustFree(t, a, ps[0])
	mustFree(t, a, ps[2])
	st0, c0 := a.Stats(), d.Calls()
	p := mustMalloc(t, a, 40*miB, 0) // two 20 MiB holes, none fits
	check(t, a)
	st1, c1 := a.Stats(), d.Calls()
	if c1.MemCreate != c0.MemCreate {
		t.Errorf("%d chunks created, want 0 (two idle chunks were cached)", c1.MemCreate-c0.MemCreate)
	}
	if got := c1.MemMap - c0.MemMap; got != 2 {
		t.Errorf("%d MemMap calls, want 2 (one per chunk moved)", got)
	}
	if got := c1.MemUnmap - c0.MemUnmap; got != 2 {
		t.Errorf("%d MemUnmap calls, want 2", got)
	}
	if got := c1.MemSetAccess - c0.MemSetAccess; got != 1 {
		t.Errorf("%d MemSetAccess calls, want 1 for the run", got)
	}
	if st1.ReservedBytes.All.Current != st0.ReservedBytes.All.Current {
		t.Errorf("reserved went from %d to %d", st0.ReservedBytes.All.Current, st1.ReservedBytes.All.Current)
	}
	if got, want := st1.NumMemMap-st0.NumMemMap, int64(2); got != want {
		t.Errorf("num_mem_map grew by %d, want %d", got, want)
	}
	if m := d.Stats().MappedBytes; m != uint64(st1.ReservedBytes.All.Current) {
		t.Errorf("device maps %d bytes, allocator reserves %d", m, st1.ReservedBytes.All.Current)
	}
	fill(t, d, p, 40*miB, 9)
	same(t, d, ps[1], 20*miB, 1)
	same(t, d, ps[3], 20*miB, 3)
	same(t, d, p, 40*miB, 9)
}

// Physical memory is created only for what idle chunks cannot cover.
func TestPagedCreatesOnlyTheShortfall(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	a, d := newAlloc(t, giB, pagedFine)
	x := mustMalloc(t, a, 20*miB, 0)
	y := mustMalloc(t, a, 20*miB, 0)
	mustFree(t, a, x) // one idle chunk of 20 MiB
	c0 := d.Calls()
	mustMalloc(t, a, 50*miB, 0)
	c1 := d.Calls()
	if got := c1.MemCreate - c0.MemCreate; got != 2 {
		t.Errorf("%d MemCreate calls for 50 MiB with 20 MiB idle, want 2 (20 + 10 MiB)", got)
	}
	if r := a.Stats().ReservedBytes.All.Current; r != 70*miB {
		t.Errorf("reserved %d MiB, want 70 (40 + the 30 MiB shortfall)", r/miB)
	}
	mustFree(t, a, y)
}

// Growth creates what is missing in chunks of at most 20 MiB, and grows
// ahead to 20 MiB once the large pool holds 64 × that; the cap limits it.
func TestPagedGrowthChunks(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	t.Run("a large request", func(t *testing.T) {
		a, d := newAlloc(t, 4*giB, pagedFine)
		mustMalloc(t, a, 1280*miB, 0)
		if c := d.Calls(); c.MemCreate != 64 || c.MemMap != 64 || c.MemSetAccess != 1 {
			t.Errorf("1280 MiB: %d MemCreate, %d MemMap, %d MemSetAccess; want 64, 64, 1", c.MemCreate, c.MemMap, c.MemSetAccess)
		}
	})
	t.Run("ahead", func(t *testing.T) {
		a, d := newAlloc(t, 4*giB, pagedFine)
		mustMalloc(t, a, 1280*miB, 0)
		for i := range 5 { // 5 × 4 MiB fit one 20 MiB chunk
			mustMalloc(t, a, 4*miB, 0)
			if c := d.Calls(); c.MemCreate != 65 || c.MemSetAccess != 2 {
				t.Fatalf("after %d × 4 MiB: %d MemCreate, %d MemSetAccess; want 65 and 2", i+1, c.MemCreate, c.MemSetAccess)
			}
		}
		mustMalloc(t, a, 4*miB, 0)
		if c := d.Calls(); c.MemCreate != 66 {
			t.Errorf("6 × 4 MiB: %d MemCreate, want 66", c.MemCreate)
		}
		if r := a.Stats().ReservedBytes.All.Current; r != 1320*miB {
			t.Errorf("reserved %d MiB, want 1320", r/miB)
		}
	})
	t.Run("small job", func(t *testing.T) {
		a, _ := newAlloc(t, giB, pagedFine)
		mustMalloc(t, a, 4*miB, 0)
		mustMalloc(t, a, 6*miB, 0)
		if r := a.Stats().ReservedBytes.All.Current; r != 10*miB {
			t.Errorf("reserved %d MiB for 4 + 6 MiB, want 10", r/miB)
		}
	})
	t.Run("cap", func(t *testing.T) {
		cfg := pagedFine
		cfg.MaxBytes = 1290 * miB
		a, _ := newAlloc(t, 4*giB, cfg)
		mustMalloc(t, a, 1280*miB, 0)
		mustMalloc(t, a, 4*miB, 0) // 10 MiB left under the cap: a chunk of 10 MiB, not 20
		if r := a.Stats().ReservedBytes.All.Current; r != 1290*miB {
			t.Errorf("reserved %d MiB, want 1290", r/miB)
		}
	})
}

func TestPagedSmallPoolUnchanged(t *testing.T) {
	a, d := newAlloc(t, giB, paged)
	p := mustMalloc(t, a, 4096, 0)
	if c := d.Calls(); c.Malloc != 1 || c.MemCreate != 0 {
		t.Errorf("small request: %d Malloc, %d MemCreate; want a 2 MiB segment", c.Malloc, c.MemCreate)
	}
	mustFree(t, a, p)
}

func TestPagedOutOfMemoryAtCap(t *testing.T) {
	cfg := paged
	cfg.MaxBytes = 64 * miB
	a, d := newAlloc(t, giB, cfg)
	p := []uint64{mustMalloc(t, a, 20*miB, 0), mustMalloc(t, a, 20*miB, 0), mustMalloc(t, a, 20*miB, 0)}
	mustFree(t, a, p[1])
	q := mustMalloc(t, a, 24*miB, 0) // one idle chunk of 20 MiB moved, 4 MiB created: 64 MiB
	if r := a.Stats().ReservedBytes.All.Current; r != 64*miB {
		t.Fatalf("reserved %d MiB, want 64", r/miB)
	}
	_, err := a.Malloc(4*miB, 0)
	var oom *alloc.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("Malloc past the cap: %v", err)
	}
	if !oom.PageMapped || !strings.Contains(err.Error(), "Page-mapped mode") || strings.Contains(err.Error(), "max_split_size_mb") {
		t.Errorf("OOM message does not explain the page-mapped mode: %v", err)
	}
	if s := a.Stats(); s.NumOOMs != 1 || s.NumAllocRetries != 1 {
		t.Errorf("num_ooms %d, num_alloc_retries %d; want 1, 1", s.NumOOMs, s.NumAllocRetries)
	}
	if d.Stats().PhysBytes > 64*miB {
		t.Errorf("device holds %d bytes of physical memory past the cap", d.Stats().PhysBytes)
	}
	for _, x := range []uint64{p[0], p[2], q} {
		mustFree(t, a, x)
	}
	mustMalloc(t, a, 60*miB, 0) // everything is idle now: fits by remapping
}

// The device's own out-of-memory error (another process took the memory)
// takes the same release-and-retry path.
func TestPagedDeviceFull(t *testing.T) {
	a, d := newAlloc(t, 64*miB, paged)
	p := mustMalloc(t, a, 32*miB, 0)
	d.SetReservedByOthers(30 * miB)
	_, err := a.Malloc(8*miB, 0)
	if !errors.Is(err, alloc.ErrOutOfMemory) || !errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Fatalf("Malloc with the device full: %v", err)
	}
	d.SetReservedByOthers(0)
	mustMalloc(t, a, 8*miB, 0)
	mustFree(t, a, p)
}

func TestPagedEmptyCache(t *testing.T) {
	a, d := newAlloc(t, giB, paged)
	var ps []uint64
	for i := range 10 { // 24 MiB blocks (one chunk each) and small ones sharing chunks
		n := uint64(24 * miB)
		if i%2 == 1 {
			n = uint64(3+i)*miB + 512*uint64(i)
		}
		ps = append(ps, mustMalloc(t, a, n, 0))
	}
	for i, p := range ps {
		if i%3 != 0 {
			mustFree(t, a, p)
		}
	}
	if a.IdleChunkBytes() == 0 {
		t.Fatal("no idle chunk before EmptyCache")
	}
	released, err := a.EmptyCache()
	if err != nil {
		t.Fatal(err)
	}
	check(t, a)
	if n := a.IdleChunkBytes(); n != 0 {
		t.Errorf("%d bytes of idle chunks after EmptyCache", n)
	}
	s := a.Stats()
	if released == 0 || s.NumDeviceFree == 0 {
		t.Errorf("EmptyCache released %d bytes with %d MemRelease", released, s.NumDeviceFree)
	}
	if m := d.Stats().PhysBytes; m != uint64(s.ReservedBytes.All.Current) {
		t.Errorf("device holds %d physical bytes, allocator reserves %d", m, s.ReservedBytes.All.Current)
	}
	for i, p := range ps {
		if i%3 == 0 {
			mustFree(t, a, p)
		}
	}
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.ReservedBytes.All.Current != 0 || a.IdlePages() != 0 {
		t.Errorf("reserved %d, %d idle pages after freeing everything and EmptyCache", s.ReservedBytes.All.Current, a.IdlePages())
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.InUse != 0 || st.Reservations != 0 {
		t.Errorf("after Close: %d bytes in use, %d reservations", st.InUse, st.Reservations)
	}
}

// The release policy: idle pages that 16 windows did not need go back,
// in one batch; a workload that keeps returning to its peak keeps them.
func TestPagedReleasePolicy(t *testing.T) {
	defer alloc.SetSizeShare(0)() // counts 20 MiB chunks: a job this small would get small ones
	cfg := pagedFine
	cfg.PageReleaseWindow = 64
	t.Run("phase change", func(t *testing.T) {
		a, _ := newAlloc(t, giB, cfg)
		var big []uint64
		for range 20 {
			big = append(big, mustMalloc(t, a, 10*miB, 0))
		}
		for _, p := range big {
			mustFree(t, a, p)
		}
		for range 1500 { // a steady 20 MiB for 46 windows of 64 allocations, past the horizon of 16
			p := mustMalloc(t, a, 10*miB, 0)
			q := mustMalloc(t, a, 10*miB, 0)
			mustFree(t, a, p)
			mustFree(t, a, q)
		}
		s := a.Stats()
		// 20 MiB plus 3 % slack needs 11 idle pages: two 20 MiB chunks.
		if r := s.ReservedBytes.All.Current; r > 40*miB {
			t.Errorf("reserved %d MiB after the peak of 200 MiB gave way to 20 MiB, want at most 40", r/miB)
		}
		if s.NumPageReleases == 0 || s.NumPageReleases > 3 {
			t.Errorf("%d release batches, want 1 to 3", s.NumPageReleases)
		}
	})
	t.Run("periodic peak", func(t *testing.T) {
		a, d := newAlloc(t, giB, cfg)
		for range 100 { // peak of 100 MiB every 20 allocations
			var ps []uint64
			for range 10 {
				ps = append(ps, mustMalloc(t, a, 10*miB, 0))
			}
			for _, p := range ps {
				mustFree(t, a, p)
			}
			for range 10 {
				mustFree(t, a, mustMalloc(t, a, 10*miB, 0))
			}
		}
		if c := d.Calls(); c.MemRelease != 0 || c.MemCreate != 10 {
			t.Errorf("%d chunks created and %d released; want 10 (one per 10 MiB block of the first peak) and none", c.MemCreate, c.MemRelease)
		}
	})
	t.Run("off", func(t *testing.T) {
		cfg := pagedFine
		cfg.PageReleaseWindow = -1
		a, d := newAlloc(t, giB, cfg)
		for range 10000 {
			mustFree(t, a, mustMalloc(t, a, 4*miB, 0))
		}
		if c := d.Calls(); c.MemRelease != 0 {
			t.Errorf("%d pages released with the window off", c.MemRelease)
		}
	})
}

func TestPagedStreamsAndSnapshot(t *testing.T) {
	a, d := newAlloc(t, giB, paged)
	s1 := d.NewStream()
	p := mustMalloc(t, a, 12*miB, 0)
	q := mustMalloc(t, a, 12*miB, s1)
	if a.ArenaCount() != 2 {
		t.Errorf("%d arenas for two streams, want 2", a.ArenaCount())
	}
	mustFree(t, a, q) // stream 1's chunk (20 MiB) is idle now
	c0 := d.Calls()
	mustMalloc(t, a, 12*miB, 0) // no mapped fit on stream 0: takes stream 1's chunk
	if c := d.Calls(); c.MemCreate != c0.MemCreate {
		t.Errorf("%d chunks created although stream 1 had one idle", c.MemCreate-c0.MemCreate)
	}
	snap := a.Snapshot()
	var mapped uint64
	for _, seg := range snap.Segments {
		if !seg.PageMapped {
			t.Errorf("segment %#x is not page-mapped", seg.Address)
		}
		mapped += seg.TotalSize
		for _, b := range seg.Blocks {
			if b.Size > seg.TotalSize {
				t.Errorf("snapshot shows a block of %d bytes in a segment of %d mapped", b.Size, seg.TotalSize)
			}
		}
	}
	if want := uint64(a.Stats().ReservedBytes.All.Current); mapped != want {
		t.Errorf("snapshot segments hold %d bytes, reserved is %d", mapped, want)
	}
	if s := a.Summary(); !strings.Contains(s, "GPU reserved memory") {
		t.Errorf("summary:\n%s", s)
	}
	mustFree(t, a, p)
}

// Faults in the middle of the page work leave the allocator consistent
// and lose no live data. The request moves one idle chunk and creates
// one: MemUnmap, MemCreate, MemMap (moved), MemMap (new), MemSetAccess.
func TestPagedDeviceFaults(t *testing.T) {
	for _, tc := range []struct {
		kind    sim.Kind
		nth     uint64
		stream  alloc.Stream
		wantErr bool // false: an out-of-memory fault, recovered by the retry
	}{
		{sim.KindMemCreate, 1, 0, false},
		{sim.KindMemMap, 1, 0, true}, // the moved chunk
		{sim.KindMemMap, 2, 0, true}, // the chunk just created
		{sim.KindMemSetAccess, 1, 0, true},
		{sim.KindMemUnmap, 1, 0, true},
		{sim.KindAddressReserve, 1, 1, true},
	} {
		t.Run(fmt.Sprintf("%v#%d", tc.kind, tc.nth), func(t *testing.T) {
			a, d := newAlloc(t, giB, paged)
			x := mustMalloc(t, a, 20*miB, 0)
			y := mustMalloc(t, a, 20*miB, 0)
			fill(t, d, y, 20*miB, 5)
			mustFree(t, a, x) // one idle chunk of 20 MiB; 36 MiB needs 16 more
			remove := d.FailNth(tc.kind, tc.nth)
			p, err := a.Malloc(36*miB, tc.stream)
			remove()
			check(t, a)
			if (err != nil) != tc.wantErr {
				t.Errorf("Malloc with a failing %v: %v", tc.kind, err)
			}
			if err == nil {
				mustFree(t, a, p)
			}
			same(t, d, y, 20*miB, 5)
			z := mustMalloc(t, a, 36*miB, tc.stream)
			fill(t, d, z, 36*miB, 6)
			same(t, d, z, 36*miB, 6)
			same(t, d, y, 20*miB, 5)
			mustFree(t, a, y)
			mustFree(t, a, z)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if st := d.Stats(); st.InUse != 0 {
				t.Errorf("%d bytes in use after Close", st.InUse)
			}
		})
	}
}

// TestPagedPropertyRandomOps is TestPropertyRandomOps in page-mapped mode,
// with tags at both ends of every allocation (so remapping a page that a
// live block uses would be caught), EmptyCache leaving no idle chunk, the
// device's view (mapped and physical bytes) matching the statistics, and
// the driver's rules for virtual memory enforced (wholeVMM): a physical
// allocation is mapped whole, and only whole mappings are unmapped.
func TestPagedPropertyRandomOps(t *testing.T) {
	ghostsSeen := 0
	defer func() {
		if !t.Failed() && ghostsSeen == 0 {
			t.Error("no step saw a moved chunk's old mapping: deferred unmaps went untested")
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		cfg := alloc.Config{PageMapped: true}
		if rapid.Bool().Draw(t, "cap") {
			cfg.MaxBytes = uint64(rapid.IntRange(32, 256).Draw(t, "capMiB")) << 20
		}
		if rapid.Bool().Draw(t, "window") {
			cfg.PageReleaseWindow = rapid.IntRange(1, 64).Draw(t, "windowAllocs")
			cfg.PageReleaseSlack = rapid.Float64Range(0.001, 0.5).Draw(t, "slack")
		}
		if rapid.Bool().Draw(t, "divisions") {
			for i := range cfg.RoundupPower2Divisions {
				cfg.RoundupPower2Divisions[i] = 4
			}
		}
		cfg.PageFine = rapid.Bool().Draw(t, "fine")
		cfg.PageUnmapAtMove = rapid.Bool().Draw(t, "unmapAtMove")
		cfg.PoisonOnFree = rapid.IntRange(0, 3).Draw(t, "poison") == 0
		gran := uint64(2 * miB)
		if rapid.Bool().Draw(t, "smallPages") {
			gran = 64 << 10
		}
		dev := sim.MustNew(sim.Config{Capacity: 256 << 20, HoldEvents: true, Granularity: gran})
		if rapid.Bool().Draw(t, "smallChunks") {
			defer alloc.SetGrowChunkBytes(gran)()
		}
		wv := newWholeVMM(dev)
		var d alloc.Device = wv
		if rapid.Bool().Draw(t, "streamWaits") {
			// As the CUDA backend: markers, waits before unmapping, and
			// moves that leave ghosts.
			d = streamWaitVMM{wv}
		}
		a, err := alloc.New(d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{a: a, dev: dev, live: map[uint64]liveAlloc{}}
		streams := []alloc.Stream{0, 1, 2}
		if rapid.Bool().Draw(t, "oneStream") {
			streams = streams[:1] // moves within a stream: ghosts
		}
		verify := func(t *rapid.T) {
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
			large, ghosts := uint64(s.ReservedBytes.LargePool.Current), a.GhostBytes()
			if ghosts > 0 {
				ghostsSeen++
			}
			if ds.MappedBytes != large+ghosts || ds.PhysBytes != large {
				t.Fatalf("large pool reserves %d and has %d bytes of ghosts, device maps %d and holds %d physical", large, ghosts, ds.MappedBytes, ds.PhysBytes)
			}
		}
		t.Repeat(m.withAllocFree(streams, map[string]func(*rapid.T){
			"recordStream": func(t *rapid.T) {
				p, _, ok := m.pick(t)
				if !ok {
					t.Skip("nothing live")
				}
				if err := a.RecordStream(p, rapid.SampledFrom(streams).Draw(t, "use")); err != nil {
					t.Fatal(err)
				}
			},
			"completeEvents": func(t *rapid.T) {
				dev.CompleteEvents()
			},
			"emptyCache": func(t *rapid.T) {
				if _, err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
				if n := a.IdleChunkBytes(); n != 0 {
					t.Fatalf("%d bytes of idle chunks left after EmptyCache", n)
				}
			},
			"failingCreate": func(t *rapid.T) {
				remove := dev.FailNth(sim.KindMemCreate, uint64(rapid.IntRange(1, 3).Draw(t, "nth")))
				defer remove()
				if err := m.alloc(rapid.Uint64Range(1<<20+1, 64<<20).Draw(t, "size"), rapid.SampledFrom(streams).Draw(t, "stream")); err != nil {
					t.Fatal(err)
				}
			},
			"": verify,
		}))
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

// wholeVMM holds the simulated device to the CUDA driver's rules, which
// the simulator is laxer about: cuMemMap maps all of a physical allocation
// (the driver refuses part of one, from its start or from an offset), and
// cuMemUnmap cannot unmap part of a range that one cuMemMap mapped. Here
// every MemMap must map all of its handle and every MemUnmap must cover
// whole mappings; the first breach is kept.
type wholeVMM struct {
	syncDev
	mu     sync.Mutex
	size   map[alloc.PhysHandle]uint64 // created, not released
	maps   map[uint64]uint64           // mapped address → size
	breach error
}

// streamWaitVMM is wholeVMM with a stream wait (see waitingSim).
type streamWaitVMM struct{ *wholeVMM }

func (w streamWaitVMM) SynchronizeStream(s alloc.Stream) error {
	w.CompleteStream(s)
	return nil
}

func newWholeVMM(d *sim.Device) *wholeVMM {
	return &wholeVMM{syncDev: syncDev{d}, size: map[alloc.PhysHandle]uint64{}, maps: map[uint64]uint64{}}
}

func (w *wholeVMM) fail(format string, args ...any) {
	if w.breach == nil {
		w.breach = fmt.Errorf(format, args...)
	}
}

func (w *wholeVMM) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.breach
}

func (w *wholeVMM) MemCreate(n uint64) (alloc.PhysHandle, error) {
	h, err := w.syncDev.MemCreate(n)
	if err == nil {
		w.mu.Lock()
		w.size[h] = n
		w.mu.Unlock()
	}
	return h, err
}

func (w *wholeVMM) MemRelease(h alloc.PhysHandle) error {
	err := w.syncDev.MemRelease(h)
	if err == nil {
		w.mu.Lock()
		delete(w.size, h)
		w.mu.Unlock()
	}
	return err
}

func (w *wholeVMM) MemMap(addr, n uint64, h alloc.PhysHandle) error {
	err := w.syncDev.MemMap(addr, n, h)
	if err == nil {
		w.mu.Lock()
		if w.size[h] != n {
			w.fail("MemMap of %d bytes of a handle of %d", n, w.size[h])
		}
		w.maps[addr] = n
		w.mu.Unlock()
	}
	return err
}

func (w *wholeVMM) MemUnmap(addr, n uint64) error {
	err := w.syncDev.MemUnmap(addr, n)
	if err == nil {
		w.mu.Lock()
		for at := addr; at < addr+n; {
			m, ok := w.maps[at]
			if !ok || at+m > addr+n {
				w.fail("MemUnmap of %#x+%d splits a mapping at %#x", addr, n, at)
				break
			}
			delete(w.maps, at)
			at += m
		}
		w.mu.Unlock()
	}
	return err
}

// Many goroutines, each on its own stream, allocate, write, check and free
// large blocks while the pages move between them.
func TestPagedConcurrent(t *testing.T) {
	cfg := paged
	cfg.MaxBytes = 256 * miB
	cfg.PageReleaseWindow = 32
	a, d := newAlloc(t, giB, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := alloc.Stream(g)
			for i := range 60 {
				n := uint64(1+(i*7+g*3)%20) * miB / 2
				p, err := a.Malloc(n, s)
				if errors.Is(err, alloc.ErrOutOfMemory) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				want := pattern(4096, byte(g*31+i))
				if err := d.CopyHtoD(p+n-4096, want); err != nil {
					errs <- err
					return
				}
				got := make([]byte, 4096)
				if err := d.CopyDtoH(got, p+n-4096); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d: block %#x overwritten", g, p)
					return
				}
				if err := a.Free(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check(t, a)
}

func TestParsePagedConfig(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want alloc.Config
		err  string
	}{
		{in: "page_mapped:true", want: alloc.Config{PageMapped: true}},
		{in: "page_mapped:true,page_release_slack:0.1,page_release_window:100", want: alloc.Config{PageMapped: true, PageReleaseSlack: 0.1, PageReleaseWindow: 100}},
		{in: "page_mapped:true,page_release_window:off", want: alloc.Config{PageMapped: true, PageReleaseWindow: -1}},
		{in: "page_mapped:true,page_regime:fine", want: alloc.Config{PageMapped: true, PageFine: true}},
		{in: "page_mapped:true,page_regime:AUTO", want: alloc.Config{PageMapped: true}},
		{in: "page_mapped:maybe", err: "page_mapped"},
		{in: "page_mapped:true,page_regime:tight", err: `page_regime: bad value "tight": want auto or fine`},
		{in: "page_regime:fine", err: "page_regime:fine needs page_mapped:true"},
		{in: "page_release_window:0", err: "page_release_window"},
		{in: "page_release_slack:2", err: "page_release_slack"},
		{in: "page_mapped:true,max_split_size_mb:64", err: "max_split_size_mb"},
		{in: "page_mapped:true,prealloc_bytes:1GiB", err: "prealloc_bytes"},
	} {
		got, err := alloc.ParseConfig(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseConfig(%q) = %v, want an error naming %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if back, err := alloc.ParseConfig(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q through %q: %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

func Example_pageMapped() {
	dev := sim.MustNew(sim.Config{Capacity: 1 << 30})
	cfg, _ := alloc.ParseConfig("page_mapped:true")
	a, _ := alloc.New(dev, cfg)
	var ps []uint64
	for range 4 { // 20 MiB each, one chunk each: no cap, so large chunks
		p, _ := a.Malloc(20<<20, 0)
		ps = append(ps, p)
	}
	a.Free(ps[0])
	a.Free(ps[2])
	// Two 20 MiB holes, neither fits 40 MiB: their physical memory moves.
	p, _ := a.Malloc(40<<20, 0)
	s := a.Stats()
	fmt.Printf("reserved %d MiB, chunks created %d, mapped %d, unmapped %d\n",
		s.ReservedBytes.All.Current>>20, s.NumDeviceAlloc, s.NumMemMap, s.NumMemUnmap)
	a.Free(p)
	// Output: reserved 80 MiB, chunks created 4, mapped 6, unmapped 2
}

// waitingSim is the simulated device with a stream wait, as the CUDA
// backend has: the page-mapped mode then waits for a free block's stream
// before it unmaps the block's pages, unless a completed marker says that
// the stream is past the free.
type waitingSim struct {
	*sim.Device
	waits int
}

func (w *waitingSim) SynchronizeStream(s alloc.Stream) error {
	w.waits++
	w.CompleteStream(s)
	return nil
}

// With deferred unmaps off (page_defer_unmap:false), moving idle chunks
// waits for their stream only when no completed marker was recorded after
// they were freed, and a growth well under the large pool's active peak
// creates memory rather than wait. With them on (the default), a move
// within one stream never waits, and then the fine regime moves rather
// than create.
func TestPagedMovesSettledChunksWithoutWaiting(t *testing.T) {
	defer alloc.SetSizeShare(0)() // 20 MiB chunks, one per block
	cases := []struct {
		name      string
		run       func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(i int))
		waits     int
		createMiB uint64
	}{
		{"no marker", func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(int)) {
			free(0)
			free(2)
		}, 1, 0},
		{"a completed marker after the frees", func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(int)) {
			free(0)
			free(2)
			a.RecordMarkers()
			d.CompleteEvents()
		}, 0, 0},
		{"a marker still pending", func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(int)) {
			free(0)
			free(2)
			a.RecordMarkers()
		}, 1, 0},
		{"a completed marker between the frees", func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(int)) {
			free(0)
			a.RecordMarkers()
			free(2)
			d.CompleteEvents()
		}, 1, 0},
		{"well under the peak", func(t *testing.T, a *alloc.Allocator, d *waitingSim, free func(int)) {
			big := mustMalloc(t, a, 2*giB, 0)
			mustFree(t, a, big)
			if _, err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
			free(0)
			free(2)
		}, 0, 40},
	}
	for _, cfg := range []alloc.Config{paged, pagedFine, pagedAtMove(paged), pagedAtMove(pagedFine)} {
		for _, c := range cases {
			waits, createMiB := c.waits, c.createMiB
			if !cfg.PageUnmapAtMove {
				waits = 0
				if cfg.PageFine {
					createMiB = 0
				}
			}
			t.Run(cfg.String()+"/"+c.name, func(t *testing.T) {
				d := &waitingSim{Device: sim.MustNew(sim.Config{Capacity: 4 * giB, HoldEvents: true})}
				a, err := alloc.New(d, cfg)
				if err != nil {
					t.Fatal(err)
				}
				var ps [4]uint64
				for i := range ps {
					ps[i] = mustMalloc(t, a, 20*miB, 0)
					fill(t, d, ps[i], 20*miB, byte(i))
				}
				c.run(t, a, d, func(i int) { mustFree(t, a, ps[i]) })
				w0, r0 := d.waits, a.Stats().ReservedBytes.All.Current
				p := mustMalloc(t, a, 40*miB, 0) // two 20 MiB holes, none fits
				check(t, a)
				if got := d.waits - w0; got != waits {
					t.Errorf("%d stream waits, want %d", got, waits)
				}
				if got := a.Stats().NumStreamSyncs; got != int64(d.waits) {
					t.Errorf("num_stream_syncs %d, the device saw %d waits", got, d.waits)
				}
				if got := uint64(a.Stats().ReservedBytes.All.Current-r0) / miB; got != createMiB {
					t.Errorf("%d MiB created, want %d", got, createMiB)
				}
				fill(t, d, p, 40*miB, 9)
				same(t, d, ps[1], 20*miB, 1)
				same(t, d, ps[3], 20*miB, 3)
				for _, q := range []uint64{p, ps[1], ps[3]} {
					mustFree(t, a, q)
				}
				d.CompleteEvents()
				if err := a.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if n := d.LiveEvents(); n != 0 {
					t.Errorf("%d events left after Close", n)
				}
			})
		}
	}
}

// A release window releases idle chunks whose stream may still use them
// only in the coarse regime, after waiting for the stream; the fine
// regime keeps them until a marker settles them.
func TestPagedReleaseWindowAndUnsettledChunks(t *testing.T) {
	defer alloc.SetSizeShare(0)() // 20 MiB chunks, one per block
	for _, tc := range []struct {
		cfg           alloc.Config
		wantReleases  bool
		wantWaitsSome bool
	}{
		{paged, true, true},
		{pagedFine, false, false},
	} {
		t.Run(tc.cfg.String(), func(t *testing.T) {
			cfg := tc.cfg
			cfg.PageReleaseWindow = 8
			d := &waitingSim{Device: sim.MustNew(sim.Config{Capacity: 4 * giB, HoldEvents: true})}
			a, err := alloc.New(d, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ps []uint64
			for range 10 {
				ps = append(ps, mustMalloc(t, a, 20*miB, 0))
			}
			for _, p := range ps {
				mustFree(t, a, p) // idle, and no marker will ever complete
			}
			for range 400 { // 50 windows of small allocations, past the horizon
				mustFree(t, a, mustMalloc(t, a, 4096, 0))
			}
			c := d.Calls()
			if got := c.MemRelease > 0; got != tc.wantReleases {
				t.Errorf("%d chunks released, want releases: %v", c.MemRelease, tc.wantReleases)
			}
			if got := d.waits > 0; got != tc.wantWaitsSome {
				t.Errorf("%d stream waits, want waits: %v", d.waits, tc.wantWaitsSome)
			}
			d.CompleteEvents()
			if err := a.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// A move within one stream maps the chunk at its new address and keeps the
// old mapping until a marker after the free completes (no wait, the
// reserve unchanged); a move to another stream waits; Close waits for the
// old mappings still pending and unmaps them.
func TestPagedMoveLeavesGhost(t *testing.T) {
	defer alloc.SetSizeShare(0)() // 20 MiB chunks, one per block
	d := &waitingSim{Device: sim.MustNew(sim.Config{Capacity: 4 * giB, HoldEvents: true})}
	a, err := alloc.New(d, pagedFine)
	if err != nil {
		t.Fatal(err)
	}
	var ps [6]uint64
	for i := range ps {
		ps[i] = mustMalloc(t, a, 20*miB, 0)
		fill(t, d, ps[i], 20*miB, byte(i))
	}
	mustFree(t, a, ps[0])
	mustFree(t, a, ps[2])
	r0, u0 := a.Stats().ReservedBytes.All.Current, a.Stats().NumMemUnmap
	p := mustMalloc(t, a, 40*miB, 0) // two 20 MiB holes of stream 0 move, unsettled
	check(t, a)
	s := a.Stats()
	if d.waits != 0 || s.NumMemUnmap != u0 || s.ReservedBytes.All.Current != r0 {
		t.Errorf("same-stream move: %d waits, %d unmaps, reserve %+d; want 0, 0, 0", d.waits, s.NumMemUnmap-u0, s.ReservedBytes.All.Current-r0)
	}
	if g := a.GhostBytes(); g != 40*miB {
		t.Errorf("%d MiB of old mappings, want 40", g/miB)
	}
	fill(t, d, p, 40*miB, 9)
	for _, i := range []int{1, 3, 4, 5} {
		same(t, d, ps[i], 20*miB, byte(i))
	}
	if snapHasRetiring(a.Snapshot()) {
		t.Error("the snapshot shows the old mappings")
	}

	// The marker recorded after the move completes: the next growth
	// unmaps the old mappings first.
	d.CompleteEvents()
	mustFree(t, a, ps[4])
	q := mustMalloc(t, a, 30*miB, 0)
	check(t, a)
	if g := a.GhostBytes(); g != 20*miB {
		t.Errorf("after the marker: %d MiB of old mappings, want 20 (ps[4]'s, just moved)", g/miB)
	}
	if d.waits != 0 {
		t.Errorf("%d waits, want 0", d.waits)
	}

	// A move to another stream waits for the chunk's stream.
	mustFree(t, a, ps[5])
	x := mustMalloc(t, a, 30*miB, 1)
	check(t, a)
	if d.waits != 1 {
		t.Errorf("cross-stream move: %d waits, want 1", d.waits)
	}
	for _, v := range []uint64{p, q, x, ps[1], ps[3]} {
		mustFree(t, a, v)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := d.Stats(); st.InUse != 0 || st.MappedBytes != 0 {
		t.Errorf("after Close: %d bytes in use, %d mapped", st.InUse, st.MappedBytes)
	}
}

func snapHasRetiring(s alloc.Snapshot) bool {
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State == "retiring" {
				return true
			}
		}
	}
	return false
}
