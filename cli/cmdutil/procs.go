package cmdutil

import (
	"os"
	"runtime"
)

// OneP runs the Go program on one P (GOMAXPROCS 1) until the returned
// function is called, unless GOMAXPROCS is set in the environment, which
// wins. It is for the commands whose work is one goroutine woken by a
// timer (vram watch, vram serve): with a second P, every timer wakeup also
// wakes an idle thread to look for work, which finds none, and on a
// virtual machine those thread switches cost more than the work itself
// (docs/monitor.md, docs/serve.md).
func OneP() (restore func()) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return func() {}
	}
	prev := runtime.GOMAXPROCS(1)
	return func() { runtime.GOMAXPROCS(prev) }
}
