//go:build linux && (amd64 || arm64)

package cuda

import (
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// These benchmarks need no GPU: they measure the fixed cost of the call
// path (purego crossing, output parameter, thread lock, the extra crossing
// that makes the context current) with trivial libc functions standing in
// for trivial driver functions. The GPU benchmarks (bench_gpu_test.go)
// measure the same path with the driver.

func libcSyms(b *testing.B) (labs, getpidAddr, clockGettime uintptr) {
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		b.Skipf("no libc.so.6: %v", err)
	}
	for name, dst := range map[string]*uintptr{"labs": &labs, "getpid": &getpidAddr, "clock_gettime": &clockGettime} {
		if *dst, err = purego.Dlsym(h, name); err != nil {
			b.Fatal(err)
		}
	}
	return
}

func BenchmarkCallPath(b *testing.B) {
	labs, _, clockGettime := libcSyms(b)
	// A Context whose "cuCtxSetCurrent" is labs(0) == 0, i.e. success.
	ctx := &Context{drv: &driver{cuCtxSetCurrent: labs}, handle: 0}

	b.Run("raw/no-output", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			callNoCtx(labs, 0)
		}
	})
	b.Run("raw/output-parameter", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var ts [2]int64
			callNoCtx(clockGettime, 1, uintptr(unsafe.Pointer(&ts)))
		}
	})
	b.Run("context/no-output", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := ctx.call(labs, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("context/output-parameter", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var ts [2]int64
			if _, err := ctx.call(clockGettime, 1, uintptr(unsafe.Pointer(&ts))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("context/output-parameter/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				var ts [2]int64
				if _, err := ctx.call(clockGettime, 1, uintptr(unsafe.Pointer(&ts))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("alternative/LockOSThread", func(b *testing.B) {
		for range b.N {
			runtime.LockOSThread()
			runtime.UnlockOSThread()
		}
	})
	b.Run("alternative/gettid", func(b *testing.B) {
		for range b.N {
			runtime.LockOSThread()
			_ = syscall.Gettid()
			runtime.UnlockOSThread()
		}
	})
}

// TestCallPathOnLibc checks that values go through the call path intact:
// arguments, the result and an output parameter.
func TestCallPathOnLibc(t *testing.T) {
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	labs, err := purego.Dlsym(h, "labs")
	if err != nil {
		t.Fatal(err)
	}
	getpid, err := purego.Dlsym(h, "getpid")
	if err != nil {
		t.Fatal(err)
	}
	ctx := &Context{drv: &driver{cuCtxSetCurrent: labs}}
	if r, err := ctx.call(labs, uintptr(42)); err != nil || r != 42 {
		t.Errorf("labs(42) through call = %d, %v", r, err)
	}
	// A failing "make current" (labs(handle) != 0) is reported as such.
	bad := &Context{drv: &driver{cuCtxSetCurrent: labs}, handle: 7}
	if _, err := bad.call(labs, 1); err == nil || !strings.HasPrefix(err.Error(), "cuCtxSetCurrent(0x7): ") {
		t.Errorf("failing set-current = %v, want an error naming cuCtxSetCurrent(0x7)", err)
	}
	if r := callNoCtx(getpid); int(r) != syscall.Getpid() {
		t.Errorf("getpid through callNoCtx = %d, want %d", r, syscall.Getpid())
	}
}
