package dlpack

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

func newAlloc(t *testing.T) *alloc.Allocator {
	t.Helper()
	a, err := alloc.New(sim.MustNew(sim.Config{Capacity: 256 << 20}), alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := Live(); n != 0 {
			t.Errorf("%d exported tensors still live at the end", n)
		}
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// deleteErrors collects what OnDeleteError receives during a test.
func deleteErrors(t *testing.T) *[]error {
	var (
		mu   sync.Mutex
		errs []error
	)
	old := OnDeleteError
	OnDeleteError = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	t.Cleanup(func() { OnDeleteError = old })
	return &errs
}

func live(a *alloc.Allocator) int64 { return a.Stats().Allocation.All.Current }

func TestExportFields(t *testing.T) {
	a := newAlloc(t)
	b, err := a.Alloc(4*3*5, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Export(b, Spec{Shape: []int64{3, 5}, DType: Float32, Device: Device{CUDA, 2}, IsCopied: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != (Version{MajorVersion, MinorVersion}) {
		t.Errorf("version %+v", m.Version)
	}
	if m.Flags != FlagIsCopied {
		t.Errorf("flags %#x, want is-copied only", m.Flags)
	}
	dt := m.DLTensor
	if dt.Data != uintptr(b.Ptr()) || dt.ByteOffset != 0 || dt.NDim != 2 || dt.DType != Float32 || dt.Device != (Device{CUDA, 2}) {
		t.Errorf("tensor %+v", dt)
	}
	if got := unsafe.Slice(dt.Shape, 2); got[0] != 3 || got[1] != 5 {
		t.Errorf("shape %v", got)
	}
	if got := unsafe.Slice(dt.Strides, 2); got[0] != 5 || got[1] != 1 {
		t.Errorf("strides %v, want the compact [5 1]", got)
	}
	if got, ok := Exported(m); !ok || got != b {
		t.Errorf("Exported: %p %v", got, ok)
	}
	if live(a) != 1 {
		t.Fatalf("%d live allocations before the deleter", live(a))
	}
	Delete(m)
	if live(a) != 0 {
		t.Errorf("%d live allocations after the deleter: the memory did not go back", live(a))
	}
	if _, err := b.Slice(0, 1); !errors.Is(err, alloc.ErrFreed) {
		t.Errorf("buffer after the deleter: %v, want ErrFreed", err)
	}
}

// TestExportViewsShareTheAllocation exports two views and a shared copy:
// the allocation goes back after the last deleter only.
func TestExportViewsShareTheAllocation(t *testing.T) {
	a := newAlloc(t)
	b, err := a.Alloc(8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	v1, _ := b.Slice(0, 4096)
	v2, _ := b.Slice(4096, 4096)
	m1, err := Export(v1, Spec{Shape: []int64{1024}, DType: Float32})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := ExportLegacy(v2, Spec{Shape: []int64{64, 8}, Strides: []int64{8, 1}, DType: Float64})
	if err != nil {
		t.Fatal(err)
	}
	if m2.DLTensor.Data != uintptr(b.Ptr()+4096) {
		t.Errorf("view exported at %#x, want %#x", m2.DLTensor.Data, b.Ptr()+4096)
	}
	p3, err := Share(m1, false)
	if err != nil {
		t.Fatal(err)
	}
	m3 := (*ManagedTensorVersioned)(p3)
	if m3.DLTensor.Data != m1.DLTensor.Data || m3.ManagerCtx == m1.ManagerCtx {
		t.Errorf("shared tensor: data %#x ctx %d; first: %#x ctx %d", m3.DLTensor.Data, m3.ManagerCtx, m1.DLTensor.Data, m1.ManagerCtx)
	}
	for i, del := range []func(){func() { Delete(m1) }, func() { DeleteLegacy(m2) }, func() { Delete(m3) }} {
		if live(a) != 1 {
			t.Fatalf("before deleter %d: %d live allocations, want 1", i, live(a))
		}
		del()
	}
	if live(a) != 0 {
		t.Errorf("after every deleter: %d live allocations", live(a))
	}
	if _, err := Share(m1, false); err == nil {
		t.Error("Share of a deleted tensor succeeded")
	}
}

func TestExportRefuses(t *testing.T) {
	a := newAlloc(t)
	b, err := a.Alloc(1024, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Free() }()
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"larger than the buffer", Spec{Shape: []int64{257}, DType: Float32}, "spans 1028 bytes, the buffer holds 1024"},
		{"strides pass the end", Spec{Shape: []int64{2, 2}, Strides: []int64{300, 1}, DType: Float32}, "spans 1208 bytes"},
		{"overflow", Spec{Shape: []int64{1 << 40, 1 << 30}, DType: Float32}, "size overflow"},
		{"negative dimension", Spec{Shape: []int64{-1}, DType: Float32}, "negative"},
		{"sub-byte type", Spec{Shape: []int64{4}, DType: DataType{Float, 4, 1}}, "whole number of bytes"},
		{"stride count", Spec{Shape: []int64{4}, Strides: []int64{1, 1}, DType: UInt8}, "2 strides for 1 dimensions"},
	}
	for _, c := range cases {
		_, err := Export(b, c.spec)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
	}
	if live(a) != 1 || Live() != 0 {
		t.Errorf("refused exports left %d tensors, %d allocations", Live(), live(a))
	}
	c, _ := a.Alloc(16, 0)
	_ = c.Free()
	if _, err := Export(c, Spec{Shape: []int64{4}, DType: Float32}); !errors.Is(err, alloc.ErrFreed) {
		t.Errorf("export of a freed buffer: %v, want ErrFreed", err)
	}
}

// TestImportRoundTrip exports vram memory and imports it back, as another
// framework's tensor would be: same address, data visible, and the Free
// of the import calls the producer's deleter exactly once.
func TestImportRoundTrip(t *testing.T) {
	a := newAlloc(t)
	for _, legacy := range []bool{false, true} {
		b, err := a.Alloc(64, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{7, 8}, 32)
		if err := b.CopyFromHost(want); err != nil {
			t.Fatal(err)
		}
		deleted := 0
		deletedHook = func(uintptr) { deleted++ }
		spec := Spec{Shape: []int64{4, 4}, DType: Int32, Device: Device{CUDA, 0}}
		var im *Imported
		if legacy {
			m, err := ExportLegacy(b, spec)
			if err != nil {
				t.Fatal(err)
			}
			im, err = ImportLegacy(a, m, ImportOptions{DeviceID: 0})
			if err != nil {
				t.Fatal(err)
			}
		} else {
			m, err := Export(b, spec)
			if err != nil {
				t.Fatal(err)
			}
			if im, err = Import(a, m, ImportOptions{DeviceID: 0}); err != nil {
				t.Fatal(err)
			}
			if im.Version != (Version{MajorVersion, MinorVersion}) {
				t.Errorf("imported version %+v", im.Version)
			}
		}
		if im.Buffer.Ptr() != b.Ptr() || im.Buffer.Len() != 64 {
			t.Errorf("legacy %v: imported %#x+%d, exported %#x+64", legacy, im.Buffer.Ptr(), im.Buffer.Len(), b.Ptr())
		}
		if im.DType != Int32 || len(im.Shape) != 2 || im.Strides[0] != 4 || im.Strides[1] != 1 || im.ReadOnly {
			t.Errorf("imported %+v", im)
		}
		got := make([]byte, 64)
		if err := im.Buffer.CopyToHost(got); err != nil || !bytes.Equal(got, want) {
			t.Errorf("read through the import: %v", err)
		}
		if err := im.Buffer.Free(); err != nil {
			t.Fatal(err)
		}
		if err := im.Buffer.Free(); !errors.Is(err, alloc.ErrDoubleFree) {
			t.Errorf("second Free: %v", err)
		}
		deletedHook = nil
		if deleted != 1 {
			t.Errorf("legacy %v: deleter ran %d times, want 1", legacy, deleted)
		}
		if live(a) != 0 {
			t.Errorf("%d allocations live after the import's Free", live(a))
		}
	}
}

func TestReadOnlyFlag(t *testing.T) {
	a := newAlloc(t)
	b, _ := a.Alloc(16, 0)
	m, err := Export(b, Spec{Shape: []int64{16}, DType: UInt8, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Flags&FlagReadOnly == 0 {
		t.Fatalf("flags %#x: read-only not set", m.Flags)
	}
	im, err := Import(a, m, ImportOptions{DeviceID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !im.ReadOnly || !im.Buffer.ReadOnly() {
		t.Error("read-only flag lost on import")
	}
	if err := im.Buffer.Memset(0); !errors.Is(err, alloc.ErrReadOnly) {
		t.Errorf("memset of a read-only import: %v", err)
	}
	if err := im.Buffer.CopyToHost(make([]byte, 16)); err != nil {
		t.Errorf("read of a read-only import: %v", err)
	}
	// A read-only buffer exports read-only even when the spec does not say so.
	m2, err := Export(im.Buffer, Spec{Shape: []int64{16}, DType: UInt8})
	if err != nil {
		t.Fatal(err)
	}
	if m2.Flags&FlagReadOnly == 0 {
		t.Error("re-export of a read-only buffer is not read-only")
	}
	Delete(m2) // frees im.Buffer, which calls m's deleter
	if live(a) != 0 || Live() != 0 {
		t.Errorf("after the deleters: %d allocations, %d tensors", live(a), Live())
	}
}

// TestImportRefuses corrupts one field of an exported tensor at a time:
// Import must refuse it with a message naming the problem and leave it to
// the caller, whose deleter then still works.
func TestImportRefuses(t *testing.T) {
	a := newAlloc(t)
	cases := []struct {
		name    string
		corrupt func(m *ManagedTensorVersioned)
		want    string
	}{
		{"device type", func(m *ManagedTensorVersioned) { m.DLTensor.Device.Type = CPU }, "device type kDLCPU (1)"},
		{"device index", func(m *ManagedTensorVersioned) { m.DLTensor.Device.ID = 3 }, "on device 3"},
		{"null data", func(m *ManagedTensorVersioned) { m.DLTensor.Data = 0 }, "null data pointer for a tensor of 64 bytes"},
		{"major version", func(m *ManagedTensorVersioned) { m.Version.Major = 2 }, "version 2.1"},
		{"version 0", func(m *ManagedTensorVersioned) { m.Version = Version{} }, "version 0.0"},
		{"overflow", func(m *ManagedTensorVersioned) { unsafe.Slice(m.DLTensor.Shape, 2)[0] = 1 << 61 }, "size overflow"},
		{"ndim", func(m *ManagedTensorVersioned) { m.DLTensor.NDim = -1 }, "ndim -1"},
		{"lanes", func(m *ManagedTensorVersioned) { m.DLTensor.DType.Lanes = 0 }, "0 lanes"},
		{"negative stride", func(m *ManagedTensorVersioned) { unsafe.Slice(m.DLTensor.Strides, 2)[1] = -1 }, "negative strides"},
		{"address overflow", func(m *ManagedTensorVersioned) { m.DLTensor.ByteOffset = ^uint64(0) }, "overflows"},
		{"padded sub-byte", func(m *ManagedTensorVersioned) { m.Flags |= FlagSubbyteTypePadded }, "sub-byte"},
	}
	for _, c := range cases {
		b, _ := a.Alloc(64, 0)
		m, err := Export(b, Spec{Shape: []int64{4, 4}, DType: Float32})
		if err != nil {
			t.Fatal(err)
		}
		saved := *m
		shape := append([]int64(nil), unsafe.Slice(m.DLTensor.Shape, 2)...)
		strides := append([]int64(nil), unsafe.Slice(m.DLTensor.Strides, 2)...)
		c.corrupt(m)
		_, err = Import(a, m, ImportOptions{DeviceID: 0})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", c.name, err, c.want)
		}
		*m = saved
		copy(unsafe.Slice(m.DLTensor.Shape, 2), shape)
		copy(unsafe.Slice(m.DLTensor.Strides, 2), strides)
		Delete(m)
	}
	if _, err := Import(a, nil, ImportOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("null tensor: %v", err)
	}
	if live(a) != 0 {
		t.Errorf("%d allocations live: a refused import kept its tensor", live(a))
	}
}

func TestDeleterCalledTwiceIsReported(t *testing.T) {
	a := newAlloc(t)
	errs := deleteErrors(t)
	b, _ := a.Alloc(16, 0)
	m, err := Export(b, Spec{Shape: []int64{4}, DType: Float32})
	if err != nil {
		t.Fatal(err)
	}
	ctx := m.ManagerCtx
	Delete(m)
	// A second call on the same (now freed) struct: simulate it through a
	// copy that still names the export.
	var fake ManagedTensorVersioned
	fake.ManagerCtx, fake.Deleter = ctx, m.Deleter
	_ = m // m's memory is freed; do not read it again
	Delete(&fake)
	if len(*errs) != 1 || !strings.Contains((*errs)[0].Error(), "not live") {
		t.Errorf("deleter errors %v", *errs)
	}
}

func TestZeroDimAndEmpty(t *testing.T) {
	a := newAlloc(t)
	b, _ := a.Alloc(8, 0)
	m, err := Export(b, Spec{Shape: []int64{}, DType: Float64}) // a scalar
	if err != nil {
		t.Fatal(err)
	}
	im, err := Import(a, m, ImportOptions{DeviceID: -1})
	if err != nil {
		t.Fatal(err)
	}
	if im.Buffer.Len() != 8 || len(im.Shape) != 0 {
		t.Errorf("scalar: %d bytes, shape %v", im.Buffer.Len(), im.Shape)
	}
	if err := im.Buffer.Free(); err != nil {
		t.Fatal(err)
	}
	// An empty tensor may have a null data pointer.
	c, _ := a.Alloc(8, 0)
	m, err = Export(c, Spec{Shape: []int64{0, 5}, DType: Float32})
	if err != nil {
		t.Fatal(err)
	}
	data := m.DLTensor.Data
	m.DLTensor.Data = 0
	im, err = Import(a, m, ImportOptions{DeviceID: -1})
	if err != nil {
		t.Fatalf("empty tensor with a null pointer: %v", err)
	}
	m.DLTensor.Data = data
	if im.Buffer.Len() != 0 {
		t.Errorf("empty tensor: %d bytes", im.Buffer.Len())
	}
	if err := im.Buffer.Free(); err != nil {
		t.Fatal(err)
	}
	if live(a) != 0 {
		t.Errorf("%d allocations live", live(a))
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		dt      DataType
		shape   []int64
		strides []int64
		span    uint64
		outStr  []int64
	}{
		{Float32, []int64{2, 3}, nil, 24, []int64{3, 1}},
		{Float32, []int64{2, 3}, []int64{1, 2}, 24, []int64{1, 2}},   // column-major
		{Float32, []int64{2, 3}, []int64{0, 1}, 12, []int64{0, 1}},   // broadcast
		{Float32, []int64{2, 3}, []int64{10, 1}, 52, []int64{10, 1}}, // padded rows
		{DataType{Float, 32, 4}, []int64{5}, nil, 80, []int64{1}},
		{Float16, []int64{}, nil, 2, []int64{}},
		{Float16, []int64{3, 0, 2}, nil, 0, []int64{2, 2, 1}},
	}
	for _, c := range cases {
		span, st, err := Check(c.dt, c.shape, c.strides)
		if err != nil || span != c.span || !equal(st, c.outStr) {
			t.Errorf("Check(%v, %v, %v) = %d, %v, %v; want %d, %v", c.dt, c.shape, c.strides, span, st, err, c.span, c.outStr)
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
