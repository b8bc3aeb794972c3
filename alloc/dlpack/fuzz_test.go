package dlpack

import (
	"encoding/binary"
	"math/big"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// FuzzImport feeds Import tensors with arbitrary fields (in Go memory, no
// deleter) and checks that what it accepts is consistent: the span equals
// the one computed with big integers, the data pointer is not null when
// the span is not zero, nothing overflows, and the device is a CUDA one.
func FuzzImport(f *testing.F) {
	le := func(v ...int64) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
		}
		return b
	}
	f.Add(uint64(0x1000), int32(2), int32(0), uint8(2), uint8(32), uint16(1), uint64(0), le(3, 5), le(5, 1), true, uint32(1))
	f.Add(uint64(0), int32(2), int32(0), uint8(2), uint8(32), uint16(1), uint64(0), le(0, 5), []byte{}, false, uint32(1))
	f.Add(uint64(1), int32(1), int32(0), uint8(0), uint8(8), uint16(1), uint64(0), le(1<<62, 4), []byte{}, false, uint32(1))
	f.Add(^uint64(0), int32(13), int32(0), uint8(5), uint8(64), uint16(2), uint64(7), le(2, 2), le(1<<40, 1<<61), true, uint32(2))
	a, err := alloc.New(sim.MustNew(sim.Config{Capacity: 1 << 20}), alloc.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data uint64, devType, devID int32, code, bitsN uint8, lanes uint16, off uint64,
		shapeB, stridesB []byte, hasStrides bool, major uint32) {
		shape := make([]int64, len(shapeB)/8)
		for i := range shape {
			shape[i] = int64(binary.LittleEndian.Uint64(shapeB[8*i:]))
		}
		strides := make([]int64, len(shape))
		for i := range strides {
			if 8*i+8 <= len(stridesB) {
				strides[i] = int64(binary.LittleEndian.Uint64(stridesB[8*i:]))
			}
		}
		m := &ManagedTensorVersioned{Version: Version{major, 0}}
		m.DLTensor = Tensor{Data: uintptr(data), Device: Device{DeviceType(devType), devID}, NDim: int32(len(shape)),
			DType: DataType{TypeCode(code), bitsN, lanes}, ByteOffset: off}
		if len(shape) > 0 {
			m.DLTensor.Shape = &shape[0]
			if hasStrides {
				m.DLTensor.Strides = &strides[0]
			}
		}
		im, err := Import(a, m, ImportOptions{DeviceID: -1})
		if err != nil {
			return
		}
		defer func() { _ = im.Buffer.Free() }()
		if major != MajorVersion || (devType != int32(CUDA) && devType != int32(CUDAManaged)) {
			t.Fatalf("accepted version %d, device type %d", major, devType)
		}
		item := big.NewInt(int64(bitsN/8) * int64(lanes))
		if bitsN%8 != 0 || item.Sign() == 0 {
			t.Fatalf("accepted element type %v", m.DLTensor.DType)
		}
		span := new(big.Int)
		if !hasStrides || len(shape) == 0 {
			span.Set(item)
			for _, d := range shape {
				span.Mul(span, big.NewInt(d))
			}
		} else {
			last := new(big.Int)
			empty := false
			for i, d := range shape {
				if d == 0 {
					empty = true
				}
				last.Add(last, new(big.Int).Mul(big.NewInt(d-1), big.NewInt(strides[i])))
			}
			span.Mul(last.Add(last, big.NewInt(1)), item)
			if empty {
				span.SetInt64(0)
			}
		}
		if !span.IsUint64() || span.Uint64() != im.Buffer.Len() || span.Uint64() > MaxBytes {
			t.Fatalf("shape %v strides %v (given %v) of %v: span %d, big-integer span %v", shape, im.Strides, hasStrides, m.DLTensor.DType, im.Buffer.Len(), span)
		}
		if im.Buffer.Len() > 0 && data == 0 {
			t.Fatalf("accepted a null pointer for %d bytes", im.Buffer.Len())
		}
		end := new(big.Int).SetUint64(data)
		end.Add(end, new(big.Int).SetUint64(off)).Add(end, span)
		if end.BitLen() > 64 {
			t.Fatalf("accepted a tensor past the end of the address space: %#x + %d + %v", data, off, span)
		}
		if im.Buffer.Ptr() != data+off {
			t.Fatalf("buffer at %#x, want %#x", im.Buffer.Ptr(), data+off)
		}
	})
}
