package dlpack

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxBytes is the largest tensor, in bytes, that Check accepts (2^62):
// more than any device holds, and small enough that no sum of such sizes
// overflows.
const MaxBytes = 1 << 62

// ErrInvalid is wrapped by every error of Check, Import and Export about a
// tensor's description.
var ErrInvalid = errors.New("invalid tensor")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// mulCap returns a*b, or false when it passes MaxBytes.
func mulCap(a, b uint64) (uint64, bool) {
	hi, lo := bits.Mul64(a, b)
	return lo, hi == 0 && lo <= MaxBytes
}

// Check validates a tensor's element type, shape and strides (in elements;
// nil means compact row-major) and returns the number of bytes the tensor
// spans from its first element to the end of its last (0 when a dimension
// is 0) and its strides (the compact ones when strides is nil). Negative
// dimensions or strides, more than MaxDims dimensions, element types that
// are not a whole number of bytes, and sizes past MaxBytes are refused.
func Check(dt DataType, shape, strides []int64) (span uint64, outStrides []int64, err error) {
	if len(shape) > MaxDims {
		return 0, nil, invalid("%d dimensions; at most %d are supported", len(shape), MaxDims)
	}
	if strides != nil && len(strides) != len(shape) {
		return 0, nil, invalid("%d strides for %d dimensions", len(strides), len(shape))
	}
	if dt.Lanes == 0 {
		return 0, nil, invalid("element type %v has 0 lanes", dt)
	}
	if dt.Code > maxTypeCode {
		return 0, nil, invalid("unknown element type code %d", dt.Code)
	}
	item := dt.ItemSize()
	if item == 0 {
		return 0, nil, invalid("element type %v is not a whole number of bytes (sub-byte types are not supported)", dt)
	}
	empty := false
	for i, d := range shape {
		if d < 0 {
			return 0, nil, invalid("dimension %d is %d (negative)", i, d)
		}
		if d == 0 {
			empty = true
		}
	}
	for i, s := range strides {
		if s < 0 {
			return 0, nil, invalid("stride %d is %d: negative strides are not supported", i, s)
		}
	}
	if strides == nil {
		outStrides = make([]int64, len(shape))
		st := uint64(1)
		for i := len(shape) - 1; i >= 0; i-- {
			outStrides[i] = int64(st)
			if !empty {
				var ok bool
				if st, ok = mulCap(st, uint64(shape[i])); !ok {
					return 0, nil, invalid("shape %v of %v holds more than 2^62 elements (size overflow)", shape, dt)
				}
			} else {
				// Strides stay defined (capped); the span is 0.
				if v, ok := mulCap(st, uint64(max(shape[i], 1))); ok {
					st = v
				} else {
					st = MaxBytes
				}
			}
		}
	} else {
		outStrides = append([]int64(nil), strides...)
	}
	if empty {
		return 0, outStrides, nil
	}
	// The last element is at sum((shape[i]-1) * stride[i]) elements.
	var last uint64
	for i, d := range shape {
		term, ok := mulCap(uint64(d-1), uint64(outStrides[i]))
		if !ok {
			return 0, nil, invalid("dimension %d (%d, stride %d) passes 2^62 elements (size overflow)", i, d, outStrides[i])
		}
		if last += term; last > MaxBytes {
			return 0, nil, invalid("shape %v with strides %v passes 2^62 elements (size overflow)", shape, outStrides)
		}
	}
	span, ok := mulCap(last+1, item)
	if !ok {
		return 0, nil, invalid("shape %v of %v spans more than 2^62 bytes (size overflow)", shape, dt)
	}
	return span, outStrides, nil
}

// checkHeader validates what Import reads of a tensor besides its shape
// and strides: the device and the data pointer, given the span from Check.
func checkHeader(t *Tensor, span uint64, want Device) error {
	if t.Device.Type != CUDA && t.Device.Type != CUDAManaged {
		return invalid("device type %v: only CUDA device memory (kDLCUDA, kDLCUDAManaged) can be imported", t.Device.Type)
	}
	if want.ID >= 0 && t.Device.ID != want.ID {
		return invalid("tensor on device %d, imported into the allocator of device %d", t.Device.ID, want.ID)
	}
	if span > 0 && t.Data == 0 {
		return invalid("null data pointer for a tensor of %d bytes", span)
	}
	start, c := bits.Add64(uint64(t.Data), t.ByteOffset, 0)
	if c != 0 {
		return invalid("data pointer %#x plus byte offset %d overflows", t.Data, t.ByteOffset)
	}
	if _, c := bits.Add64(start, span, 0); c != 0 {
		return invalid("tensor of %d bytes at %#x passes the end of the address space", span, start)
	}
	return nil
}
