package alloc_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

func asyncPattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// TestAsyncRoundTrip copies host → device → host asynchronously, on the
// buffer's stream and on another one, for sizes of one chunk and many.
func TestAsyncRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		other  bool // copy on a stream other than the buffer's
		prefix int  // copy only this many bytes (0: all)
	}{
		{"one byte", 1, false, 0},
		{"page", 4096, true, 0},
		{"prefix", 10000, false, 3000},
		{"one chunk", 4 << 20, false, 0},
		{"many chunks", 70<<20 + 123, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := newAlloc(t, 1<<30, alloc.Config{})
			s := alloc.Stream(0)
			if tc.other {
				s = d.NewStream()
			}
			b, err := a.Alloc(uint64(tc.n), 0)
			if err != nil {
				t.Fatal(err)
			}
			m := tc.n
			if tc.prefix > 0 {
				m = tc.prefix
			}
			src := asyncPattern(m, 3)
			up, err := b.CopyFromHostAsync(src, s)
			if err != nil {
				t.Fatal(err)
			}
			src[0] ^= 0xff // the source is staged: changing it now changes nothing
			dst := make([]byte, m)
			down, err := b.CopyToHostAsync(dst, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := down.Wait(); err != nil {
				t.Fatal(err)
			}
			if err := up.Wait(); err != nil {
				t.Fatal(err)
			}
			src[0] ^= 0xff
			if !bytes.Equal(dst, src) {
				t.Fatal("round trip changed the bytes")
			}
			if err := down.Wait(); err != nil { // a second Wait is harmless
				t.Fatal(err)
			}
			st := a.Transfers()
			if st.InFlight != 0 || st.Completed != 2 || st.Abandoned != 0 {
				t.Errorf("Transfers = %+v, want 0 in flight, 2 completed", st)
			}
			pool, _ := a.PinnedPool()
			if inUse, cached := pool.Usage(); inUse != 0 || cached == 0 {
				t.Errorf("pinned pool: %d in use, %d cached; want 0 and some", inUse, cached)
			}
			if err := b.Free(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if h := d.Stats().HostBytes; h != 0 {
				t.Errorf("%d bytes of pinned host memory left after Close", h)
			}
			if n := d.LiveEvents(); n != 0 {
				t.Errorf("%d events left after Close", n)
			}
		})
	}
}

// TestAsyncStagingNotReusedEarly: while the copy's event is pending, its
// staging buffer stays out of the pool, so a second copy cannot overwrite
// the bytes the first one has yet to move.
func TestAsyncStagingNotReusedEarly(t *testing.T) {
	a, d := newAlloc(t, 1<<30, alloc.Config{})
	s := d.NewStream()
	b1, _ := a.Alloc(8192, s)
	b2, _ := a.Alloc(8192, s)
	d.HoldEvents(true)
	one, two := asyncPattern(8192, 1), asyncPattern(8192, 2)
	if _, err := b1.CopyFromHostAsync(one, s); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.CopyFromHostAsync(two, s); err != nil {
		t.Fatal(err)
	}
	if n := d.QueuedCopies(); n != 2 {
		t.Fatalf("%d copies queued, want 2", n)
	}
	pool, _ := a.PinnedPool()
	if inUse, cached := pool.Usage(); inUse != 2*8192 || cached != 0 {
		t.Fatalf("pinned pool: %d in use, %d cached; want both staging buffers out", inUse, cached)
	}
	if st := a.Transfers(); st.InFlight != 2 {
		t.Fatalf("Transfers = %+v, want 2 in flight", st)
	}
	d.CompleteStream(s)
	d.HoldEvents(false)
	for i, b := range []*alloc.Buffer{b1, b2} {
		got := make([]byte, 8192)
		if err := b.CopyToHost(got); err != nil {
			t.Fatal(err)
		}
		if want := [][]byte{one, two}[i]; !bytes.Equal(got, want) {
			t.Errorf("buffer %d holds the wrong bytes: its staging buffer was reused early", i+1)
		}
	}
	// The next asynchronous copy reaps the completed ones.
	tr, err := b1.CopyFromHostAsync(one, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := a.Transfers(); st.InFlight != 0 || st.Completed != 3 {
		t.Errorf("Transfers = %+v, want none in flight, 3 completed", st)
	}
	_ = b1.Free()
	_ = b2.Free()
}

// TestAsyncWaitDelivers: a copy to the host writes dst only in Wait, and
// Wait blocks until the stream has run the copy.
func TestAsyncWaitDelivers(t *testing.T) {
	a, d := newAlloc(t, 1<<30, alloc.Config{})
	s := d.NewStream()
	b, _ := a.Alloc(6<<20, s)
	want := asyncPattern(6<<20, 9)
	if err := b.CopyFromHost(want); err != nil {
		t.Fatal(err)
	}
	d.HoldEvents(true)
	dst := make([]byte, 6<<20)
	tr, err := b.CopyToHostAsync(dst, s)
	if err != nil {
		t.Fatal(err)
	}
	if ready, err := tr.Ready(); ready || err != nil {
		t.Fatalf("Ready = %v, %v before the stream ran", ready, err)
	}
	if dst[1] != 0 {
		t.Fatal("dst written before Wait")
	}
	done := make(chan error)
	go func() { done <- tr.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) before the stream ran", err)
	case <-time.After(20 * time.Millisecond):
	}
	d.CompleteStream(s)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, want) {
		t.Fatal("Wait delivered the wrong bytes")
	}
	if ready, err := tr.Ready(); !ready || err != nil {
		t.Errorf("Ready = %v, %v after Wait", ready, err)
	}
	_ = b.Free()
}

// noAsync hides the simulated device's asynchronous copies.
type noAsync struct{ alloc.Device }

func TestAsyncErrors(t *testing.T) {
	a, d := newAlloc(t, 1<<30, alloc.Config{})
	plain, err := alloc.New(noAsync{d}, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := a.Alloc(100, 0)
	pb, _ := plain.Alloc(100, 0)
	freed, _ := a.Alloc(100, 0)
	_ = freed.Free()
	view, _ := b.Slice(10, 20)
	pageable := make([]byte, 64)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"no async copier, from host", second(pb.CopyFromHostAsync(pageable, 0)), alloc.ErrNoAsyncCopy},
		{"no async copier, to host", second(pb.CopyToHostAsync(pageable, 0)), alloc.ErrNoAsyncCopy},
		{"too long, from host", second(b.CopyFromHostAsync(make([]byte, 101), 0)), alloc.ErrOutOfRange},
		{"too long, to host", second(view.CopyToHostAsync(make([]byte, 21), 0)), alloc.ErrOutOfRange},
		{"freed, from host", second(freed.CopyFromHostAsync(pageable, 0)), alloc.ErrFreed},
		{"freed, to host", second(freed.CopyToHostAsync(pageable, 0)), alloc.ErrFreed},
		{"free async of a view", view.FreeAsync(0), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			if tc.want != nil && !errors.Is(tc.err, tc.want) {
				t.Fatalf("error %q does not wrap %q", tc.err, tc.want)
			}
		})
	}
	// Empty copies need no backend support and complete at once.
	for _, tr := range []*alloc.Transfer{must(pb.CopyFromHostAsync(nil, 0)), must(pb.CopyToHostAsync(nil, 0))} {
		if err := tr.Wait(); err != nil {
			t.Errorf("empty transfer: %v", err)
		}
	}
	if n := d.Calls().CopyHtoDAsync + d.Calls().CopyDtoHAsync; n != 0 {
		t.Errorf("%d asynchronous copies reached the device; all were refused", n)
	}
	_ = b.Free()
	_ = pb.Free()
}

func second[T any](_ T, err error) error { return err }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestFreeAsync: freed in stream order on another stream, the block is not
// handed out again until that stream's event completes; on its own stream
// it is reused at once.
func TestFreeAsync(t *testing.T) {
	for _, tc := range []struct {
		name       string
		other      bool
		reuseEarly bool
	}{
		{"own stream", false, true},
		{"other stream", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, d := newAlloc(t, 1<<30, alloc.Config{})
			own, side := d.NewStream(), d.NewStream()
			d.HoldEvents(true)
			b, _ := a.Alloc(1<<20, own)
			p := b.Ptr()
			s := own
			if tc.other {
				s = side
			}
			if err := b.FreeAsync(s); err != nil {
				t.Fatal(err)
			}
			c, _ := a.Alloc(1<<20, own)
			if got := c.Ptr() == p; got != tc.reuseEarly {
				t.Fatalf("reused before the event completed: %v, want %v", got, tc.reuseEarly)
			}
			_ = c.Free()
			d.CompleteStream(side)
			e, _ := a.Alloc(1<<20, own)
			if e.Ptr() != p {
				t.Error("block not reused after the stream's event completed")
			}
			_ = e.Free()
			if err := b.FreeAsync(s); !errors.Is(err, alloc.ErrDoubleFree) && !errors.Is(err, alloc.ErrFreed) {
				t.Errorf("second FreeAsync: %v, want a double free", err)
			}
		})
	}
}

// TestAsyncCrossStreamFree: a buffer freed right after an asynchronous copy
// on another stream waits for that copy (the copy recorded the use).
func TestAsyncCrossStreamFree(t *testing.T) {
	a, d := newAlloc(t, 1<<30, alloc.Config{})
	own, side := d.NewStream(), d.NewStream()
	b, _ := a.Alloc(4096, own)
	p := b.Ptr()
	d.HoldEvents(true)
	if _, err := b.CopyFromHostAsync(asyncPattern(4096, 5), side); err != nil {
		t.Fatal(err)
	}
	_ = b.Free()
	c, _ := a.Alloc(4096, own)
	if c.Ptr() == p {
		t.Fatal("memory of a buffer with a copy in flight on another stream was reused")
	}
	_ = c.Free()
	d.CompleteEvents()
	if err := d.AsyncError(); err != nil {
		t.Fatalf("the copy ran after its memory was freed: %v", err)
	}
}

// TestAsyncAbandoned: a copy to the host dropped without Wait is counted
// and its staging buffer goes back once the copy is done.
func TestAsyncAbandoned(t *testing.T) {
	a, _ := newAlloc(t, 1<<30, alloc.Config{})
	b, _ := a.Alloc(4096, 0)
	func() {
		_, err := b.CopyToHostAsync(make([]byte, 4096), 0)
		if err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for a.Transfers().Abandoned == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	st := a.Transfers()
	if st.Abandoned != 1 || st.InFlight != 0 {
		t.Errorf("Transfers = %+v, want 1 abandoned, none in flight", st)
	}
	pool, _ := a.PinnedPool()
	if inUse, _ := pool.Usage(); inUse != 0 {
		t.Errorf("%d pinned bytes still out", inUse)
	}
	_ = b.Free()
}

// TestAsyncConcurrent runs round trips from several goroutines, each on its
// own stream, while another goroutine completes the streams at random.
func TestAsyncConcurrent(t *testing.T) {
	a, d := newAlloc(t, 1<<30, alloc.Config{})
	d.HoldEvents(true)
	stop := make(chan struct{})
	var completer sync.WaitGroup
	completer.Add(1)
	go func() {
		defer completer.Done()
		for {
			select {
			case <-stop:
				return
			default:
				d.CompleteEvents()
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		s := d.NewStream()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				n := 1 + (w*977+i*4099)%(64<<10)
				b, err := a.Alloc(uint64(n), s)
				if err != nil {
					errs <- err
					return
				}
				src := asyncPattern(n, byte(w*31+i))
				if _, err := b.CopyFromHostAsync(src, s); err != nil {
					errs <- err
					return
				}
				dst := make([]byte, n)
				tr, err := b.CopyToHostAsync(dst, s)
				if err == nil {
					err = tr.Wait()
				}
				if err == nil && !bytes.Equal(dst, src) {
					err = fmt.Errorf("worker %d, copy %d: wrong bytes", w, i)
				}
				if err == nil {
					err = b.FreeAsync(s)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	completer.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	d.CompleteEvents()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if h := d.Stats().HostBytes; h != 0 {
		t.Errorf("%d pinned bytes left after Close", h)
	}
}
