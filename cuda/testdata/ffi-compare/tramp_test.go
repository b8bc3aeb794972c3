package fficompare

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

func syms(b *testing.B) (labs, cg uintptr) {
	h, _ := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	labs, _ = purego.Dlsym(h, "labs")
	cg, _ = purego.Dlsym(h, "clock_gettime")
	return
}

func BenchmarkFFI(b *testing.B) {
	labs, cg := syms(b)
	b.Run("purego/labs", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			purego.SyscallN(labs, 0)
		}
	})
	b.Run("cgo/labs", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			Call1(labs, 0)
		}
	})
	b.Run("purego/lock+set+clock_gettime", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var ts [2]int64
			runtime.LockOSThread()
			purego.SyscallN(labs, 0)
			purego.SyscallN(cg, 1, uintptr(unsafe.Pointer(&ts)))
			runtime.UnlockOSThread()
		}
	})
	b.Run("cgo/set+clock_gettime-one-crossing", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var ts [2]int64
			CtxCall2(labs, 0, cg, 1, unsafe.Pointer(&ts))
		}
	})
}
