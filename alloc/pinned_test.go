package alloc

import "testing"

// heapHost hands out Go memory as if it were pinned.
type heapHost struct{}

func (heapHost) HostAlloc(n uint64) ([]byte, error) { return make([]byte, n), nil }
func (heapHost) HostFree([]byte) error              { return nil }

// TestPinnedAcquire: acquire finds the handed-out buffer that holds all of
// a slice, and a Put while it is acquired is deferred until the last
// release.
func TestPinnedAcquire(t *testing.T) {
	var h heapHost
	p := NewPinnedPool(h)
	var bufs [3][]byte
	for i := range bufs {
		b, err := p.Get(8 << 10)
		if err != nil {
			t.Fatal(err)
		}
		bufs[i] = b[:cap(b)]
	}
	foreign, _ := h.HostAlloc(8 << 10)
	for _, tc := range []struct {
		name string
		b    []byte
		want []byte // the buffer acquired, nil for none
	}{
		{"whole", bufs[1], bufs[1]},
		{"first byte", bufs[0][:1], bufs[0]},
		{"last byte", bufs[2][8<<10-1:], bufs[2]},
		{"middle", bufs[1][100:5000], bufs[1]},
		{"empty", bufs[1][:0], nil},
		{"pinned memory of no pool", foreign, nil},
		{"Go heap", make([]byte, 64), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := p.acquire(tc.b)
			if (e == nil) != (tc.want == nil) || (e != nil && &e.b[0] != &tc.want[0]) {
				t.Fatalf("acquire found %v, want the buffer at %p", e, tc.want)
			}
			if e != nil {
				p.release(e)
			}
		})
	}
	e1, e2 := p.acquire(bufs[0]), p.acquire(bufs[0][10:20])
	if e1 == nil || e1 != e2 {
		t.Fatal("two uses of one buffer not counted on it")
	}
	if err := p.Put(bufs[0]); err != nil {
		t.Fatal(err)
	}
	if p.acquire(bufs[0]) != nil {
		t.Error("a buffer put back (deferred) was acquired again")
	}
	p.release(e1)
	if inUse, cached := p.Usage(); inUse != 3*(8<<10) || cached != 0 {
		t.Errorf("with one use left: %d in use, %d cached; want the Put still deferred", inUse, cached)
	}
	p.release(e2)
	if inUse, cached := p.Usage(); inUse != 2*(8<<10) || cached != 8<<10 {
		t.Errorf("after the last use: %d in use, %d cached; want the buffer back", inUse, cached)
	}
	if got, _ := p.Get(8 << 10); &got[0] != &bufs[0][0] {
		t.Error("the buffer taken back is not handed out again")
	}
}
