package cuda

import (
	"errors"
	"fmt"
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
type driver struct {
	handle uintptr

	cuInit              uintptr
	cuDriverGetVersion  uintptr
	cuGetErrorName      uintptr
	cuGetErrorString    uintptr
	cuDeviceGetCount    uintptr
	cuDeviceGet         uintptr
	cuDeviceGetName     uintptr
	cuDeviceGetUuid     uintptr
	cuDeviceTotalMem    uintptr
	cuDeviceGetAttr     uintptr
	cuDeviceGetPCIBusId uintptr

	cuPrimaryCtxRetain  uintptr
	cuPrimaryCtxRelease uintptr
	cuCtxSetCurrent     uintptr
	cuCtxGetCurrent     uintptr
	cuCtxSynchronize    uintptr

	cuMemAlloc          uintptr
	cuMemFree           uintptr
	cuMemGetInfo        uintptr
	cuMemcpyHtoD        uintptr
	cuMemcpyDtoH        uintptr
	cuMemcpyDtoD        uintptr
	cuMemcpyHtoDAsync   uintptr
	cuMemcpyDtoHAsync   uintptr
	cuMemcpyDtoDAsync   uintptr
	cuMemsetD8          uintptr
	cuMemsetD8Async     uintptr
	cuMemHostAlloc      uintptr
	cuMemFreeHost       uintptr
	cuStreamCreate      uintptr
	cuStreamDestroy     uintptr
	cuStreamSynchronize uintptr
	cuStreamQuery       uintptr
	cuEventCreate       uintptr
	cuEventRecord       uintptr
	cuEventQuery        uintptr
	cuEventSynchronize  uintptr
	cuEventDestroy      uintptr
	cuEventElapsedTime  uintptr

	cuMemGetAllocationGranularity uintptr
	cuMemAddressReserve           uintptr
	cuMemAddressFree              uintptr
	cuMemCreate                   uintptr
	cuMemRelease                  uintptr
	cuMemMap                      uintptr
	cuMemUnmap                    uintptr
	cuMemSetAccess                uintptr

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

func (d *driver) bindings() []binding {
	one := func(dst *uintptr, name string) binding { return binding{dst: dst, names: []string{name}} }
	return []binding{
		one(&d.cuInit, "cuInit"),
		one(&d.cuDriverGetVersion, "cuDriverGetVersion"),
		one(&d.cuGetErrorName, "cuGetErrorName"),
		one(&d.cuGetErrorString, "cuGetErrorString"),
		one(&d.cuDeviceGetCount, "cuDeviceGetCount"),
		one(&d.cuDeviceGet, "cuDeviceGet"),
		one(&d.cuDeviceGetName, "cuDeviceGetName"),
		{dst: &d.cuDeviceGetUuid, names: []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, used: &d.uuidName},
		one(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		one(&d.cuDeviceGetAttr, "cuDeviceGetAttribute"),
		one(&d.cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId"),

		one(&d.cuPrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		one(&d.cuPrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
		one(&d.cuCtxSetCurrent, "cuCtxSetCurrent"),
		one(&d.cuCtxGetCurrent, "cuCtxGetCurrent"),
		one(&d.cuCtxSynchronize, "cuCtxSynchronize"),

		one(&d.cuMemAlloc, "cuMemAlloc_v2"),
		one(&d.cuMemFree, "cuMemFree_v2"),
		one(&d.cuMemGetInfo, "cuMemGetInfo_v2"),
		one(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
		one(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
		one(&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
		one(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		one(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		one(&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		one(&d.cuMemsetD8, "cuMemsetD8_v2"),
		one(&d.cuMemsetD8Async, "cuMemsetD8Async"),
		one(&d.cuMemHostAlloc, "cuMemHostAlloc"),
		one(&d.cuMemFreeHost, "cuMemFreeHost"),
		one(&d.cuStreamCreate, "cuStreamCreate"),
		one(&d.cuStreamDestroy, "cuStreamDestroy_v2"),
		one(&d.cuStreamSynchronize, "cuStreamSynchronize"),
		one(&d.cuStreamQuery, "cuStreamQuery"),
		one(&d.cuEventCreate, "cuEventCreate"),
		one(&d.cuEventRecord, "cuEventRecord"),
		one(&d.cuEventQuery, "cuEventQuery"),
		one(&d.cuEventSynchronize, "cuEventSynchronize"),
		one(&d.cuEventDestroy, "cuEventDestroy_v2"),
		{dst: &d.cuEventElapsedTime, names: []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, used: &d.elapsedTimeName},

		one(&d.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
		one(&d.cuMemAddressReserve, "cuMemAddressReserve"),
		one(&d.cuMemAddressFree, "cuMemAddressFree"),
		one(&d.cuMemCreate, "cuMemCreate"),
		one(&d.cuMemRelease, "cuMemRelease"),
		one(&d.cuMemMap, "cuMemMap"),
		one(&d.cuMemUnmap, "cuMemUnmap"),
		one(&d.cuMemSetAccess, "cuMemSetAccess"),
	}
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
