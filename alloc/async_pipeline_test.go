package alloc_test

// The asynchronous copies' pipeline on the simulated device: staging
// buffers taken and reused as their events complete (sim.LagCopies plays a
// DMA engine that runs behind the host), the zero-copy path for memory of
// the allocator's pinned pool, and what is kept or given back when a step
// fails. The simulated device moves a queued copy's bytes only when its
// stream runs it, so a staging buffer reused before its event completed
// delivers the wrong bytes.

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

const chunkSz = alloc.StagingChunk

// asyncDev returns an allocator over a fresh simulated device with the
// given pinned-memory limit (0: none), checked and closed when the test
// ends: no pinned memory but leak bytes may be left, and no event.
func asyncDev(t *testing.T, hostCap uint64, leak *uint64) (*alloc.Allocator, *sim.Device) {
	t.Helper()
	d, err := sim.New(sim.Config{Capacity: 4 << 30, HostCapacity: hostCap})
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(d, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.CheckInvariants(); err != nil {
			t.Errorf("invariants: %v", err)
		}
		// Let the device finish what a failed test left queued, or Close
		// would wait for it forever.
		d.HoldEvents(false)
		d.CompleteEvents()
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		want := uint64(0)
		if leak != nil {
			want = *leak
		}
		if h := d.Stats().HostBytes; h != want {
			t.Errorf("%d bytes of pinned host memory left after Close, want %d", h, want)
		}
		if n := d.LiveEvents(); n != 0 {
			t.Errorf("%d events left after Close", n)
		}
	})
	return a, d
}

func pinnedUse(t *testing.T, a *alloc.Allocator) (inUse, cached uint64) {
	t.Helper()
	pool, err := a.PinnedPool()
	if err != nil {
		t.Fatal(err)
	}
	return pool.Usage()
}

func asyncCalls(d *sim.Device, toHost bool) uint64 {
	if toHost {
		return d.Calls().CopyDtoHAsync
	}
	return d.Calls().CopyHtoDAsync
}

// TestAsyncPipeline copies through staging buffers with the device's
// streams completing at once, held, or running 1 or 2 copies behind the
// host, and checks how many staging buffers each copy took, how many are
// still out after the call (and after reaping those whose events
// completed), and that the bytes arrive.
func TestAsyncPipeline(t *testing.T) {
	const many = 10*chunkSz + 12345 // 11 chunks, the last one short
	for _, tc := range []struct {
		name   string
		toHost bool
		n      int
		hold   bool
		lag    int
		// staging buffers allocated (HostAlloc), and bytes of them still
		// out once the call returned and completed chunks were reaped
		wantBuffers uint64
		wantOut     uint64
		// bytes still out while Wait blocks on the held stream (copies
		// to the host with a lag: Wait returns each chunk's buffer once
		// it has copied it out)
		wantOutInWait uint64
	}{
		{name: "to device, one small chunk", n: 100 << 10, wantBuffers: 1, wantOut: 0},
		{name: "to device, stream keeps up", n: many, wantBuffers: 1, wantOut: 0},
		{name: "to device, stream one copy behind", n: many, hold: true, lag: 1, wantBuffers: 2, wantOut: chunkSz},
		{name: "to device, stream two copies behind", n: many, hold: true, lag: 2, wantBuffers: 3, wantOut: 2 * chunkSz},
		{name: "to device, stream held", n: many, hold: true, wantBuffers: 11, wantOut: 11 * chunkSz},
		{name: "to host, one small chunk", toHost: true, n: 100 << 10, wantBuffers: 1, wantOut: 128 << 10},
		{name: "to host, stream keeps up", toHost: true, n: many, wantBuffers: 11, wantOut: 11 * chunkSz},
		{name: "to host, stream two copies behind", toHost: true, n: many, hold: true, lag: 2, wantBuffers: 11, wantOut: 11 * chunkSz, wantOutInWait: 2 * chunkSz},
		{name: "to host, stream held", toHost: true, n: many, hold: true, wantBuffers: 11, wantOut: 11 * chunkSz},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := asyncDev(t, 0, nil)
			s := d.NewStream()
			b, err := a.Alloc(uint64(tc.n), s)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = b.Free() }()
			want := asyncPattern(tc.n, 7)
			host := make([]byte, tc.n)
			if tc.toHost {
				if err := b.CopyFromHost(want); err != nil {
					t.Fatal(err)
				}
			} else {
				copy(host, want)
			}
			d.HoldEvents(tc.hold)
			d.LagCopies(tc.lag)
			before := d.Calls()
			var tr *alloc.Transfer
			if tc.toHost {
				tr, err = b.CopyToHostAsync(host, s)
			} else {
				tr, err = b.CopyFromHostAsync(host, s)
				clear(host) // staged: changing the source now changes nothing
			}
			if err != nil {
				t.Fatal(err)
			}
			chunks := uint64((tc.n + chunkSz - 1) / chunkSz)
			after := d.Calls()
			if got := asyncCalls(d, tc.toHost) - map[bool]uint64{false: before.CopyHtoDAsync, true: before.CopyDtoHAsync}[tc.toHost]; got != chunks {
				t.Errorf("%d asynchronous copies queued, want one per chunk (%d)", got, chunks)
			}
			if got := after.EventRecord - before.EventRecord; got != chunks {
				t.Errorf("%d events recorded, want one per chunk (%d)", got, chunks)
			}
			if got := after.HostAlloc - before.HostAlloc; got != tc.wantBuffers {
				t.Errorf("%d staging buffers allocated, want %d", got, tc.wantBuffers)
			}
			if tc.toHost && !bytes.Equal(host, make([]byte, tc.n)) {
				t.Fatal("the destination was written before Wait")
			}
			if err := a.ReapTransfers(); err != nil {
				t.Fatal(err)
			}
			if inUse, _ := pinnedUse(t, a); inUse != tc.wantOut {
				t.Errorf("after the call: %d pinned bytes out, want %d", inUse, tc.wantOut)
			}
			waited := make(chan error, 1)
			if tc.toHost && tc.hold {
				go func() { waited <- tr.Wait() }()
				if tc.wantOutInWait != 0 {
					deadline := time.Now().Add(5 * time.Second)
					for {
						inUse, _ := pinnedUse(t, a)
						if inUse == tc.wantOutInWait {
							break
						}
						if time.Now().After(deadline) {
							t.Fatalf("while Wait blocks: %d pinned bytes out, want %d (the chunks it copied out given back)", inUse, tc.wantOutInWait)
						}
						time.Sleep(time.Millisecond)
					}
				}
				select {
				case err := <-waited:
					t.Fatalf("Wait returned (%v) before the stream ran the last copies", err)
				case <-time.After(10 * time.Millisecond):
				}
			}
			d.CompleteStream(s)
			if tc.toHost && tc.hold {
				err = <-waited
			} else {
				err = tr.Wait()
			}
			if err != nil {
				t.Fatal(err)
			}
			got := host
			if !tc.toHost {
				got = make([]byte, tc.n)
				if err := b.CopyToHost(got); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatal("wrong bytes arrived (as when a staging buffer is reused before its event completed)")
			}
			if inUse, _ := pinnedUse(t, a); inUse != 0 {
				t.Errorf("after Wait: %d pinned bytes out", inUse)
			}
			if st := a.Transfers(); st.InFlight != 0 || st.Completed != 1 || st.ZeroCopy != 0 {
				t.Errorf("Transfers = %+v, want none in flight, 1 completed, none zero-copy", st)
			}
		})
	}
}

// TestAsyncPinnedExhausted: a copy to the device that cannot get more
// pinned memory waits for its own oldest chunk and reuses that buffer; one
// that cannot get any fails and leaves nothing behind.
func TestAsyncPinnedExhausted(t *testing.T) {
	t.Run("waits for its own buffers", func(t *testing.T) {
		a, d := asyncDev(t, 2*chunkSz, nil)
		s := d.NewStream()
		const n = 6 * chunkSz
		b, _ := a.Alloc(n, s)
		defer func() { _ = b.Free() }()
		d.HoldEvents(true)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the device, running the stream now and then
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
					d.CompleteStream(s)
				}
			}
		}()
		src := asyncPattern(n, 3)
		tr, err := b.CopyFromHostAsync(src, s)
		close(stop)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		d.CompleteStream(s)
		if err := tr.Wait(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := b.CopyToHost(got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Fatal("wrong bytes arrived")
		}
		if h := d.Stats().HostBytes; h > 2*chunkSz {
			t.Errorf("%d bytes of pinned memory, over the device's limit", h)
		}
	})
	t.Run("none at all", func(t *testing.T) {
		a, d := asyncDev(t, chunkSz/2, nil)
		b, _ := a.Alloc(3*chunkSz, 0)
		defer func() { _ = b.Free() }()
		for _, toHost := range []bool{false, true} {
			var err error
			if toHost {
				_, err = b.CopyToHostAsync(make([]byte, 3*chunkSz), 0)
			} else {
				_, err = b.CopyFromHostAsync(make([]byte, 3*chunkSz), 0)
			}
			if err == nil || !strings.Contains(err.Error(), "pinned host memory exhausted") {
				t.Errorf("to host %v: error %v, want the device's pinned memory exhausted", toHost, err)
			}
			if n := asyncCalls(d, toHost); n != 0 {
				t.Errorf("to host %v: %d copies queued", toHost, n)
			}
		}
		if st := a.Transfers(); st.InFlight != 0 || st.Completed != 0 {
			t.Errorf("Transfers = %+v, want nothing", st)
		}
	})
}

// TestAsyncQueueErrors: a copy that fails part way returns an error and no
// Transfer; what it queued stays out of the pool until the events after it
// have completed, and memory with no event after it is never reused.
func TestAsyncQueueErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		toHost   bool
		zeroCopy bool
		n        int
		fault    sim.Kind
		nth      uint64
		wantMsg  string
		// after the call: copies in flight and pinned bytes out (the
		// caller's own pool buffer not counted); after the stream ran and
		// a reap: pinned bytes never given back
		wantInFlight int
		wantOut      uint64
		wantLost     uint64
	}{
		{name: "to device, third copy fails", n: 5 * chunkSz, fault: sim.KindCopyHtoDAsync, nth: 3,
			wantMsg: "injected fault", wantInFlight: 1, wantOut: 3 * chunkSz},
		{name: "to device, third event fails", n: 5 * chunkSz, fault: sim.KindEventRecord, nth: 3,
			wantMsg: "are never reused", wantInFlight: 1, wantOut: 3 * chunkSz, wantLost: chunkSz},
		{name: "to device, first staging buffer refused", n: 5 * chunkSz, fault: sim.KindHostAlloc, nth: 1,
			wantMsg: "pinned host alloc"},
		{name: "to host, second copy fails", toHost: true, n: 5 * chunkSz, fault: sim.KindCopyDtoHAsync, nth: 2,
			wantMsg: "injected fault", wantInFlight: 1, wantOut: 2 * chunkSz},
		{name: "to host, third staging buffer refused", toHost: true, n: 5 * chunkSz, fault: sim.KindHostAlloc, nth: 3,
			wantMsg: "pinned host alloc", wantInFlight: 1, wantOut: 2 * chunkSz},
		{name: "to host, first event fails", toHost: true, n: 5 * chunkSz, fault: sim.KindEventRecord, nth: 1,
			wantMsg: "are never reused", wantOut: chunkSz, wantLost: chunkSz},
		{name: "zero-copy to device, copy fails", zeroCopy: true, n: 3 * chunkSz, fault: sim.KindCopyHtoDAsync, nth: 1,
			wantMsg: "injected fault", wantInFlight: 1},
		{name: "zero-copy to host, event fails", zeroCopy: true, toHost: true, n: 3 * chunkSz, fault: sim.KindEventRecord, nth: 1,
			wantMsg: "are never reused", wantLost: 4 * chunkSz},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lost uint64
			a, d := asyncDev(t, 0, &lost)
			s := d.NewStream()
			b, _ := a.Alloc(uint64(tc.n), s)
			defer func() { _ = b.Free() }()
			pool, _ := a.PinnedPool()
			host := make([]byte, tc.n)
			var own uint64 // the caller's pool buffer
			if tc.zeroCopy {
				var err error
				if host, err = pool.Get(uint64(tc.n)); err != nil {
					t.Fatal(err)
				}
				own = uint64(cap(host))
			}
			d.HoldEvents(true)
			remove := d.FailNth(tc.fault, tc.nth)
			var tr *alloc.Transfer
			var err error
			if tc.toHost {
				tr, err = b.CopyToHostAsync(host, s)
			} else {
				tr, err = b.CopyFromHostAsync(host, s)
			}
			remove()
			if err == nil || tr != nil {
				t.Fatalf("got %v, %v; want an error and no Transfer", tr, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not say %q", err, tc.wantMsg)
			}
			if tc.fault != sim.KindHostAlloc && !errors.Is(err, sim.ErrInjected) {
				t.Errorf("error %q does not wrap the device's", err)
			}
			if err := a.ReapTransfers(); err != nil {
				t.Fatal(err)
			}
			if st := a.Transfers(); st.InFlight != tc.wantInFlight || st.ZeroCopy != 0 {
				t.Errorf("after the call: Transfers = %+v, want %d in flight, none zero-copy", st, tc.wantInFlight)
			}
			if inUse, _ := pool.Usage(); inUse-own != tc.wantOut {
				t.Errorf("after the call: %d pinned bytes out, want %d", inUse-own, tc.wantOut)
			}
			d.CompleteStream(s)
			if err := a.ReapTransfers(); err != nil {
				t.Fatal(err)
			}
			if tc.zeroCopy {
				if err := pool.Put(host); err != nil {
					t.Fatal(err)
				}
			}
			inUse, _ := pool.Usage()
			if inUse != tc.wantLost {
				t.Errorf("after the stream ran: %d pinned bytes out, want %d never reused", inUse, tc.wantLost)
			}
			if st := a.Transfers(); st.InFlight != 0 || st.Completed != 0 {
				t.Errorf("after the stream ran: Transfers = %+v, want none in flight or completed", st)
			}
			lost = tc.wantLost
		})
	}
}

// TestAsyncWaitError: when the device fails a queued copy (its memory was
// freed and released meanwhile), Wait reports it and the staging buffers
// are never reused.
func TestAsyncWaitError(t *testing.T) {
	var lost uint64 = 2 * chunkSz
	a, d := asyncDev(t, 0, &lost)
	s := d.NewStream()
	b, _ := a.Alloc(2*chunkSz, s)
	d.HoldEvents(true)
	tr, err := b.CopyToHostAsync(make([]byte, 2*chunkSz), s)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Free() // on its own stream: the block is free at once
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	d.CompleteStream(s)
	d.HoldEvents(false)
	if err := tr.Wait(); err == nil || !errors.Is(err, sim.ErrIllegalAddress) {
		t.Fatalf("Wait = %v, want the device's illegal address", err)
	}
	if err2 := tr.Wait(); err2 == nil {
		t.Error("second Wait returned nil after the first failed")
	}
	if inUse, _ := pinnedUse(t, a); inUse != lost {
		t.Errorf("%d pinned bytes out, want the 2 staging buffers kept from reuse", inUse)
	}
	if st := a.Transfers(); st.InFlight != 0 || st.Completed != 0 {
		t.Errorf("Transfers = %+v", st)
	}
	if d.AsyncError() == nil {
		t.Error("the device reported no failed copy")
	}
}

// TestAsyncZeroCopy: memory from the allocator's pinned pool is copied
// directly, in one driver call and without staging; a Put of it while the
// copy is in flight takes effect when the copy's event completes.
func TestAsyncZeroCopy(t *testing.T) {
	const n = 6*chunkSz + 100
	for _, tc := range []struct {
		name     string
		toHost   bool
		off, len int // the part of the pool buffer copied
	}{
		{"to device, whole buffer", false, 0, n},
		{"to device, middle", false, 1000, 5 * chunkSz},
		{"to device, end of the size class", false, 24 << 20, 8 << 20},
		{"to host, whole buffer", true, 0, n},
		{"to host, middle", true, 4096, 3*chunkSz + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := asyncDev(t, 0, nil)
			s := d.NewStream()
			b, _ := a.Alloc(uint64(tc.len), s)
			defer func() { _ = b.Free() }()
			pool, _ := a.PinnedPool()
			buf, err := pool.Get(n)
			if err != nil {
				t.Fatal(err)
			}
			class := uint64(cap(buf))
			host := buf[:cap(buf)][tc.off : tc.off+tc.len]
			want := asyncPattern(tc.len, 5)
			if tc.toHost {
				if err := b.CopyFromHost(want); err != nil {
					t.Fatal(err)
				}
			} else {
				copy(host, want)
			}
			d.HoldEvents(true)
			before := d.Calls()
			var tr *alloc.Transfer
			if tc.toHost {
				tr, err = b.CopyToHostAsync(host, s)
			} else {
				tr, err = b.CopyFromHostAsync(host, s)
			}
			if err != nil {
				t.Fatal(err)
			}
			after := d.Calls()
			if got := asyncCalls(d, tc.toHost) - map[bool]uint64{false: before.CopyHtoDAsync, true: before.CopyDtoHAsync}[tc.toHost]; got != 1 {
				t.Errorf("%d asynchronous copies, want 1", got)
			}
			if after.HostAlloc != before.HostAlloc {
				t.Errorf("%d staging buffers allocated, want none", after.HostAlloc-before.HostAlloc)
			}
			if !tc.toHost {
				host[0] ^= 0xff // not staged: the device reads it when the stream runs
				want[0] ^= 0xff
			}
			// Put while in flight: accepted, deferred; the memory is not handed out again.
			if err := pool.Put(buf); err != nil {
				t.Fatal(err)
			}
			if err := pool.Put(buf); err == nil {
				t.Error("a second Put of a buffer in flight succeeded")
			}
			if inUse, cached := pool.Usage(); inUse != class || cached != 0 {
				t.Errorf("while in flight: %d in use, %d cached; want %d, 0", inUse, cached, class)
			}
			other, err := pool.Get(n)
			if err != nil {
				t.Fatal(err)
			}
			if &other[0] == &buf[0] {
				t.Fatal("the pool handed out a buffer a copy is still using")
			}
			_ = pool.Put(other)
			if ready, err := tr.Ready(); ready || err != nil {
				t.Errorf("Ready = %v, %v before the stream ran", ready, err)
			}
			d.CompleteStream(s)
			if tc.toHost && !bytes.Equal(host, want) {
				t.Error("the device did not write the destination directly")
			}
			if err := tr.Wait(); err != nil {
				t.Fatal(err)
			}
			if !tc.toHost {
				got := make([]byte, tc.len)
				if err := b.CopyToHost(got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Error("the device did not read the source when the stream ran")
				}
			}
			if inUse, cached := pool.Usage(); inUse != 0 || cached != 2*class {
				t.Errorf("after Wait: %d in use, %d cached; want 0 and both buffers (%d)", inUse, cached, 2*class)
			}
			if st := a.Transfers(); st.ZeroCopy != 1 || st.Completed != 1 || st.InFlight != 0 {
				t.Errorf("Transfers = %+v, want 1 zero-copy, completed", st)
			}
		})
	}
}

// TestAsyncNotZeroCopy: pinned memory that is not the allocator's pool's,
// or that was put back, is staged like any other host memory.
func TestAsyncNotZeroCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		host func(t *testing.T, a *alloc.Allocator, d *sim.Device) []byte
	}{
		{"another pool", func(t *testing.T, a *alloc.Allocator, d *sim.Device) []byte {
			b, err := alloc.NewPinnedPool(d).Get(64 << 10)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.HostFree(b[:cap(b)]) })
			return b
		}},
		{"put back", func(t *testing.T, a *alloc.Allocator, d *sim.Device) []byte {
			pool, _ := a.PinnedPool()
			b, _ := pool.Get(64 << 10)
			_ = pool.Put(b)
			return b
		}},
		{"Go heap", func(*testing.T, *alloc.Allocator, *sim.Device) []byte { return make([]byte, 64<<10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := asyncDev(t, 0, nil)
			host := tc.host(t, a, d)
			b, _ := a.Alloc(uint64(len(host)), 0)
			defer func() { _ = b.Free() }()
			copy(host, asyncPattern(len(host), 1))
			before := d.Calls().HostAlloc
			tr, err := b.CopyFromHostAsync(host, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Wait(); err != nil {
				t.Fatal(err)
			}
			if st := a.Transfers(); st.ZeroCopy != 0 {
				t.Errorf("Transfers = %+v: went zero-copy", st)
			}
			if tc.name != "put back" && d.Calls().HostAlloc == before {
				t.Error("no staging buffer taken")
			}
		})
	}
}

// TestAsyncZeroCopyAbandoned: a zero-copy copy to the host dropped without
// Wait is counted, and a Put of its buffer made meanwhile takes effect once
// the copy is done.
func TestAsyncZeroCopyAbandoned(t *testing.T) {
	a, _ := asyncDev(t, 0, nil)
	b, _ := a.Alloc(4096, 0)
	defer func() { _ = b.Free() }()
	pool, _ := a.PinnedPool()
	host, _ := pool.Get(4096)
	func() {
		if _, err := b.CopyToHostAsync(host, 0); err != nil {
			t.Fatal(err)
		}
	}()
	if err := pool.Put(host); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Transfers().Abandoned == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if st := a.Transfers(); st.Abandoned != 1 || st.InFlight != 0 || st.ZeroCopy != 1 || st.Completed != 0 {
		t.Errorf("Transfers = %+v, want 1 abandoned zero-copy copy, none completed", st)
	}
	if inUse, cached := pool.Usage(); inUse != 0 || cached != 4096 {
		t.Errorf("pool: %d in use, %d cached; want the buffer back", inUse, cached)
	}
}
