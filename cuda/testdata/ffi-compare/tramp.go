// Package fficompare holds the trampolines of the FFI cost comparison (see go.mod).
package fficompare

/*
#include <stdint.h>
#include <dlfcn.h>
typedef uintptr_t (*fn1)(uintptr_t);
typedef uintptr_t (*fn2)(uintptr_t, uintptr_t);
static uintptr_t call1(uintptr_t f, uintptr_t a) { return ((fn1)f)(a); }
static uintptr_t call2(uintptr_t f, uintptr_t a, uintptr_t b) { return ((fn2)f)(a, b); }
// make "current" then call, in one crossing
static uintptr_t ctxcall2(uintptr_t set, uintptr_t ctx, uintptr_t f, uintptr_t a, uintptr_t b) {
	uintptr_t r = ((fn1)set)(ctx);
	if (r != 0) return r;
	return ((fn2)f)(a, b);
}
*/
import "C"
import "unsafe"

func Call1(f, a uintptr) uintptr { return uintptr(C.call1(C.uintptr_t(f), C.uintptr_t(a))) }
func Call2(f uintptr, a, b unsafe.Pointer) uintptr {
	return uintptr(C.call2(C.uintptr_t(f), C.uintptr_t(uintptr(a)), C.uintptr_t(uintptr(b))))
}
func CtxCall2(set, ctx, f uintptr, a uintptr, b unsafe.Pointer) uintptr {
	return uintptr(C.ctxcall2(C.uintptr_t(set), C.uintptr_t(ctx), C.uintptr_t(f), C.uintptr_t(a), C.uintptr_t(uintptr(b))))
}
