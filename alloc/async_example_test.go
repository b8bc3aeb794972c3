package alloc_test

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// A double-buffered pipeline: while batch i is "processed" on the compute
// stream, batch i+1 is already being copied host to device on the copy
// stream into the other buffer. Each batch's result comes back with
// CopyToHostAsync, and its Wait delivers the bytes.
func ExampleBuffer_CopyFromHostAsync() {
	dev := sim.MustNew(sim.Config{}) // or cudadev.Open(0), with streams from its NewStream
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		panic(err)
	}
	copyStream, compute := dev.NewStream(), dev.NewStream()
	const batch = 1 << 20
	var bufs [2]*alloc.Buffer
	for i := range bufs {
		if bufs[i], err = a.Alloc(batch, compute); err != nil {
			panic(err)
		}
	}
	host := make([]byte, batch)
	load := func(i int) *alloc.Transfer {
		for j := range host {
			host[j] = byte(i)
		}
		t, err := bufs[i%2].CopyFromHostAsync(host, copyStream) // host may be refilled at once
		if err != nil {
			panic(err)
		}
		return t
	}
	pending := load(0)
	out := make([]byte, 4)
	for i := range 4 {
		// The next batch goes to the other buffer while this one is used.
		if err := pending.Wait(); err != nil { // in CUDA code: an event the compute stream waits on
			panic(err)
		}
		if i+1 < 4 {
			pending = load(i + 1)
		}
		// "Process" batch i on the compute stream, then fetch a few bytes.
		res, err := bufs[i%2].CopyToHostAsync(out, compute)
		if err != nil {
			panic(err)
		}
		if err := res.Wait(); err != nil {
			panic(err)
		}
		fmt.Println("batch", i, out)
	}
	for _, b := range bufs {
		_ = b.FreeAsync(compute) // stream-ordered on the buffer's own stream: reusable at once
	}
	st := a.Transfers()
	fmt.Println("copies completed:", st.Completed, "in flight:", st.InFlight)
	_ = a.Close()
	// Output:
	// batch 0 [0 0 0 0]
	// batch 1 [1 1 1 1]
	// batch 2 [2 2 2 2]
	// batch 3 [3 3 3 3]
	// copies completed: 8 in flight: 0
}

// Host memory from the allocator's pinned pool is copied without staging:
// one driver copy straight from or to it, at the link's rate. The DMA
// engine reads it when the stream gets there, so it must stay unchanged
// until the copy is done; a Put meanwhile takes effect only then.
func ExampleAllocator_PinnedPool() {
	dev := sim.MustNew(sim.Config{}) // or cudadev.Open(0)
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		panic(err)
	}
	s := dev.NewStream()
	pool, err := a.PinnedPool()
	if err != nil {
		panic(err)
	}
	const n = 8 << 20
	in, _ := pool.Get(n)
	out, _ := pool.Get(n)
	for i := range in {
		in[i] = byte(i % 251)
	}
	buf, _ := a.Alloc(n, s)
	up, err := buf.CopyFromHostAsync(in, s) // queued from in itself: leave in alone until done
	if err != nil {
		panic(err)
	}
	_ = pool.Put(in)                         // accepted; the pool takes it back when the copy is done
	down, err := buf.CopyToHostAsync(out, s) // the device writes out directly
	if err != nil {
		panic(err)
	}
	if err := up.Wait(); err != nil {
		panic(err)
	}
	if err := down.Wait(); err != nil {
		panic(err)
	}
	fmt.Println(out[:4], out[n-1])
	st := a.Transfers()
	fmt.Println("zero-copy:", st.ZeroCopy, "completed:", st.Completed, "driver copies:", dev.Calls().CopyHtoDAsync+dev.Calls().CopyDtoHAsync)
	_ = pool.Put(out)
	_ = buf.Free()
	_ = a.Close()
	// Output:
	// [0 1 2 3] 187
	// zero-copy: 2 completed: 2 driver copies: 2
}
