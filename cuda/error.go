package cuda

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// Result is a CUresult, the status code every driver function returns.
type Result int32

// The results this package and its callers test for. The numbers are cuda.h's.
const (
	success             Result = 0
	ErrorInvalidValue   Result = 1   // CUDA_ERROR_INVALID_VALUE
	ErrorOutOfMemory    Result = 2   // CUDA_ERROR_OUT_OF_MEMORY
	ErrorNotInitialized Result = 3   // CUDA_ERROR_NOT_INITIALIZED
	ErrorDeinitialized  Result = 4   // CUDA_ERROR_DEINITIALIZED
	ErrorNoDevice       Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidDevice  Result = 101 // CUDA_ERROR_INVALID_DEVICE
	ErrorInvalidCtx     Result = 201 // CUDA_ERROR_INVALID_CONTEXT
	ErrorInvalidHandle  Result = 400 // CUDA_ERROR_INVALID_HANDLE
	ErrorNotReady       Result = 600 // CUDA_ERROR_NOT_READY
	ErrorNotSupported   Result = 801 // CUDA_ERROR_NOT_SUPPORTED
	ErrorUnknown        Result = 999 // CUDA_ERROR_UNKNOWN
)

// resultNames holds cuda.h's name and the driver's description for the
// results seen in memory management. It is used only when the driver cannot
// be asked (cuGetErrorName fails, or no driver is loaded); the driver's own
// words are preferred because newer drivers add codes.
var resultNames = map[Result][2]string{
	0:   {"CUDA_SUCCESS", "no error"},
	1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	3:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	4:   {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	34:  {"CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	46:  {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	201: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	205: {"CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	206: {"CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
	214: {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	400: {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	401: {"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	600: {"CUDA_ERROR_NOT_READY", "device not ready"},
	700: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	709: {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	719: {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	800: {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	802: {"CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	803: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// String returns cuda.h's name for r, or CUresult(n) for codes this package
// does not know.
func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n[0]
	}
	return "CUresult(" + strconv.Itoa(int(r)) + ")"
}

// Error is a failed driver call.
type Error struct {
	Code Result // the CUresult
	Name string // the driver's name for Code, e.g. CUDA_ERROR_OUT_OF_MEMORY
	Desc string // the driver's description, e.g. "out of memory"
	Call string // the call with its meaningful arguments, e.g. cuMemAlloc_v2(1073741824)
}

func (e *Error) Error() string {
	name, desc := e.Name, e.Desc
	if name == "" {
		name = e.Code.String()
	}
	if desc == "" {
		desc = "unrecognized error code " + strconv.Itoa(int(e.Code))
	}
	return e.Call + ": " + name + ": " + desc
}

// Is reports whether target is an *Error with the same code and no call, so
// that errors.Is(err, &cuda.Error{Code: cuda.ErrorOutOfMemory}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Call == "" && t.Code == e.Code
}

// IsOutOfMemory reports whether err is or wraps a CUDA_ERROR_OUT_OF_MEMORY
// from the driver.
func IsOutOfMemory(err error) bool { return hasCode(err, ErrorOutOfMemory) }

// IsNotReady reports whether err is or wraps CUDA_ERROR_NOT_READY.
func IsNotReady(err error) bool { return hasCode(err, ErrorNotReady) }

func hasCode(err error, code Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// newError builds the error of a failed call with the loaded driver's
// names. args are the call's meaningful arguments, already formatted; only
// failing calls pay for the formatting.
func newError(r Result, fn string, args ...string) *Error {
	return newErrorFrom(lib, r, fn, args...)
}

func newErrorFrom(d *driver, r Result, fn string, args ...string) *Error {
	name, desc := d.describe(r)
	return &Error{Code: r, Name: name, Desc: desc, Call: fn + "(" + strings.Join(args, ", ") + ")"}
}

// described caches the driver's words for each code seen.
var described sync.Map // Result -> [2]string

// describe asks the driver for the name and description of r, falling back
// to the built-in table. d may be nil (no driver loaded).
func (d *driver) describe(r Result) (name, desc string) {
	if v, ok := described.Load(r); ok {
		n := v.([2]string)
		return n[0], n[1]
	}
	if d != nil {
		var pn, ps *byte
		if callNoCtx(d.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&pn))) == success && pn != nil {
			name = goString(pn)
		}
		if callNoCtx(d.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&ps))) == success && ps != nil {
			desc = goString(ps)
		}
	}
	if n, ok := resultNames[r]; ok {
		if name == "" {
			name = n[0]
		}
		if desc == "" {
			desc = n[1]
		}
	}
	if name != "" && d != nil {
		described.Store(r, [2]string{name, desc})
	}
	return name, desc
}

// goString copies the NUL-terminated C string at p (owned by the driver).
func goString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// dec and hex format call arguments for error messages.
func dec(v uint64) string { return strconv.FormatUint(v, 10) }
func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }
