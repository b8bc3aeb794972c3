package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildLibrary builds libvram.so into dir with the README's command.
func buildLibrary(t *testing.T, dir string) string {
	t.Helper()
	lib := filepath.Join(dir, "libvram.so")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return lib
}

// TestCallers drives the library from C++ as PyTorch's pluggable allocator
// does (testdata/driver.cc) on the simulated device: settings set after
// the library loaded, the out-of-memory exception, the hooks, eight
// threads, fork.
func TestCallers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the shared library")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Fatal("g++ is needed to build the test driver")
	}
	dir := t.TempDir()
	buildLibrary(t, dir)
	drv := filepath.Join(dir, "driver")
	cmd := exec.Command(cxx, "-std=c++17", "-O1", "-pthread", "-I.", "-o", drv, "testdata/driver.cc",
		"-L"+dir, "-lvram", "-Wl,-rpath,"+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the driver: %v\n%s", err, out)
	}
	run := exec.Command(drv)
	// The driver sets VRAM_DEVICE and VRAM_ALLOC_CONF itself, after the
	// library has loaded.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VRAM_") {
			run.Env = append(run.Env, kv)
		}
	}
	channel := t.TempDir()
	run.Env = append(run.Env, "VRAM_CHANNEL_DIR="+channel)
	out, err := run.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	for _, want := range []string{"ok malloc", "ok out of memory throws", "ok 8 threads", "ok fork", "ok channel", "ok errors"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("driver output lacks %q", want)
		}
	}
	// The driver's exit removed its channel file.
	if left, _ := filepath.Glob(filepath.Join(channel, "*")); len(left) != 0 {
		t.Errorf("the channel's files outlived the process: %v", left)
	}
}
