//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	"runtime"
)

// dlOpener reports that this platform is not supported: the package binds
// the 64-bit Linux ABI of libcuda.so.1 only.
type dlOpener struct{}

func (dlOpener) open(name string) (uintptr, error) {
	return 0, fmt.Errorf("the CUDA binding supports 64-bit Linux only, not %s/%s", runtime.GOOS, runtime.GOARCH)
}

func (dlOpener) sym(uintptr, string) (uintptr, error) {
	return 0, fmt.Errorf("the CUDA binding supports 64-bit Linux only")
}

// syscallN is never reached: Init fails before any symbol is resolved.
func syscallN(fn uintptr, args ...uintptr) uintptr {
	panic("cuda: driver call on an unsupported platform")
}
