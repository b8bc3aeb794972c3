//go:build linux && (amd64 || arm64)

package cuda

import "github.com/ebitengine/purego"

// dlOpener loads libraries with the system's dlopen and dlsym.
type dlOpener struct{}

func (dlOpener) open(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func (dlOpener) sym(handle uintptr, name string) (uintptr, error) {
	return purego.Dlsym(handle, name)
}

// syscallN calls the C function at fn. The callers (callNoCtx, Context.call)
// are marked go:uintptrescapes, so objects whose addresses are among args
// are on the heap and stay alive until they return.
func syscallN(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
