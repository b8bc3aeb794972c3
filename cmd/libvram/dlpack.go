package main

// The DLPack entry points (vram.h, "DLPack"): tensors of vram memory for
// other frameworks, and other frameworks' tensors as vram memory. Every
// array the Python package holds is one DLManagedTensorVersioned made by
// package alloc/dlpack (its "base" tensor); each __dlpack__ call shares it,
// and the memory goes back (to vram, or to the producer of an imported
// tensor) after the base and every shared tensor have been deleted.

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/vramhq/vram/alloc/dlpack"
	"github.com/vramhq/vram/internal/libvram"
)

func pointer(f func(h *libvram.Host) (unsafe.Pointer, error)) (p unsafe.Pointer) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			p = nil
		}
	}()
	h, err := getHost()
	if err == nil {
		p, err = f(h)
	}
	if err != nil {
		setError(err)
		return nil
	}
	return p
}

//export vramGoDLPackEmpty
func vramGoDLPackEmpty(shape *C.int64_t, ndim C.int, code, bits, lanes C.int, device C.int) unsafe.Pointer {
	return pointer(func(h *libvram.Host) (unsafe.Pointer, error) {
		if ndim < 0 || ndim > dlpack.MaxDims {
			return nil, fmt.Errorf("vram: dlpack empty: %d dimensions; at most %d are supported", ndim, dlpack.MaxDims)
		}
		if code < 0 || code > 255 || bits <= 0 || bits > 255 || lanes <= 0 || lanes > 65535 {
			return nil, fmt.Errorf("vram: dlpack empty: element type code %d, %d bits, %d lanes is not a DLPack type", code, bits, lanes)
		}
		var dims []int64
		if ndim > 0 {
			for _, d := range unsafe.Slice((*int64)(unsafe.Pointer(shape)), int(ndim)) {
				dims = append(dims, d)
			}
		}
		spec := dlpack.Spec{Shape: dims, DType: dlpack.DataType{Code: dlpack.TypeCode(code), Bits: uint8(bits), Lanes: uint16(lanes)},
			Device: dlpack.Device{Type: dlpack.CUDA, ID: int32(device)}}
		span, _, err := dlpack.Check(spec.DType, dims, nil)
		if err != nil {
			return nil, fmt.Errorf("vram: dlpack empty: %w", err)
		}
		a, err := h.Allocator(int(device))
		if err != nil {
			return nil, err
		}
		b, err := a.Alloc(span, 0)
		if err != nil {
			return nil, fmt.Errorf("vram: dlpack empty of %v %v on device %d: %w", dims, spec.DType, device, err)
		}
		m, err := dlpack.Export(b, spec)
		if err != nil {
			_ = b.Free()
			return nil, fmt.Errorf("vram: dlpack empty: %w", err)
		}
		return unsafe.Pointer(m), nil
	})
}

//export vramGoDLPackShare
func vramGoDLPackShare(t unsafe.Pointer, legacy C.int) unsafe.Pointer {
	return pointer(func(*libvram.Host) (unsafe.Pointer, error) {
		p, err := dlpack.Share((*dlpack.ManagedTensorVersioned)(t), legacy != 0)
		if err != nil {
			return nil, fmt.Errorf("vram: %w", err)
		}
		return p, nil
	})
}

//export vramGoDLPackImport
func vramGoDLPackImport(t unsafe.Pointer, legacy C.int, device C.int) unsafe.Pointer {
	return pointer(func(h *libvram.Host) (unsafe.Pointer, error) {
		a, err := h.Allocator(int(device))
		if err != nil {
			return nil, err
		}
		opt := dlpack.ImportOptions{DeviceID: int32(device)}
		var im *dlpack.Imported
		if legacy != 0 {
			im, err = dlpack.ImportLegacy(a, (*dlpack.ManagedTensor)(t), opt)
		} else {
			im, err = dlpack.Import(a, (*dlpack.ManagedTensorVersioned)(t), opt)
		}
		if err != nil {
			return nil, fmt.Errorf("vram: from_dlpack: %w", err)
		}
		m, err := dlpack.Export(im.Buffer, dlpack.Spec{Shape: im.Shape, Strides: im.Strides, DType: im.DType,
			Device: im.Device, ReadOnly: im.ReadOnly, IsCopied: im.IsCopied})
		if err != nil {
			_ = im.Buffer.Free()
			return nil, fmt.Errorf("vram: from_dlpack: %w", err)
		}
		return unsafe.Pointer(m), nil
	})
}

//export vramGoDLPackCopy
func vramGoDLPackCopy(t unsafe.Pointer, host unsafe.Pointer, n C.size_t, toHost C.int) C.int {
	return call(func(*libvram.Host) error {
		b, ok := dlpack.Exported((*dlpack.ManagedTensorVersioned)(t))
		if !ok {
			return fmt.Errorf("vram: dlpack copy: not a live tensor made by vram")
		}
		if n == 0 {
			return nil
		}
		p := unsafe.Slice((*byte)(host), int(n))
		if toHost != 0 {
			return b.CopyToHost(p)
		}
		return b.CopyFromHost(p)
	})
}
