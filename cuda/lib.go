package cuda

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unsafe"
)

// LibraryName is the file name of the CUDA driver library that Init loads.
const LibraryName = "libcuda.so.1"

// ErrNoDriver is matched (errors.Is) by the error Init returns when the CUDA
// driver library cannot be loaded or lacks a function this package needs.
var ErrNoDriver = errors.New("CUDA driver not available")

// LoadError reports that the driver library could not be loaded or that it
// lacks a function this package needs.
type LoadError struct {
	Library string // the library that was opened, e.g. libcuda.so.1
	Symbol  string // the missing function; empty when the library itself failed to load
	Reason  string // the loader's message (dlerror) or a short explanation
}

func (e *LoadError) Error() string {
	if e.Symbol != "" {
		return fmt.Sprintf("cuda: %s has no function %s (%s); the NVIDIA driver is too old for this program, install a newer one",
			e.Library, e.Symbol, e.Reason)
	}
	return fmt.Sprintf("cuda: cannot load %s: %s; the NVIDIA driver is not installed here, or its library directory is not on the loader path (LD_LIBRARY_PATH)",
		e.Library, e.Reason)
}

// Is reports that a LoadError means "no usable driver".
func (e *LoadError) Is(target error) bool { return target == ErrNoDriver }

// driver holds the resolved addresses of the driver functions. It is filled
// once by load and never changes afterwards, so reading it needs no lock.
// Each function's tag names the symbols load resolves for it (bindings).
type driver struct {
	handle uintptr

	cuInit              uintptr `sym:"cuInit"`
	cuDriverGetVersion  uintptr `sym:"cuDriverGetVersion"`
	cuGetErrorName      uintptr `sym:"cuGetErrorName"`
	cuGetErrorString    uintptr `sym:"cuGetErrorString"`
	cuDeviceGetCount    uintptr `sym:"cuDeviceGetCount"`
	cuDeviceGet         uintptr `sym:"cuDeviceGet"`
	cuDeviceGetName     uintptr `sym:"cuDeviceGetName"`
	cuDeviceGetUuid     uintptr `sym:"cuDeviceGetUuid_v2 cuDeviceGetUuid" bound:"uuidName"`
	cuDeviceTotalMem    uintptr `sym:"cuDeviceTotalMem_v2"`
	cuDeviceGetAttr     uintptr `sym:"cuDeviceGetAttribute"`
	cuDeviceGetPCIBusId uintptr `sym:"cuDeviceGetPCIBusId"`

	cuPrimaryCtxRetain  uintptr `sym:"cuDevicePrimaryCtxRetain"`
	cuPrimaryCtxRelease uintptr `sym:"cuDevicePrimaryCtxRelease_v2"`
	cuCtxSetCurrent     uintptr `sym:"cuCtxSetCurrent"`
	cuCtxGetCurrent     uintptr `sym:"cuCtxGetCurrent"`
	cuCtxSynchronize    uintptr `sym:"cuCtxSynchronize"`

	cuMemAlloc          uintptr `sym:"cuMemAlloc_v2"`
	cuMemFree           uintptr `sym:"cuMemFree_v2"`
	cuMemGetInfo        uintptr `sym:"cuMemGetInfo_v2"`
	cuMemcpyHtoD        uintptr `sym:"cuMemcpyHtoD_v2"`
	cuMemcpyDtoH        uintptr `sym:"cuMemcpyDtoH_v2"`
	cuMemcpyDtoD        uintptr `sym:"cuMemcpyDtoD_v2"`
	cuMemcpyHtoDAsync   uintptr `sym:"cuMemcpyHtoDAsync_v2"`
	cuMemcpyDtoHAsync   uintptr `sym:"cuMemcpyDtoHAsync_v2"`
	cuMemcpyDtoDAsync   uintptr `sym:"cuMemcpyDtoDAsync_v2"`
	cuMemsetD8          uintptr `sym:"cuMemsetD8_v2"`
	cuMemsetD8Async     uintptr `sym:"cuMemsetD8Async"`
	cuMemHostAlloc      uintptr `sym:"cuMemHostAlloc"`
	cuMemFreeHost       uintptr `sym:"cuMemFreeHost"`
	cuStreamCreate      uintptr `sym:"cuStreamCreate"`
	cuStreamDestroy     uintptr `sym:"cuStreamDestroy_v2"`
	cuStreamSynchronize uintptr `sym:"cuStreamSynchronize"`
	cuStreamQuery       uintptr `sym:"cuStreamQuery"`
	cuEventCreate       uintptr `sym:"cuEventCreate"`
	cuEventRecord       uintptr `sym:"cuEventRecord"`
	cuEventQuery        uintptr `sym:"cuEventQuery"`
	cuEventSynchronize  uintptr `sym:"cuEventSynchronize"`
	cuEventDestroy      uintptr `sym:"cuEventDestroy_v2"`
	cuEventElapsedTime  uintptr `sym:"cuEventElapsedTime_v2 cuEventElapsedTime" bound:"elapsedTimeName"`

	cuMemGetAllocationGranularity uintptr `sym:"cuMemGetAllocationGranularity"`
	cuMemAddressReserve           uintptr `sym:"cuMemAddressReserve"`
	cuMemAddressFree              uintptr `sym:"cuMemAddressFree"`
	cuMemCreate                   uintptr `sym:"cuMemCreate"`
	cuMemRelease                  uintptr `sym:"cuMemRelease"`
	cuMemMap                      uintptr `sym:"cuMemMap"`
	cuMemUnmap                    uintptr `sym:"cuMemUnmap"`
	cuMemSetAccess                uintptr `sym:"cuMemSetAccess"`

	// names of the symbols actually bound where there is a choice, for errors.
	elapsedTimeName string
	uuidName        string
}

// binding names the symbols to try for one function, preferred first.
type binding struct {
	dst   *uintptr
	names []string
	used  *string // optional: receives the name that resolved
}

// bindings lists d's functions in field order, read from the field tags:
// sym holds the symbols to try, preferred first, separated by spaces, and
// bound, on a function with alternatives, names the string field that
// receives the symbol found. Every uintptr field but handle must have a
// sym tag.
func (d *driver) bindings() []binding {
	v := reflect.ValueOf(d).Elem()
	t := v.Type()
	var bs []binding
	for i := range t.NumField() {
		f := t.Field(i)
		syms, ok := f.Tag.Lookup("sym")
		if !ok {
			continue
		}
		if f.Type.Kind() != reflect.Uintptr {
			panic("cuda: driver field " + f.Name + " has a sym tag but is not a uintptr")
		}
		b := binding{dst: (*uintptr)(v.Field(i).Addr().UnsafePointer()), names: strings.Fields(syms)}
		if name, ok := f.Tag.Lookup("bound"); ok {
			b.used = (*string)(v.FieldByName(name).Addr().UnsafePointer())
		}
		bs = append(bs, b)
	}
	return bs
}

// libOpener is the platform's dynamic loader (dlopen/dlsym), replaceable in tests.
type libOpener interface {
	open(name string) (uintptr, error)
	sym(handle uintptr, name string) (uintptr, error)
}

// load opens the library called name with o and resolves every binding. It
// does not call cuInit.
func load(o libOpener, name string) (*driver, error) {
	h, err := o.open(name)
	if err != nil {
		return nil, &LoadError{Library: name, Reason: err.Error()}
	}
	d := &driver{handle: h}
	for _, b := range d.bindings() {
		var lastErr error
		for _, n := range b.names {
			addr, err := o.sym(h, n)
			if err == nil && addr != 0 {
				*b.dst = addr
				if b.used != nil {
					*b.used = n
				}
				break
			}
			lastErr = err
		}
		if *b.dst == 0 {
			reason := "symbol not found"
			if lastErr != nil && lastErr.Error() != "" {
				reason = lastErr.Error()
			}
			return nil, &LoadError{Library: name, Symbol: b.names[0], Reason: reason}
		}
	}
	return d, nil
}

var (
	// libraryName is the library Init loads; tests point it elsewhere before
	// the first Init (see export_test.go).
	libraryName = LibraryName
	// opener is the dynamic loader Init uses.
	opener libOpener = dlOpener{}

	initOnce sync.Once
	initErr  error
	lib      *driver // set once by Init; read-only afterwards
)

// Init loads the CUDA driver library and initialises the driver (cuInit).
// It is safe to call from several goroutines and cheap after the first call,
// which decides the result for the life of the process.
func Init() error {
	initOnce.Do(func() {
		d, err := load(opener, libraryName)
		if err != nil {
			initErr = err
			return
		}
		if r := callNoCtx(d.cuInit, 0); r != success {
			initErr = fmt.Errorf("cuda: initialising the driver from %s: %w", libraryName, newErrorFrom(d, r, "cuInit", "0"))
			return
		}
		lib = d
	})
	return initErr
}

// loaded returns the driver table, or the reason it is not there.
func loaded() (*driver, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	return lib, nil
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	d, err := loaded()
	if err != nil {
		return 0, err
	}
	var v int32
	if r := callNoCtx(d.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))); r != success {
		return 0, newError(r, "cuDriverGetVersion")
	}
	return int(v), nil
}
