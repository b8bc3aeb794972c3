package dlpack

import (
	"fmt"
	"unsafe"

	"github.com/vramhq/vram/alloc"
)

// Imported is a tensor of another producer, taken over by Import.
type Imported struct {
	// Buffer holds the tensor's bytes, from its first element (data +
	// byte_offset) to the end of its last; its first Free calls the
	// producer's deleter. Read-only when the producer said so.
	Buffer *alloc.Buffer
	Shape  []int64
	// Strides in elements: the producer's, or the compact row-major ones
	// when it gave none.
	Strides []int64
	DType   DataType
	Device  Device
	// Version is {0, 0} for a legacy tensor.
	Version  Version
	ReadOnly bool
	IsCopied bool
	Flags    uint64
}

// ImportOptions say where an imported tensor goes.
type ImportOptions struct {
	// DeviceID is the device of the allocator; a tensor on another device
	// is refused. -1 accepts any.
	DeviceID int32
	// Stream is the Buffer's stream (the one the caller will use it on).
	Stream alloc.Stream
}

// Import takes over the DLManagedTensorVersioned m of another producer as a
// view in a's device memory: no copy. The first Free of the returned
// Buffer calls m's deleter, once. A tensor that Check or the device, data
// pointer and version checks refuse is not taken: the caller keeps it and
// still owns its deleter.
func Import(a *alloc.Allocator, m *ManagedTensorVersioned, opt ImportOptions) (*Imported, error) {
	if m == nil {
		return nil, fmt.Errorf("dlpack: import: %w: null DLManagedTensorVersioned", ErrInvalid)
	}
	if m.Version.Major != MajorVersion {
		return nil, fmt.Errorf("dlpack: import: %w: DLPack version %d.%d; this package reads version %d.x",
			ErrInvalid, m.Version.Major, m.Version.Minor, MajorVersion)
	}
	if m.Flags&FlagSubbyteTypePadded != 0 {
		return nil, fmt.Errorf("dlpack: import: %w: padded sub-byte element types are not supported", ErrInvalid)
	}
	im, err := importTensor(a, &m.DLTensor, opt, m.Flags&FlagReadOnly != 0, m.Deleter, unsafe.Pointer(m))
	if err != nil {
		return nil, err
	}
	im.Version, im.Flags = m.Version, m.Flags
	im.IsCopied = m.Flags&FlagIsCopied != 0
	return im, nil
}

// ImportLegacy is Import for the legacy DLManagedTensor (never read-only).
func ImportLegacy(a *alloc.Allocator, m *ManagedTensor, opt ImportOptions) (*Imported, error) {
	if m == nil {
		return nil, fmt.Errorf("dlpack: import: %w: null DLManagedTensor", ErrInvalid)
	}
	return importTensor(a, &m.DLTensor, opt, false, m.Deleter, unsafe.Pointer(m))
}

// readTensor copies what t points at (shape, strides) into Go slices after
// checking ndim; strides is nil when t has none.
func readTensor(t *Tensor) (shape, strides []int64, err error) {
	if t.NDim < 0 || t.NDim > MaxDims {
		return nil, nil, fmt.Errorf("%w: ndim %d; at most %d dimensions are supported", ErrInvalid, t.NDim, MaxDims)
	}
	if t.NDim > 0 {
		if t.Shape == nil {
			return nil, nil, fmt.Errorf("%w: null shape pointer for %d dimensions", ErrInvalid, t.NDim)
		}
		shape = append([]int64(nil), unsafe.Slice(t.Shape, t.NDim)...)
		if t.Strides != nil {
			strides = append([]int64(nil), unsafe.Slice(t.Strides, t.NDim)...)
		}
	} else {
		shape = []int64{}
	}
	return shape, strides, nil
}

func importTensor(a *alloc.Allocator, t *Tensor, opt ImportOptions, readOnly bool, deleter uintptr, self unsafe.Pointer) (*Imported, error) {
	shape, strides, err := readTensor(t)
	if err != nil {
		return nil, fmt.Errorf("dlpack: import: %w", err)
	}
	span, strides, err := Check(t.DType, shape, strides)
	if err != nil {
		return nil, fmt.Errorf("dlpack: import: %w", err)
	}
	if err := checkHeader(t, span, Device{ID: opt.DeviceID}); err != nil {
		return nil, fmt.Errorf("dlpack: import: %w", err)
	}
	release := func() error {
		if deleter != 0 {
			callDeleter(deleter, self)
		}
		return nil
	}
	ptr := uint64(t.Data) + t.ByteOffset
	b := a.Wrap(ptr, span, opt.Stream, alloc.WrapOptions{ReadOnly: readOnly, Release: release})
	return &Imported{Buffer: b, Shape: shape, Strides: strides, DType: t.DType, Device: t.Device, ReadOnly: readOnly}, nil
}
