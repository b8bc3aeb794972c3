// Package cuda is a small binding to the CUDA driver API (libcuda.so.1)
// that loads the driver at run time: it builds without a CUDA toolkit, and a
// program that imports it starts on a machine without a GPU and gets a clear
// error from Init instead of a loader failure.
//
// It binds what a device-memory manager needs and nothing more: devices and
// their properties, the primary context, device and pinned host memory,
// synchronous and stream-ordered copies and memsets, streams, events and the
// virtual-memory management calls (reserve, create, map, set access). It does
// not load modules or launch kernels.
//
// # Loading
//
// Init opens libcuda.so.1 with dlopen (through github.com/ebitengine/purego,
// so the call path needs no C code), resolves every symbol once into a
// table of function addresses and calls cuInit(0). Init is idempotent and
// safe to call from many goroutines; later calls return the first result.
// Without a driver it returns a *LoadError whose message names libcuda.so.1
// and says what is missing; errors.Is(err, ErrNoDriver) reports that case.
//
// Symbols are looked up by their versioned names (cuMemAlloc_v2,
// cuMemFree_v2, cuMemGetInfo_v2, cuMemcpyHtoD_v2, cuMemsetD8_v2,
// cuStreamDestroy_v2, cuDevicePrimaryCtxRelease_v2, ...). cuda.h maps the
// plain names to these with macros; the plain exported symbols are the legacy
// ABI with 32-bit sizes and pointers, so calling them through dlsym would
// truncate sizes silently. The synchronous calls are the legacy-default-stream
// variants (not _ptds/_ptsz): Stream 0 is the legacy default stream, which
// synchronises with every blocking stream of the context.
//
// # Contexts and threads
//
// A CUDA context is current per OS thread, and goroutines move between OS
// threads at any call. Every method of Context therefore makes its context
// current on the thread that makes the driver call:
//
//	runtime.LockOSThread()
//	cuCtxSetCurrent(ctx)   // a write to the driver's thread-local slot
//	<the driver call>
//	runtime.UnlockOSThread()
//
// The alternative, remembering which context is current on which thread,
// needs a thread identity (gettid is a system call) and trusts that nothing
// else on the thread changed the current context since; it would save one
// FFI crossing and lose robustness. docs/cuda.md has the measured cost of
// both pieces; the extra crossing is small next to the cheapest allocation
// call the driver offers. The lock is nestable, so callers that locked the
// thread themselves keep it locked.
//
// The driver itself is thread safe; all methods may be called concurrently,
// except that a Context must not be used after Release.
//
// # Calls and their cost
//
// Each driver function is called with purego.SyscallN on the address
// resolved at load time: one runtime cgo transition plus argument copying,
// no reflection. SyscallN's variadic argument slice escapes (it is
// go:uintptrescapes), and so does every output parameter (the address
// written by cuMemAlloc, for example), so each crossing allocates one small
// object plus one per output; a Context method makes two crossings. The
// measured cost, and the cheaper cgo alternative that was measured against
// it, are in docs/cuda.md.
//
// # Errors
//
// A failing call returns *Error, which carries the numeric CUresult, the
// driver's name and description for it (cuGetErrorName, cuGetErrorString)
// and the call with its meaningful arguments, for example
//
//	cuMemAlloc_v2(1073741824): CUDA_ERROR_OUT_OF_MEMORY: out of memory
//
// IsOutOfMemory and IsNotReady classify errors without unwrapping by hand.
//
// # Memory rules
//
// Host slices passed to the synchronous copies may be ordinary Go memory:
// the driver is done with them when the call returns. The asynchronous copies
// read or write host memory after they return, so they accept only
// page-locked memory obtained from MemHostAlloc, which the garbage collector
// does not own; anything else is refused with an error. Device addresses are
// plain numbers (DevicePtr) and are never dereferenced on the host.
//
// Only 64-bit Linux (amd64, arm64) is supported; elsewhere Init reports that
// the platform is not supported.
package cuda
