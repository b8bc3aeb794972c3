// Command libvram is vram's caching allocator as a C shared library, for
// PyTorch (its pluggable allocator), CuPy (CFunctionAllocator) and the vram
// Python package. Build it with
//
//	go build -buildmode=c-shared -o python/vram/libvram.so ./cmd/libvram
//
// No CUDA toolkit is needed: libcuda.so.1 is loaded at run time, on the
// first allocation. vram.h declares the interface.
//
// # How a call travels
//
// PyTorch calls vram_malloc(size, device, stream) through a function
// pointer. vram_malloc is C++ (shim.cc): it refuses in a forked child,
// then makes one cgo call into Go (vramGoMallocAfterFrees), which first
// makes the frees queued since the last call (vram_free does not enter Go:
// it queues the pointer, see shim.cc), then loads the
// device's allocator with one atomic read and calls Allocator.Malloc; on
// the cached path that is bookkeeping under the allocator's mutex, with no
// driver call and no Go allocation. A failure comes back as address 0 with
// the message stored for the calling thread, and the shim throws it as a
// std::runtime_error, which PyTorch's Python binding raises as a
// RuntimeError beginning "CUDA out of memory.". The design of what lies behind the cgo boundary
// is in package internal/libvram.
//
// # Statistics channel
//
// Each device's allocator publishes its figures in a file in shared
// memory (package alloc/statchan; docs/channel.md), from a background
// goroutine: vram status, top, run and serve read them. The shim removes
// the files at exit (a destructor that runs only in the process that made
// them); VRAM_CHANNEL_DIR=off turns the channel off.
//
// # Fork
//
// A Go runtime does not survive fork: the child keeps only the forking
// thread. A pthread_atfork handler marks the child, and every entry point
// checks the mark before entering Go: allocation fails with a message
// that says why, frees are ignored (the parent owns the memory), and the
// other calls fail. DataLoader workers, which never allocate device
// memory, are unaffected.
package main

/*
#include <stdint.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/internal/libvram"
)

func main() {}

var (
	hostOnce sync.Once
	host     *libvram.Host
	hostErr  error
)

// getHost returns the process's Host, made from the environment on first
// use, with its statistics channel (VRAM_CHANNEL_DIR) on.
func getHost() (*libvram.Host, error) {
	hostOnce.Do(func() {
		host, hostErr = libvram.NewFromEnv(getenv)
		if hostErr != nil {
			return
		}
		opt, err := libvram.ChannelFromEnv(getenv)
		if err == nil {
			opt.Created = func(p string) { C.vram_shim_channel_add(C.CString(p)) }
			opt.Removed = func(p string) {
				cs := C.CString(p)
				C.vram_shim_channel_forget(cs)
				C.free(unsafe.Pointer(cs))
			}
			err = host.EnableChannel(opt)
		}
		if err != nil {
			host, hostErr = nil, err
		}
	})
	return host, hostErr
}

// getenv reads the process's environment as it is now, through the C
// library: Go's copy was taken when the library was loaded.
func getenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return ""
	}
	return C.GoString(v)
}

// setError stores err as the calling thread's last error.
func setError(err error) {
	var oom *libvram.OutOfMemoryError
	isOOM := C.int(0)
	if errors.As(err, &oom) {
		isOOM = 1
	}
	C.vram_shim_set_error(C.CString(err.Error()), isOOM)
}

// recovered turns a panic into the thread's last error, so that a bug
// becomes a failed call rather than a crash of the framework's process.
func recovered(r any) {
	setError(fmt.Errorf("vram: internal error: %v", r))
}

func status(err error) C.int {
	if err != nil {
		setError(err)
		return -1
	}
	return 0
}

//export vramGoMalloc
func vramGoMalloc(size C.size_t, device C.int, stream C.uintptr_t) (ptr C.uintptr_t) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			ptr = 0
		}
	}()
	h, err := getHost()
	if err != nil {
		setError(err)
		return 0
	}
	p, err := h.Malloc(uint64(size), int(device), alloc.Stream(stream))
	if err != nil {
		setError(err)
		return 0
	}
	return C.uintptr_t(p)
}

//export vramGoMallocAfterFrees
func vramGoMallocAfterFrees(size C.size_t, device C.int, stream C.uintptr_t, ptrs *C.uintptr_t, devs *C.int, n C.int) C.uintptr_t {
	vramGoFreeBatch(ptrs, devs, n)
	return vramGoMalloc(size, device, stream)
}

// vramGoFreeBatch makes n frees queued by the shim; failures are reported
// as vram_free's are (standard error, the first few).
//
//export vramGoFreeBatch
func vramGoFreeBatch(ptrs *C.uintptr_t, devs *C.int, n C.int) {
	if n <= 0 {
		return
	}
	p := unsafe.Slice(ptrs, int(n))
	d := unsafe.Slice(devs, int(n))
	for i := range p {
		vramGoFree(p[i], d[i], 1)
	}
}

// freeErrors counts the frees that failed with no caller to tell; the
// first few are written to standard error.
var freeErrors atomic.Int64

const maxFreeErrorsShown = 10

//export vramGoFree
func vramGoFree(ptr C.uintptr_t, device C.int, report C.int) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			rc = -1
		}
	}()
	h, err := getHost()
	if err == nil {
		err = h.Free(uint64(ptr), int(device))
	}
	if err == nil {
		return 0
	}
	if report != 0 {
		if n := freeErrors.Add(1); n <= maxFreeErrorsShown {
			fmt.Fprintf(os.Stderr, "vram: %v\n", err)
			if n == maxFreeErrorsShown {
				fmt.Fprintln(os.Stderr, "vram: further failed frees are not shown")
			}
		}
	}
	return status(err)
}

//export vramGoRecordStream
func vramGoRecordStream(ptr C.uintptr_t, device C.int, stream C.uintptr_t) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			rc = -1
		}
	}()
	h, err := getHost()
	if err == nil {
		err = h.RecordStream(uint64(ptr), int(device), alloc.Stream(stream))
	}
	return status(err)
}

// call runs f on the Host and reports its error as the thread's last error.
func call(f func(h *libvram.Host) error) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			rc = -1
		}
	}()
	h, err := getHost()
	if err == nil {
		err = f(h)
	}
	return status(err)
}

// text runs f on the Host and returns its string for C (nil on error).
func text(f func(h *libvram.Host) (string, error)) (s *C.char) {
	defer func() {
		if r := recover(); r != nil {
			recovered(r)
			s = nil
		}
	}()
	h, err := getHost()
	var out string
	if err == nil {
		out, err = f(h)
	}
	if err != nil {
		setError(err)
		return nil
	}
	return C.CString(out)
}

func jsonText(v any, err error) (string, error) {
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

//export vramGoConfigure
func vramGoConfigure(conf *C.char) C.int {
	s := C.GoString(conf)
	return call(func(h *libvram.Host) error { return h.Configure(s) })
}

//export vramGoConfig
func vramGoConfig() *C.char {
	return text(func(h *libvram.Host) (string, error) { return h.Config(), nil })
}

//export vramGoSetFraction
func vramGoSetFraction(device C.int, fraction C.double) C.int {
	return call(func(h *libvram.Host) error { return h.SetFraction(int(device), float64(fraction)) })
}

//export vramGoSetLimit
func vramGoSetLimit(device C.int, bytes C.uint64_t) C.int {
	return call(func(h *libvram.Host) error { return h.SetLimit(int(device), uint64(bytes)) })
}

//export vramGoStatsJSON
func vramGoStatsJSON(device C.int) *C.char {
	return text(func(h *libvram.Host) (string, error) { return jsonText(h.Stats(int(device))) })
}

//export vramGoSummary
func vramGoSummary(device C.int) *C.char {
	return text(func(h *libvram.Host) (string, error) { return h.Summary(int(device)) })
}

//export vramGoSnapshotJSON
func vramGoSnapshotJSON() *C.char {
	return text(func(h *libvram.Host) (string, error) { return jsonText(h.TorchSnapshot(), nil) })
}

//export vramGoEmptyCache
func vramGoEmptyCache(device C.int) C.int {
	return call(func(h *libvram.Host) error { return h.EmptyCache(int(device)) })
}

//export vramGoResetPeak
func vramGoResetPeak(device C.int) C.int {
	return call(func(h *libvram.Host) error { return h.ResetPeakStats(int(device)) })
}

//export vramGoResetAccumulated
func vramGoResetAccumulated(device C.int) C.int {
	return call(func(h *libvram.Host) error { return h.ResetAccumulatedStats(int(device)) })
}

//export vramGoInfoJSON
func vramGoInfoJSON() *C.char {
	return text(func(h *libvram.Host) (string, error) { return jsonText(h.Info(), nil) })
}
