package alloc_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/vramhq/vram/alloc"
)

// TestWrap checks a Buffer over memory the allocator does not own: data
// goes through the device, Free releases once, views share the state, and
// the read-only flag refuses every write.
func TestWrap(t *testing.T) {
	a, dev := newAlloc(t, 64<<20, alloc.Config{})
	region, err := dev.Malloc(1 << 20) // memory "of another framework"
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dev.Free(region) }()

	for _, readOnly := range []bool{false, true} {
		releases := 0
		b := a.Wrap(region, 4096, 0, alloc.WrapOptions{ReadOnly: readOnly, Release: func() error { releases++; return nil }})
		if b.Ptr() != region || b.Len() != 4096 || b.ReadOnly() != readOnly {
			t.Fatalf("Wrap: ptr %#x len %d read-only %v", b.Ptr(), b.Len(), b.ReadOnly())
		}
		v, err := b.Slice(1024, 1024)
		if err != nil {
			t.Fatal(err)
		}
		if v.ReadOnly() != readOnly || v.Owner() != b {
			t.Errorf("view: read-only %v, owner %p, want %v, %p", v.ReadOnly(), v.Owner(), readOnly, b)
		}
		want := bytes.Repeat([]byte{0x5a}, 1024)
		if err := dev.CopyHtoD(region+1024, want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1024)
		if err := v.CopyToHost(got); err != nil || !bytes.Equal(got, want) {
			t.Errorf("read through a view: %v, equal %v", err, bytes.Equal(got, want))
		}
		own, err := a.Alloc(1024, 0)
		if err != nil {
			t.Fatal(err)
		}
		writes := map[string]error{
			"CopyFromHost": v.CopyFromHost(want),
			"Memset":       b.Memset(1),
			"CopyFrom":     v.CopyFrom(own),
		}
		for op, err := range writes {
			if readOnly && !errors.Is(err, alloc.ErrReadOnly) {
				t.Errorf("read-only %s: %v, want ErrReadOnly", op, err)
			}
			if !readOnly && err != nil {
				t.Errorf("%s: %v", op, err)
			}
		}
		// Reading from a read-only buffer into one of ours works.
		if err := own.CopyFrom(v); err != nil {
			t.Errorf("copy out of a wrapped buffer: %v", err)
		}
		if err := own.Free(); err != nil {
			t.Fatal(err)
		}
		if err := v.Free(); err == nil {
			t.Error("Free of a view of a wrapped buffer succeeded")
		}
		if err := b.Free(); err != nil {
			t.Fatalf("Free: %v", err)
		}
		if err := b.Free(); !errors.Is(err, alloc.ErrDoubleFree) {
			t.Errorf("second Free: %v, want ErrDoubleFree", err)
		}
		if releases != 1 {
			t.Errorf("release called %d times, want 1", releases)
		}
		if err := v.CopyToHost(got); !errors.Is(err, alloc.ErrFreed) {
			t.Errorf("read after Free: %v, want ErrFreed", err)
		}
		if st := a.Stats(); st.Allocation.All.Current != 0 {
			t.Errorf("wrapped memory counted as %d live allocations", st.Allocation.All.Current)
		}
	}

	// A release that fails is reported, and still counts as the one call.
	b := a.Wrap(region, 0, 0, alloc.WrapOptions{Release: func() error { return errors.New("boom") }})
	if err := b.Free(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("boom")) {
		t.Errorf("Free with a failing release: %v", err)
	}
	if err := b.Free(); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Errorf("Free after a failed release: %v, want ErrDoubleFree", err)
	}
}
