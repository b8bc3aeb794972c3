package dlpack

/*
#include <stdlib.h>
#include "dlpack.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/vramhq/vram/alloc"
)

// Spec describes the tensor that Export makes of a buffer.
type Spec struct {
	Shape []int64
	// Strides in elements; nil: compact row-major (the exported tensor
	// always carries its strides).
	Strides []int64
	DType   DataType
	// Device is reported to the consumer; the zero value means kDLCUDA,
	// device 0.
	Device Device
	// ReadOnly sets the read-only flag (always set for a read-only
	// Buffer); IsCopied sets the is-copied flag. Legacy tensors carry no
	// flags.
	ReadOnly, IsCopied bool
}

// owner counts the tensors exported from one allocation.
type owner struct {
	root *alloc.Buffer
	refs int
}

// export is one tensor handed to a consumer.
type export struct {
	o      *owner
	view   *alloc.Buffer
	spec   Spec
	legacy bool
	mem    unsafe.Pointer // the C memory of the managed struct, shape and strides
}

var (
	mu      sync.Mutex
	exports = map[uintptr]*export{} // manager_ctx → export
	owners  = map[*alloc.Buffer]*owner{}
	lastID  uintptr
)

// OnDeleteError receives the errors that a deleter, called by a consumer,
// has no caller to report to (a Free that failed, a deleter called twice).
// By default they are written to standard error. Set it before any Export.
var OnDeleteError = func(err error) { fmt.Fprintf(os.Stderr, "vram: %v\n", err) }

// deletedHook, when set (tests), is called after each deleter has run.
var deletedHook func(ctx uintptr)

// Export makes a DLManagedTensorVersioned of b (a Buffer or a view of one)
// for a consumer, which calls its deleter once when done. The tensor takes
// the allocation of b's owner over: its memory returns to the allocator
// when the deleter of the last tensor exported from it has run, and the
// caller must not Free the owner itself. The tensor must fit in b.
func Export(b *alloc.Buffer, s Spec) (*ManagedTensorVersioned, error) {
	p, err := newExport(b, s, false)
	return (*ManagedTensorVersioned)(p), err
}

// ExportLegacy is Export for consumers that take only the legacy
// DLManagedTensor (no version, no flags).
func ExportLegacy(b *alloc.Buffer, s Spec) (*ManagedTensor, error) {
	p, err := newExport(b, s, true)
	return (*ManagedTensor)(p), err
}

// Share makes another tensor of the memory, shape and type of m, which
// Export (or Share) made and whose deleter has not run; legacy chooses the
// kind. The memory returns to the allocator after every such tensor's
// deleter has run.
func Share(m *ManagedTensorVersioned, legacy bool) (unsafe.Pointer, error) {
	if m == nil {
		return nil, fmt.Errorf("dlpack: share of a null tensor")
	}
	mu.Lock()
	e, ok := exports[m.ManagerCtx]
	if ok && e.mem != unsafe.Pointer(m) {
		ok = false
	}
	mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("dlpack: share of a tensor that this package did not export, or whose deleter has run")
	}
	return newExport(e.view, e.spec, legacy)
}

// Exported reports the buffer (view) a tensor made by Export or Share was
// made of, while its deleter has not run.
func Exported(m *ManagedTensorVersioned) (*alloc.Buffer, bool) {
	if m == nil {
		return nil, false
	}
	mu.Lock()
	defer mu.Unlock()
	e, ok := exports[m.ManagerCtx]
	if !ok || e.mem != unsafe.Pointer(m) {
		return nil, false
	}
	return e.view, true
}

func newExport(b *alloc.Buffer, s Spec, legacy bool) (unsafe.Pointer, error) {
	if b == nil {
		return nil, fmt.Errorf("dlpack: export of a nil buffer")
	}
	span, strides, err := Check(s.DType, s.Shape, s.Strides)
	if err != nil {
		return nil, fmt.Errorf("dlpack: export of buffer %#x: %w", b.Ptr(), err)
	}
	if span > b.Len() {
		return nil, fmt.Errorf("dlpack: export of buffer %#x: %w: shape %v of %v spans %d bytes, the buffer holds %d",
			b.Ptr(), ErrInvalid, s.Shape, s.DType, span, b.Len())
	}
	if _, err := b.Slice(0, 0); err != nil { // fails once the buffer is freed
		return nil, fmt.Errorf("dlpack: export: %w", err)
	}
	if s.Device == (Device{}) {
		s.Device = Device{Type: CUDA}
	}
	if b.ReadOnly() {
		s.ReadOnly = true
	}
	s.Strides = strides
	s.Shape = append([]int64(nil), s.Shape...)

	head := C.size_t(unsafe.Sizeof(ManagedTensorVersioned{}))
	if legacy {
		head = C.size_t(unsafe.Sizeof(ManagedTensor{}))
	}
	nd := len(s.Shape)
	mem := C.calloc(1, head+C.size_t(16*max(nd, 1)))
	if mem == nil {
		return nil, fmt.Errorf("dlpack: export: out of host memory")
	}
	shape := unsafe.Slice((*int64)(unsafe.Add(mem, head)), nd)
	strd := unsafe.Slice((*int64)(unsafe.Add(mem, uintptr(head)+uintptr(8*nd))), nd)
	copy(shape, s.Shape)
	copy(strd, s.Strides)
	t := Tensor{Data: uintptr(b.Ptr()), Device: s.Device, NDim: int32(nd), DType: s.DType}
	if nd > 0 {
		t.Shape, t.Strides = &shape[0], &strd[0]
	} else {
		// A 0-d tensor: valid (non-null) pointers to no elements.
		t.Shape = (*int64)(unsafe.Add(mem, head))
		t.Strides = t.Shape
	}

	mu.Lock()
	lastID++
	id := lastID
	root := b.Owner()
	o := owners[root]
	if o == nil {
		o = &owner{root: root}
		owners[root] = o
	}
	o.refs++
	exports[id] = &export{o: o, view: b, spec: s, legacy: legacy, mem: mem}
	mu.Unlock()

	if legacy {
		m := (*ManagedTensor)(mem)
		m.DLTensor, m.ManagerCtx = t, id
		m.Deleter = uintptr(unsafe.Pointer(C.vram_dlpack_delete_legacy))
	} else {
		m := (*ManagedTensorVersioned)(mem)
		m.Version = Version{MajorVersion, MinorVersion}
		m.DLTensor, m.ManagerCtx = t, id
		m.Deleter = uintptr(unsafe.Pointer(C.vram_dlpack_delete_versioned))
		if s.ReadOnly {
			m.Flags |= FlagReadOnly
		}
		if s.IsCopied {
			m.Flags |= FlagIsCopied
		}
	}
	return mem, nil
}

//export vramDLPackDeleted
func vramDLPackDeleted(self unsafe.Pointer, ctx C.uintptr_t) {
	id := uintptr(ctx)
	mu.Lock()
	e, ok := exports[id]
	if ok && e.mem != self {
		ok = false
	}
	var free *alloc.Buffer
	if ok {
		delete(exports, id)
		if e.o.refs--; e.o.refs == 0 {
			delete(owners, e.o.root)
			free = e.o.root
		}
	}
	mu.Unlock()
	if !ok {
		OnDeleteError(fmt.Errorf("dlpack: deleter called on a tensor that is not live (called twice?)"))
		return
	}
	C.free(self)
	if free != nil {
		if err := free.Free(); err != nil {
			OnDeleteError(fmt.Errorf("dlpack: deleter: %w", err))
		}
	}
	if deletedHook != nil {
		deletedHook(id)
	}
}

// Live reports the number of exported tensors whose deleter has not run.
func Live() int {
	mu.Lock()
	defer mu.Unlock()
	return len(exports)
}

// callDeleter calls the deleter fn of the managed struct at self.
func callDeleter(fn uintptr, self unsafe.Pointer) {
	C.vram_dlpack_call_deleter(*(*unsafe.Pointer)(unsafe.Pointer(&fn)), self)
}

// Delete calls the deleter of m, as a consumer does when done with it.
func Delete(m *ManagedTensorVersioned) {
	if m != nil && m.Deleter != 0 {
		callDeleter(m.Deleter, unsafe.Pointer(m))
	}
}

// DeleteLegacy calls the deleter of m, as a consumer does when done with it.
func DeleteLegacy(m *ManagedTensor) {
	if m != nil && m.Deleter != 0 {
		callDeleter(m.Deleter, unsafe.Pointer(m))
	}
}

// cLayout returns the sizes and offsets of the C structs (dlpack.h), in the
// order of vram_dlpack_layout.
func cLayout() []uintptr {
	var out [32]C.size_t
	n := int(C.vram_dlpack_layout(&out[0], C.int(len(out))))
	r := make([]uintptr, n)
	for i := range r {
		r[i] = uintptr(out[i])
	}
	return r
}
