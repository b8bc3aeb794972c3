package cuda

import (
	"errors"
	"runtime"
	"strconv"
	"sync/atomic"
	"unsafe"
)

// Context is a device's primary context, retained by PrimaryContext. The
// primary context is the one the CUDA runtime uses, so memory allocated here
// is visible to PyTorch, CuPy or any runtime-API code in the same process.
//
// Every method makes the context current on the calling OS thread for the
// duration of its driver call (see the package documentation), so a Context
// can be used from any goroutine, concurrently.
type Context struct {
	drv      *driver
	handle   uintptr // CUcontext
	dev      Device
	released atomic.Bool
}

var (
	// errReleased is returned by methods of a Context after Release.
	errReleased = errors.New("cuda: context used after Release")
	// errNoContext is returned by methods of a Context not made by PrimaryContext.
	errNoContext = errors.New("cuda: Context not obtained from Device.PrimaryContext")
)

// PrimaryContext retains the device's primary context
// (cuDevicePrimaryCtxRetain). Each call must be balanced by Release.
func (v Device) PrimaryContext() (*Context, error) {
	d, err := loaded()
	if err != nil {
		return nil, err
	}
	var h uintptr
	if r := callNoCtx(d.cuPrimaryCtxRetain, uintptr(unsafe.Pointer(&h)), uintptr(v.handle)); r != success {
		return nil, newError(r, "cuDevicePrimaryCtxRetain", strconv.Itoa(v.ordinal))
	}
	return &Context{drv: d, handle: h, dev: v}, nil
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Handle returns the CUcontext.
func (c *Context) Handle() uintptr { return c.handle }

// Release releases the primary context (cuDevicePrimaryCtxRelease_v2). The
// driver destroys it when the last retain in the process is released. The
// Context must not be used afterwards; a second Release is an error.
func (c *Context) Release() error {
	if c.drv == nil {
		return errNoContext
	}
	if !c.released.CompareAndSwap(false, true) {
		return errReleased
	}
	if r := callNoCtx(c.drv.cuPrimaryCtxRelease, uintptr(c.dev.handle)); r != success {
		return newError(r, "cuDevicePrimaryCtxRelease_v2", strconv.Itoa(c.dev.ordinal))
	}
	return nil
}

// Synchronize waits until all work queued in the context has completed
// (cuCtxSynchronize).
func (c *Context) Synchronize() error {
	if r, err := c.call(c.fns().cuCtxSynchronize); err != nil || r != success {
		return fail(err, r, "cuCtxSynchronize")
	}
	return nil
}

// noDriver stands in for the function table of a Context that was not
// made by PrimaryContext, so that reading a function address from it is safe;
// call then refuses to run.
var noDriver driver

// fns returns the function table of c's driver.
func (c *Context) fns() *driver {
	if c.drv == nil {
		return &noDriver
	}
	return c.drv
}

// call runs the driver function fn with c current on the calling OS thread.
// The returned error is non-nil only when c could not be made current; the
// Result is fn's. Arguments that are addresses of Go objects must be written
// as uintptr(unsafe.Pointer(&x)) in the call to call itself.
//
//go:uintptrescapes
func (c *Context) call(fn uintptr, args ...uintptr) (Result, error) {
	if c.drv == nil {
		return 0, errNoContext
	}
	if c.released.Load() {
		return 0, errReleased
	}
	runtime.LockOSThread()
	if r := Result(uint32(syscallN(c.drv.cuCtxSetCurrent, c.handle))); r != success {
		runtime.UnlockOSThread()
		return 0, newError(r, "cuCtxSetCurrent", hex(uint64(c.handle)))
	}
	r := Result(uint32(syscallN(fn, args...)))
	runtime.UnlockOSThread()
	return r, nil
}

// fail turns the outcome of a failed call into an error naming fn and its
// arguments. Callers evaluate it only on failure, so that formatting the
// arguments costs nothing on success:
//
//	if r, err := c.call(...); err != nil || r != success {
//		return fail(err, r, "cuMemFree_v2", hex(p))
//	}
func fail(err error, r Result, fn string, args ...string) error {
	if err != nil {
		return err
	}
	return newError(r, fn, args...)
}

// callNoCtx runs a driver function that needs no context.
//
//go:uintptrescapes
func callNoCtx(fn uintptr, args ...uintptr) Result {
	return Result(uint32(syscallN(fn, args...)))
}
