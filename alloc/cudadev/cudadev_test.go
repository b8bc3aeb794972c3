package cudadev

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/cuda"
)

func TestWrap(t *testing.T) {
	d := &Device{ordinal: 3}
	oom := &cuda.Error{Code: cuda.ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory", Call: "cuMemAlloc_v2(1073741824)"}
	inval := &cuda.Error{Code: cuda.ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE", Desc: "invalid argument", Call: "cuMemFree_v2(0x10)"}
	tests := []struct {
		name    string
		in      error
		wantMsg string
		oom     bool
	}{
		{"nil", nil, "", false},
		{"out of memory", oom, "cudadev: GPU 3: device out of memory: cuMemAlloc_v2(1073741824): CUDA_ERROR_OUT_OF_MEMORY: out of memory", true},
		{"wrapped out of memory", fmt.Errorf("cuda: %w", oom), "cudadev: GPU 3: device out of memory: cuda: cuMemAlloc_v2(1073741824): CUDA_ERROR_OUT_OF_MEMORY: out of memory", true},
		{"other driver error", inval, "cudadev: GPU 3: cuMemFree_v2(0x10): CUDA_ERROR_INVALID_VALUE: invalid argument", false},
		{"not a driver error", errors.New("boom"), "cudadev: GPU 3: boom", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := d.wrap(tt.in)
			if tt.in == nil {
				if err != nil {
					t.Fatalf("wrap(nil) = %v", err)
				}
				return
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("message %q, want %q", err, tt.wantMsg)
			}
			if got := errors.Is(err, alloc.ErrDeviceOutOfMemory); got != tt.oom {
				t.Errorf("errors.Is(err, alloc.ErrDeviceOutOfMemory) = %v, want %v", got, tt.oom)
			}
			if got := cuda.IsOutOfMemory(err); got != tt.oom {
				t.Errorf("cuda.IsOutOfMemory = %v, want %v", got, tt.oom)
			}
			if !errors.Is(err, tt.in) {
				t.Error("the original error is not in the chain")
			}
		})
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	if cuda.Init() == nil {
		t.Skip("a CUDA driver is installed here")
	}
	d, err := Open(0)
	if err == nil {
		d.Close()
		t.Fatal("Open succeeded without a driver")
	}
	if !errors.Is(err, cuda.ErrNoDriver) || !strings.Contains(err.Error(), cuda.LibraryName) {
		t.Errorf("Open: %v; want an error that matches cuda.ErrNoDriver and names %s", err, cuda.LibraryName)
	}
}
