//go:build gpu

package alloc_test

// GPU tests of the allocator on the real CUDA backend (package
// alloc/cudadev), device 0. They run on a GPU host:
//
//	go test -c -tags gpu -o .gpu/alloc.test ./alloc     # here
//	./.gpu/alloc.test -test.v -test.run GPU            # there
//
// or through scripts/gpu/alloc.sh, which runs them all with the benchmarks
// and keeps the logs. docs/alloc.md has the results.
//
// With VRAM_GPU_TEST_SIM=1 the same tests run on a 16 GiB simulated device
// instead (alloc/sim), which checks the tests themselves on a machine
// without a GPU before device time is spent on them. Benchmarks and tests
// that call the driver directly skip in that mode.
//
// The files:
//
//	gpu_test.go        device setup, data round trips, many goroutines
//	oom_gpu_test.go    out of memory at the device's capacity and at a cap
//	soak_gpu_test.go   a million random operations, then a leak check
//	bench_gpu_test.go  benchmarks and per-operation latency against the driver
//	paged_gpu_test.go  the page-mapped mode's stream markers

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/cudadev"
	"github.com/vramhq/vram/alloc/sim"
)

// gpuSimCapacity is the size of the simulated device of the dry-run mode.
const gpuSimCapacity = 16 << 30

// gpuDev is the device under test: the real backend, or the simulated one
// in the dry-run mode.
type gpuDev struct {
	alloc.Device
	cu  *cudadev.Device // nil in the dry-run mode
	sim *sim.Device     // nil on a real GPU
}

// newStream returns a blocking stream on the device.
func (d *gpuDev) newStream(t testing.TB) alloc.Stream {
	t.Helper()
	if d.sim != nil {
		return d.sim.NewStream()
	}
	s, err := d.cu.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	t.Cleanup(func() {
		if err := d.cu.DestroyStream(s); err != nil {
			t.Errorf("DestroyStream: %v", err)
		}
	})
	return s
}

var (
	gpuOnce   sync.Once
	gpuShared *gpuDev
	gpuErr    error
)

// openGPU returns the device shared by every test of the binary. The
// primary context stays retained until the process exits, so its creation
// (tens of milliseconds) is paid once and the driver's own state is the
// same for every test.
func openGPU(t testing.TB) *gpuDev {
	t.Helper()
	gpuOnce.Do(func() {
		if os.Getenv("VRAM_GPU_TEST_SIM") == "1" {
			d, err := sim.New(sim.Config{Capacity: gpuSimCapacity})
			gpuShared, gpuErr = &gpuDev{Device: d, sim: d}, err
			return
		}
		d, err := cudadev.Open(0)
		if err != nil {
			gpuErr = err
			return
		}
		gpuShared = &gpuDev{Device: d, cu: d}
	})
	if gpuErr != nil {
		t.Fatalf("opening GPU 0: %v", gpuErr)
	}
	return gpuShared
}

// needDriver skips tests that call the CUDA driver directly.
func needDriver(t testing.TB, d *gpuDev) {
	t.Helper()
	if d.cu == nil {
		t.Skip("calls the CUDA driver directly; not in the dry-run mode")
	}
}

// newGPUAlloc returns an allocator over d. When the test ends it checks the
// invariants and closes the allocator; allocations a failed test left live
// are freed first so that the device memory goes back before the next test.
func newGPUAlloc(t testing.TB, d *gpuDev, cfg alloc.Config) *alloc.Allocator {
	t.Helper()
	a, err := alloc.New(d, cfg)
	if err != nil {
		t.Fatalf("alloc.New(%v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := a.CheckInvariants(); err != nil {
			t.Errorf("invariants at the end: %v", err)
		}
		if n := a.Stats().Allocation.All.Current; n != 0 {
			t.Errorf("%d allocations still live at the end; freeing them", n)
			for _, seg := range a.Snapshot().Segments {
				for _, b := range seg.Blocks {
					if b.State == "active_allocated" {
						_ = a.Free(b.Address)
					}
				}
			}
		}
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// gpuFill writes into b bytes that depend on seed and on the position,
// so a block that received another block's bytes, or its own bytes shifted,
// is caught.
func gpuFill(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i], b[i+1], b[i+2], b[i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56)
	}
	for ; i < len(b); i++ {
		b[i] = byte(x >> (8 * (i & 7)))
	}
}

func gpuPattern(n uint64, seed uint64) []byte {
	b := make([]byte, n)
	gpuFill(b, seed)
	return b
}

// gpuDiff describes the first difference between got and want, or "".
func gpuDiff(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	i := 0
	for got[i] == want[i] {
		i++
	}
	j := len(got) - 1
	for got[j] == want[j] {
		j--
	}
	return fmt.Sprintf("bytes [%d, %d] differ (first: %#02x, want %#02x)", i, j, got[i], want[i])
}

// gpuLogUniform returns a size in [lo, hi) whose logarithm is uniform, so
// small sizes are as frequent per octave as large ones.
func gpuLogUniform(r *rand.Rand, lo, hi uint64) uint64 {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	n := uint64(math.Exp(l + r.Float64()*(h-l)))
	return min(max(n, lo), hi-1)
}

// gpuTracked is a Buffer and what the test expects it to hold.
type gpuTracked struct {
	buf  *alloc.Buffer
	want []byte
}

func (tb *gpuTracked) verify(t *testing.T, what string) {
	t.Helper()
	got := make([]byte, len(tb.want))
	if err := tb.buf.CopyToHost(got); err != nil {
		t.Fatalf("%s: CopyToHost of %d bytes at %#x: %v", what, len(got), tb.buf.Ptr(), err)
	}
	if d := gpuDiff(got, tb.want); d != "" {
		t.Errorf("%s: %d-byte buffer at %#x: %s", what, len(got), tb.buf.Ptr(), d)
	}
}

// roundTripSizes mixes small-pool sizes (which share 2 MiB segments),
// large sizes under 10 MiB (which share 20 MiB segments) and larger ones,
// with the edges of every rounding rule.
func roundTripSizes(r *rand.Rand) []uint64 {
	sizes := []uint64{1, 511, 512, 513, 4096, 1 << 20, 1<<20 + 1, 2 << 20, 10<<20 - 1, 10 << 20, 64 << 20}
	for range 150 {
		switch k := r.IntN(100); {
		case k < 70:
			sizes = append(sizes, gpuLogUniform(r, 1, 1<<20))
		case k < 95:
			sizes = append(sizes, gpuLogUniform(r, 1<<20+1, 10<<20))
		default:
			sizes = append(sizes, gpuLogUniform(r, 10<<20, 64<<20))
		}
	}
	return sizes
}

// gpuSegments returns the address ranges of the allocator's segments and
// counts the segments of each pool that hold two or more live blocks.
func gpuSegments(a *alloc.Allocator) (segs map[uint64]uint64, sharedSmall, sharedLarge int) {
	segs = map[uint64]uint64{}
	for _, seg := range a.Snapshot().Segments {
		segs[seg.Address] = seg.TotalSize
		live := 0
		for _, b := range seg.Blocks {
			if b.State == "active_allocated" {
				live++
			}
		}
		if live >= 2 {
			if seg.SegmentType == "small" {
				sharedSmall++
			} else {
				sharedLarge++
			}
		}
	}
	return segs, sharedSmall, sharedLarge
}

// gpuInSegment reports whether p lies in one of segs, and whether it is the
// segment's first byte.
func gpuInSegment(segs map[uint64]uint64, p uint64) (inside, atStart bool) {
	for addr, size := range segs {
		if p >= addr && p < addr+size {
			return true, p == addr
		}
	}
	return false, false
}

// TestGPUDataRoundTrip writes a distinct pattern through every buffer, and
// through views, device-to-device copies and memsets, reads everything
// back, frees in random order, allocates again from the cache and checks
// again. Bytes that land in the wrong block, or a block handed out twice,
// show up as a mismatch.
func TestGPUDataRoundTrip(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{})
	r := rand.New(rand.NewPCG(7, 11))
	sizes := roundTripSizes(r)

	bufs := make([]*gpuTracked, len(sizes))
	for i, n := range sizes {
		b, err := a.Alloc(n, 0)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		bufs[i] = &gpuTracked{buf: b, want: gpuPattern(n, uint64(i)+1)}
		if err := b.CopyFromHost(bufs[i].want); err != nil {
			t.Fatalf("CopyFromHost of %d bytes: %v", n, err)
		}
	}
	segs, sharedSmall, sharedLarge := gpuSegments(a)
	st := a.Stats()
	t.Logf("%d buffers, %d segments (%d device allocations); segments with several live blocks: %d small, %d large",
		len(bufs), len(segs), st.NumDeviceAlloc, sharedSmall, sharedLarge)
	if sharedSmall == 0 || sharedLarge == 0 {
		t.Fatalf("no split segment in some pool (small %d, large %d): the test does not cover splits", sharedSmall, sharedLarge)
	}
	for i, tb := range bufs {
		tb.verify(t, fmt.Sprintf("buffer %d after CopyFromHost", i))
	}

	// Views: write the middle third of every third buffer through a Slice
	// and read it back through the view.
	for i := 0; i < len(bufs); i += 3 {
		tb := bufs[i]
		n := uint64(len(tb.want))
		if n < 3 {
			continue
		}
		off, m := n/3, n/3
		v, err := tb.buf.Slice(off, m)
		if err != nil {
			t.Fatalf("Slice(%d, %d) of %d bytes: %v", off, m, n, err)
		}
		p := gpuPattern(m, uint64(1000+i))
		if err := v.CopyFromHost(p); err != nil {
			t.Fatalf("CopyFromHost into a view: %v", err)
		}
		copy(tb.want[off:], p)
		(&gpuTracked{buf: v, want: tb.want[off : off+m]}).verify(t, fmt.Sprintf("view [%d:%d] of buffer %d", off, off+m, i))
	}

	// Device-to-device: whole buffers into larger ones, and a view of one
	// buffer into a view of another.
	for i := 1; i < len(bufs); i += 4 {
		dst, src := bufs[i], bufs[(i*7+3)%len(bufs)]
		if dst == src || len(src.want) > len(dst.want) {
			continue
		}
		if err := dst.buf.CopyFrom(src.buf); err != nil {
			t.Fatalf("CopyFrom: %v", err)
		}
		copy(dst.want, src.want)
	}
	for i := 2; i < len(bufs); i += 4 {
		dst, src := bufs[i], bufs[(i*5+1)%len(bufs)]
		m := uint64(min(len(dst.want), len(src.want))) / 2
		if dst == src || m == 0 {
			continue
		}
		sv, err := src.buf.Slice(uint64(len(src.want))-m, m)
		if err != nil {
			t.Fatal(err)
		}
		dv, err := dst.buf.Slice(1, m)
		if err != nil {
			t.Fatal(err)
		}
		if err := dv.CopyFrom(sv); err != nil {
			t.Fatalf("CopyFrom between views: %v", err)
		}
		copy(dst.want[1:], src.want[uint64(len(src.want))-m:])
	}

	// Memset whole buffers, and the tail of some through a view.
	for i := 0; i < len(bufs); i += 5 {
		v := byte(0x40 + i)
		if err := bufs[i].buf.Memset(v); err != nil {
			t.Fatalf("Memset: %v", err)
		}
		for j := range bufs[i].want {
			bufs[i].want[j] = v
		}
	}
	for i := 4; i < len(bufs); i += 10 {
		n := uint64(len(bufs[i].want))
		v, err := bufs[i].buf.Slice(n/2, n-n/2)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Memset(0xA5); err != nil {
			t.Fatalf("Memset of a view: %v", err)
		}
		for j := n / 2; j < n; j++ {
			bufs[i].want[j] = 0xA5
		}
	}
	for i, tb := range bufs {
		tb.verify(t, fmt.Sprintf("buffer %d after views, copies and memsets", i))
	}
	if t.Failed() {
		t.FailNow()
	}

	// Free in random order; a stale view must then refuse to touch memory.
	stale, err := bufs[0].buf.Slice(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range r.Perm(len(bufs)) {
		if err := bufs[i].buf.Free(); err != nil {
			t.Fatalf("Free of buffer %d: %v", i, err)
		}
		if err := a.CheckInvariants(); err != nil {
			t.Fatalf("after freeing buffer %d: %v", i, err)
		}
	}
	if err := stale.CopyFromHost([]byte{1}); !errors.Is(err, alloc.ErrFreed) {
		t.Errorf("write through a view of a freed buffer: %v, want ErrFreed", err)
	}
	if err := bufs[1].buf.Free(); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Errorf("second Free: %v, want ErrDoubleFree", err)
	}
	st = a.Stats()
	if st.AllocatedBytes.All.Current != 0 || st.Allocation.All.Current != 0 || st.RequestedBytes.All.Current != 0 {
		t.Fatalf("after freeing everything: allocated %d bytes in %d allocations, requested %d",
			st.AllocatedBytes.All.Current, st.Allocation.All.Current, st.RequestedBytes.All.Current)
	}
	firstDeviceAllocs := st.NumDeviceAlloc

	// Again, in another order, from the cache: the blocks (split ones
	// included) are reused and must hold their new contents.
	r.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
	reused, reusedInside := 0, 0
	for i, n := range sizes {
		b, err := a.Alloc(n, 0)
		if err != nil {
			t.Fatalf("second Alloc(%d): %v", n, err)
		}
		bufs[i] = &gpuTracked{buf: b, want: gpuPattern(n, uint64(5000+i))}
		if err := b.CopyFromHost(bufs[i].want); err != nil {
			t.Fatal(err)
		}
		if inside, atStart := gpuInSegment(segs, b.Ptr()); inside {
			reused++
			if !atStart {
				reusedInside++
			}
		}
	}
	st = a.Stats()
	t.Logf("second round: %d of %d buffers reuse first-round segments (%d of them not at a segment start); device allocations %d → %d",
		reused, len(sizes), reusedInside, firstDeviceAllocs, st.NumDeviceAlloc)
	if reused < len(sizes)/2 || reusedInside == 0 {
		t.Errorf("second round barely reused the cache: %d of %d (%d split blocks)", reused, len(sizes), reusedInside)
	}
	for i, tb := range bufs {
		tb.verify(t, fmt.Sprintf("buffer %d of the second round", i))
	}
	for _, i := range r.Perm(len(bufs)) {
		if err := bufs[i].buf.Free(); err != nil {
			t.Fatalf("Free: %v", err)
		}
	}
	released, err := a.EmptyCache()
	if err != nil {
		t.Fatalf("EmptyCache: %v", err)
	}
	if st := a.Stats(); st.ReservedBytes.All.Current != 0 {
		t.Errorf("after EmptyCache %d bytes still reserved", st.ReservedBytes.All.Current)
	}
	t.Logf("EmptyCache released %d bytes in %d device frees", released, a.Stats().NumDeviceFree)
}

// TestGPUConcurrent runs 32 goroutines on one allocator, each allocating,
// writing, reading back and freeing buffers of mixed sizes on its own
// stream or on the default stream. Run it with -test.cpu 1,8.
func TestGPUConcurrent(t *testing.T) {
	d := openGPU(t)
	a := newGPUAlloc(t, d, alloc.Config{})
	const goroutines = 32
	iters := 1500
	if testing.Short() {
		iters = 200
	}
	streams := []alloc.Stream{0, d.newStream(t), d.newStream(t), d.newStream(t)}
	var allocs, checks atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := churn(a, g, iters, streams[g%len(streams)], &allocs, &checks); err != nil {
				t.Errorf("goroutine %d: %v", g, err)
			}
		}()
	}
	wg.Wait()
	st := a.Stats()
	t.Logf("GOMAXPROCS-bound run: %d allocations, %d read-back checks, %d device allocations, peak reserved %d MiB",
		allocs.Load(), checks.Load(), st.NumDeviceAlloc, st.ReservedBytes.All.Peak>>20)
	for name, s := range map[string]alloc.StatSet{
		"allocation": st.Allocation, "allocated_bytes": st.AllocatedBytes,
		"active_bytes": st.ActiveBytes, "requested_bytes": st.RequestedBytes,
	} {
		if s.All.Current != 0 || s.SmallPool.Current != 0 || s.LargePool.Current != 0 {
			t.Errorf("%s current = %d (small %d, large %d), want 0", name, s.All.Current, s.SmallPool.Current, s.LargePool.Current)
		}
	}
	if st.Allocation.All.Allocated != allocs.Load() || st.Allocation.All.Freed != allocs.Load() {
		t.Errorf("allocation.all allocated %d, freed %d; the goroutines made %d",
			st.Allocation.All.Allocated, st.Allocation.All.Freed, allocs.Load())
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.ReservedBytes.All.Current != 0 {
		t.Errorf("after EmptyCache %d bytes still reserved", st.ReservedBytes.All.Current)
	}
}

// churn is one goroutine of TestGPUConcurrent.
func churn(a *alloc.Allocator, g, iters int, s alloc.Stream, allocs, checks *atomic.Int64) error {
	r := rand.New(rand.NewPCG(uint64(g), 99))
	type item struct {
		buf        *alloc.Buffer
		head, tail []byte // expected bytes at the start and at the end
	}
	var live []item
	verify := func(it item) error {
		checks.Add(1)
		got := make([]byte, len(it.head))
		if err := it.buf.CopyToHost(got); err != nil {
			return err
		}
		if d := gpuDiff(got, it.head); d != "" {
			return fmt.Errorf("%d-byte buffer at %#x, head: %s", it.buf.Len(), it.buf.Ptr(), d)
		}
		if it.tail == nil {
			return nil
		}
		v, err := it.buf.Slice(it.buf.Len()-uint64(len(it.tail)), uint64(len(it.tail)))
		if err != nil {
			return err
		}
		if err := v.CopyToHost(got[:len(it.tail)]); err != nil {
			return err
		}
		if d := gpuDiff(got[:len(it.tail)], it.tail); d != "" {
			return fmt.Errorf("%d-byte buffer at %#x, tail: %s", it.buf.Len(), it.buf.Ptr(), d)
		}
		return nil
	}
	for i := range iters {
		if len(live) < 4 || (len(live) < 64 && r.IntN(100) < 55) {
			var n uint64
			if r.IntN(100) < 80 {
				n = gpuLogUniform(r, 1, 256<<10)
			} else {
				n = gpuLogUniform(r, 256<<10, 24<<20)
			}
			b, err := a.Alloc(n, s)
			if err != nil {
				return fmt.Errorf("Alloc(%d): %w", n, err)
			}
			allocs.Add(1)
			it := item{buf: b}
			seed := uint64(g)<<32 | uint64(i)
			if n <= 64<<10 {
				it.head = gpuPattern(n, seed)
			} else {
				// Large: write 4 KiB at each end, through a view for the tail.
				it.head, it.tail = gpuPattern(4096, seed), gpuPattern(4096, ^seed)
				v, err := b.Slice(n-4096, 4096)
				if err != nil {
					return err
				}
				if err := v.CopyFromHost(it.tail); err != nil {
					return err
				}
			}
			if err := b.CopyFromHost(it.head); err != nil {
				return err
			}
			live = append(live, it)
			continue
		}
		k := r.IntN(len(live))
		it := live[k]
		if err := verify(it); err != nil {
			return err
		}
		if err := it.buf.Free(); err != nil {
			return err
		}
		live[k] = live[len(live)-1]
		live = live[:len(live)-1]
	}
	for _, it := range live {
		if err := verify(it); err != nil {
			return err
		}
		if err := it.buf.Free(); err != nil {
			return err
		}
	}
	return nil
}
