package dlpack

import (
	"testing"
	"unsafe"
)

// TestLayout compares the Go declarations with the C compiler's layout of
// dlpack.h and with the sizes that the DLPack specification implies for a
// 64-bit platform.
func TestLayout(t *testing.T) {
	var (
		tn ManagedTensor
		tv ManagedTensorVersioned
		x  Tensor
	)
	rows := []struct {
		name   string
		goVal  uintptr
		spec64 uintptr
	}{
		{"sizeof(DLDevice)", unsafe.Sizeof(Device{}), 8},
		{"sizeof(DLDataType)", unsafe.Sizeof(DataType{}), 4},
		{"sizeof(DLTensor)", unsafe.Sizeof(x), 48},
		{"DLTensor.data", unsafe.Offsetof(x.Data), 0},
		{"DLTensor.device", unsafe.Offsetof(x.Device), 8},
		{"DLTensor.ndim", unsafe.Offsetof(x.NDim), 16},
		{"DLTensor.dtype", unsafe.Offsetof(x.DType), 20},
		{"DLTensor.shape", unsafe.Offsetof(x.Shape), 24},
		{"DLTensor.strides", unsafe.Offsetof(x.Strides), 32},
		{"DLTensor.byte_offset", unsafe.Offsetof(x.ByteOffset), 40},
		{"sizeof(DLManagedTensor)", unsafe.Sizeof(tn), 64},
		{"DLManagedTensor.dl_tensor", unsafe.Offsetof(tn.DLTensor), 0},
		{"DLManagedTensor.manager_ctx", unsafe.Offsetof(tn.ManagerCtx), 48},
		{"DLManagedTensor.deleter", unsafe.Offsetof(tn.Deleter), 56},
		{"sizeof(DLManagedTensorVersioned)", unsafe.Sizeof(tv), 80},
		{"DLManagedTensorVersioned.version", unsafe.Offsetof(tv.Version), 0},
		{"DLManagedTensorVersioned.manager_ctx", unsafe.Offsetof(tv.ManagerCtx), 8},
		{"DLManagedTensorVersioned.deleter", unsafe.Offsetof(tv.Deleter), 16},
		{"DLManagedTensorVersioned.flags", unsafe.Offsetof(tv.Flags), 24},
		{"DLManagedTensorVersioned.dl_tensor", unsafe.Offsetof(tv.DLTensor), 32},
	}
	c := cLayout()
	if len(c) != len(rows) {
		t.Fatalf("C layout has %d entries, the test %d", len(c), len(rows))
	}
	for i, r := range rows {
		if r.goVal != c[i] {
			t.Errorf("%s: Go %d, C %d", r.name, r.goVal, c[i])
		}
		if unsafe.Sizeof(uintptr(0)) == 8 && r.goVal != r.spec64 {
			t.Errorf("%s: %d, the specification's 64-bit layout says %d", r.name, r.goVal, r.spec64)
		}
	}
	// DLDataType's fields, DLPackVersion and DLDevice are declared field
	// for field; check the packing of the 4-byte type too.
	var dt DataType
	if unsafe.Offsetof(dt.Bits) != 1 || unsafe.Offsetof(dt.Lanes) != 2 {
		t.Errorf("DLDataType: bits at %d, lanes at %d, want 1 and 2", unsafe.Offsetof(dt.Bits), unsafe.Offsetof(dt.Lanes))
	}
}
