//go:build gpu

package alloc_test

// Asynchronous copies on the real device, measured side by side in one
// run: each repetition runs every variant once, in turn, and the best time
// of each is kept, so that all of them see the same link, clocks and host
// load. Run with the other GPU tests (gpu_test.go says how):
//
//	go test -c -tags gpu -o .gpu/alloc.test ./alloc
//	.gpu/alloc.test -test.run 'GPUAsync' -test.v
//
// What is compared, for 256 MiB each way:
//
//   - raw: cuMemcpyHtoDAsync_v2 / cuMemcpyDtoHAsync_v2 from or to pinned
//     memory on the stream, then cuStreamSynchronize: what
//     cudaMemcpyAsync(..., cudaMemcpyDefault, stream) does with pinned
//     memory, the link's rate;
//   - zero-copy: CopyFromHostAsync / CopyToHostAsync + Wait on a buffer of
//     the allocator's PinnedPool (one driver copy, one event);
//   - staged: the same from or to pageable Go memory, through the staging
//     buffers;
//   - host memcpy: the Go copy between pageable and pinned memory that the
//     staged path makes, in the pieces it uses (alloc.CopyPiece) and in one
//     call, and the synchronous CopyFromHost / CopyToHost of pageable
//     memory (the driver's own staging), for reference.
//
// The zero-copy path must reach 80 % of the raw rate. It issues the same
// single driver copy and adds an event record and cuEventSynchronize in
// place of cuStreamSynchronize, some microseconds against about 4.9 ms for
// 256 MiB at 55 GB/s, so a healthy run is above 95 %; the margin is for
// run-to-run noise of a shared host's link, and anything below it means
// the copy is not going straight to the DMA engine.
//
// The staged path cannot beat the host's memcpy: every byte is copied by
// the CPU once, and the DMA of chunk k overlaps the copy of chunk k+1, so
// its bound is the slower of the memcpy and the link. It is reported as a
// fraction of that bound and must reach only half of it, which catches a
// broken pipeline (a synchronisation per small chunk, pinned memory
// allocated per call) without asserting a figure the host's memory system
// decides. With VRAM_GPU_TEST_SIM=1 the tests run on the simulated device
// (checking the tests themselves) and assert no rate.

import (
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

// asyncRig is an allocator directly over the backend, so that its optional
// interfaces (AsyncCopier, HostMemory) are visible, the backend's raw
// copies, and two streams.
type asyncRig struct {
	d   *gpuDev
	a   *alloc.Allocator
	ss  [2]alloc.Stream
	raw alloc.AsyncCopier
}

func (r *asyncRig) onGPU() bool { return r.d.cu != nil }

// sync waits for the work queued on s.
func (r *asyncRig) sync(s alloc.Stream) error {
	if r.d.cu != nil {
		return r.d.cu.SynchronizeStream(s)
	}
	r.d.sim.CompleteStream(s)
	return nil
}

func newAsyncRig(t *testing.T) *asyncRig {
	d := openGPU(t)
	r := &asyncRig{d: d}
	var backend alloc.Device
	if d.cu != nil {
		backend, r.raw = d.cu, d.cu
		for i := range r.ss {
			s, err := d.cu.NewNonBlockingStream()
			if err != nil {
				t.Fatal(err)
			}
			r.ss[i] = s
		}
	} else {
		backend, r.raw = d.sim, d.sim
		r.ss = [2]alloc.Stream{d.sim.NewStream(), d.sim.NewStream()}
	}
	a, err := alloc.New(backend, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	t.Cleanup(func() {
		if d.cu != nil {
			for _, s := range r.ss {
				_ = d.cu.DestroyStream(s)
			}
		}
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

// variant is one way of copying, timed.
type variant struct {
	name string
	run  func() error
	best time.Duration
}

// sideBySide runs every variant once per repetition, in turn, and keeps
// each one's best time. after, if set, runs after the first repetition.
func sideBySide(t *testing.T, reps int, vs []*variant, after func()) {
	t.Helper()
	for rep := range reps {
		for _, v := range vs {
			start := time.Now()
			if err := v.run(); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			if d := time.Since(start); rep == 0 || d < v.best {
				v.best = d
			}
		}
		if rep == 0 && after != nil {
			after()
		}
	}
}

// copyPieces copies src into dst as the staged path does.
func copyPieces(dst, src []byte) {
	for len(src) > alloc.CopyPiece {
		copy(dst[:alloc.CopyPiece], src[:alloc.CopyPiece])
		dst, src = dst[alloc.CopyPiece:], src[alloc.CopyPiece:]
	}
	copy(dst, src)
}

func waitTransfer(tr *alloc.Transfer, err error) error {
	if err != nil {
		return err
	}
	return tr.Wait()
}

func TestGPUAsyncBandwidth(t *testing.T) {
	r := newAsyncRig(t)
	a, s := r.a, r.ss[0]
	const n = 256 * gpuMiB
	reps := 7
	if !r.onGPU() {
		reps = 2
	}
	b, err := a.Alloc(n, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.FreeAsync(s) }()
	pool, err := a.PinnedPool()
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := pool.Get(n) // the raw and zero-copy copies' host side
	if err != nil {
		t.Fatal(err)
	}
	stage, err := pool.Get(n) // the host memcpy's pinned side
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pool.Put(pinned); _ = pool.Put(stage) }()
	pageable := gpuPattern(n, 11)
	out := gpuPattern(n, 12) // pageable destination, touched
	copy(pinned, pageable)
	copy(stage, pageable)
	gbps := func(d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

	h2d := []*variant{
		{name: "raw", run: func() error {
			if err := r.raw.CopyHtoDAsync(b.Ptr(), pinned, s); err != nil {
				return err
			}
			return r.sync(s)
		}},
		{name: "zero-copy", run: func() error { return waitTransfer(b.CopyFromHostAsync(pinned, s)) }},
		{name: "staged", run: func() error { return waitTransfer(b.CopyFromHostAsync(pageable, s)) }},
		{name: "memcpy pieces", run: func() error { copyPieces(stage, pageable); return nil }},
		{name: "memcpy one", run: func() error { copy(stage, pageable); return nil }},
		{name: "sync pageable", run: func() error { return b.CopyFromHost(pageable) }},
	}
	d2h := []*variant{
		{name: "raw", run: func() error {
			if err := r.raw.CopyDtoHAsync(pinned, b.Ptr(), s); err != nil {
				return err
			}
			return r.sync(s)
		}},
		{name: "zero-copy", run: func() error { return waitTransfer(b.CopyToHostAsync(pinned, s)) }},
		{name: "staged", run: func() error { return waitTransfer(b.CopyToHostAsync(out, s)) }},
		{name: "memcpy pieces", run: func() error { copyPieces(out, stage); return nil }},
		{name: "memcpy one", run: func() error { copy(out, stage); return nil }},
		{name: "sync pageable", run: func() error { return b.CopyToHost(out) }},
	}
	// Pinned memory the pool holds after the first repetition: later calls
	// must reuse it, not grow the pool.
	var held uint64
	poolHeld := func() uint64 { inUse, cached := pool.Usage(); return inUse + cached }
	sideBySide(t, reps, append(append([]*variant{}, h2d...), d2h...), func() { held = poolHeld() })
	if got := poolHeld(); got != held {
		t.Errorf("the pinned pool grew from %d to %d MiB over the repetitions", held/gpuMiB, got/gpuMiB)
	}

	// The bytes, through each of the allocator's paths.
	check := func(what string, got, want []byte) {
		t.Helper()
		if diff := gpuDiff(got, want); diff != "" {
			t.Errorf("%s: %s", what, diff)
		}
	}
	readBack := func() []byte {
		got := make([]byte, n)
		if err := b.CopyToHost(got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	gpuFill(pinned, 21)
	if err := waitTransfer(b.CopyFromHostAsync(pinned, s)); err != nil {
		t.Fatal(err)
	}
	check("CopyFromHostAsync from pinned", readBack(), pinned)
	gpuFill(pageable, 22)
	if err := waitTransfer(b.CopyFromHostAsync(pageable, s)); err != nil {
		t.Fatal(err)
	}
	check("CopyFromHostAsync from pageable", readBack(), pageable)
	clear(out)
	if err := waitTransfer(b.CopyToHostAsync(out, s)); err != nil {
		t.Fatal(err)
	}
	check("CopyToHostAsync to pageable", out, pageable)
	clear(pinned)
	if err := waitTransfer(b.CopyToHostAsync(pinned, s)); err != nil {
		t.Fatal(err)
	}
	check("CopyToHostAsync to pinned", pinned, pageable)

	report := func(dir string, vs []*variant) {
		t.Helper()
		raw, zero, staged, pieces, one, syncP := vs[0].best, vs[1].best, vs[2].best, vs[3].best, vs[4].best, vs[5].best
		bound := max(raw, pieces) // perfect overlap of the memcpy and the DMA
		t.Logf("256 MiB %s: raw %.1f GB/s; zero-copy %.1f GB/s (%.0f%% of raw); staged %.1f GB/s (%.0f%% of its bound, the slower of memcpy and raw)",
			dir, gbps(raw), gbps(zero), 100*raw.Seconds()/zero.Seconds(), gbps(staged), 100*bound.Seconds()/staged.Seconds())
		t.Logf("256 MiB %s: host memcpy %.1f GB/s in %d KiB pieces, %.1f GB/s in one copy; synchronous copy of pageable memory %.1f GB/s",
			dir, gbps(pieces), alloc.CopyPiece>>10, gbps(one), gbps(syncP))
		if !r.onGPU() {
			return
		}
		if zero > raw*5/4 {
			t.Errorf("%s: the zero-copy path ran at %.1f GB/s, under 80%% of the raw copy's %.1f GB/s", dir, gbps(zero), gbps(raw))
		}
		if staged > 2*bound {
			t.Errorf("%s: the staged path ran at %.1f GB/s, under half of its bound %.1f GB/s (memcpy %.1f, link %.1f)",
				dir, gbps(staged), gbps(bound), gbps(pieces), gbps(raw))
		}
	}
	report("host to device", h2d)
	report("device to host", d2h)
	st := a.Transfers()
	t.Logf("Transfers: %+v", st)
	if st.InFlight != 0 || st.Abandoned != 0 || st.ZeroCopy != uint64(2*reps+2) {
		t.Errorf("Transfers = %+v after waiting for every copy; want %d zero-copy", st, 2*reps+2)
	}
}

// TestGPUAsyncOverlap copies host to device on one stream and device to
// host on another at the same time, and compares the wall time with the two
// copies run one after the other: PCIe and NVLink-C2C are full duplex, so
// the pair should take well under the serial sum. Raw driver copies, the
// allocator's zero-copy path and its staged path, side by side.
func TestGPUAsyncOverlap(t *testing.T) {
	r := newAsyncRig(t)
	a, ss := r.a, r.ss
	const n = 256 * gpuMiB
	reps := 5
	if !r.onGPU() {
		reps = 2
	}
	up, err := a.Alloc(n, ss[0])
	if err != nil {
		t.Fatal(err)
	}
	down, err := a.Alloc(n, ss[1])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.FreeAsync(ss[0]); _ = down.FreeAsync(ss[1]) }()
	pool, err := a.PinnedPool()
	if err != nil {
		t.Fatal(err)
	}
	in, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pool.Get(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pool.Put(in); _ = pool.Put(out) }()
	gpuFill(in, 3)
	want := gpuPattern(n, 4) // what down holds
	if err := down.CopyFromHost(want); err != nil {
		t.Fatal(err)
	}
	src := gpuPattern(n, 3) // pageable copy of in
	dst := make([]byte, n)
	sync2 := func() error {
		if err := r.sync(ss[0]); err != nil {
			return err
		}
		return r.sync(ss[1])
	}
	// Each way of copying: one direction, the other, and both at once.
	type pair struct {
		name              string
		up, down, both    func() error
		vUp, vDown, vBoth *variant
	}
	rawUp := func() error { return r.raw.CopyHtoDAsync(up.Ptr(), in, ss[0]) }
	rawDown := func() error { return r.raw.CopyDtoHAsync(out, down.Ptr(), ss[1]) }
	then := func(fs ...func() error) func() error {
		return func() error {
			for _, f := range fs {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	zeroBoth := func() error {
		t1, err := up.CopyFromHostAsync(in, ss[0])
		if err != nil {
			return err
		}
		t2, err := down.CopyToHostAsync(out, ss[1])
		if err != nil {
			return err
		}
		if err := t1.Wait(); err != nil {
			return err
		}
		return t2.Wait()
	}
	stagedUp := func() error { return waitTransfer(up.CopyFromHostAsync(src, ss[0])) }
	stagedDown := func() error { return waitTransfer(down.CopyToHostAsync(dst, ss[1])) }
	pairs := []*pair{
		{name: "raw copies from/to pinned", up: then(rawUp, sync2), down: then(rawDown, sync2), both: then(rawUp, rawDown, sync2)},
		{name: "CopyFromHostAsync/CopyToHostAsync, pinned (zero-copy)",
			up:   func() error { return waitTransfer(up.CopyFromHostAsync(in, ss[0])) },
			down: func() error { return waitTransfer(down.CopyToHostAsync(out, ss[1])) },
			both: zeroBoth},
		{name: "CopyFromHostAsync/CopyToHostAsync, pageable (staged, one goroutine each)",
			up: stagedUp, down: stagedDown,
			both: func() error {
				var wg sync.WaitGroup
				var e1, e2 error
				wg.Add(2)
				go func() { defer wg.Done(); e1 = stagedUp() }()
				go func() { defer wg.Done(); e2 = stagedDown() }()
				wg.Wait()
				if e1 != nil {
					return e1
				}
				return e2
			}},
	}
	var vs []*variant
	for _, p := range pairs {
		p.vUp, p.vDown, p.vBoth = &variant{name: p.name + " up", run: p.up}, &variant{name: p.name + " down", run: p.down}, &variant{name: p.name + " both", run: p.both}
		vs = append(vs, p.vUp, p.vDown, p.vBoth)
	}
	sideBySide(t, reps, vs, nil)
	gb := float64(n) / 1e9
	for i, p := range pairs {
		u, d, both := p.vUp.best, p.vDown.best, p.vBoth.best
		t.Logf("%s, 256 MiB each way: up %.1f GB/s, down %.1f GB/s; both at once %v vs serial sum %v (%.2fx, %.1f GB/s combined)",
			p.name, gb/u.Seconds(), gb/d.Seconds(), both, u+d, (u+d).Seconds()/both.Seconds(), 2*gb/both.Seconds())
		// The staged pair is bounded by two host memcpys sharing the
		// memory system: reported, not asserted.
		if r.onGPU() && i < 2 && both > (u+d)*9/10 {
			t.Errorf("%s: copies in opposite directions on two streams took %v, not clearly less than the serial %v: no overlap", p.name, both, u+d)
		}
	}
	if diff := gpuDiff(out, want); diff != "" {
		t.Errorf("CopyToHostAsync to pinned delivered: %s", diff)
	}
	if diff := gpuDiff(dst, want); diff != "" {
		t.Errorf("CopyToHostAsync to pageable delivered: %s", diff)
	}
	got := make([]byte, n)
	if err := up.CopyToHost(got); err != nil {
		t.Fatal(err)
	}
	if diff := gpuDiff(got, src); diff != "" {
		t.Errorf("CopyFromHostAsync wrote: %s", diff)
	}
}
