package run_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunAllocatorEnvironment: vram run --allocator vram starts a Python job
// with vram's sitecustomize loaded first, the library named, and the limit
// as the allocator's cap; a missing library stops it before the start.
func TestRunAllocatorEnvironment(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvram.so")
	if err := os.WriteFile(lib, []byte("not loaded by this job"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "seen.txt")
	script := `import os, sys
site = sys.modules.get("sitecustomize")
with open(sys.argv[1], "w") as f:
    f.write("\n".join([
        os.environ.get("VRAM_ALLOC_CONF", "-"),
        os.environ.get("VRAM_LIBRARY", "-"),
        str(site is not None and site.__file__.endswith(os.path.join("vram", "_site", "sitecustomize.py"))),
        str(os.path.isfile(os.path.join(os.path.dirname(site.__file__), "..", "torch.py"))),
    ]))
`
	te := &testEnv{}
	_, stderr, code := vram(t, te.env(nil, false), "run", "-q", "--allocator", "vram", "--libvram", lib,
		"--alloc-conf", "page_mapped:true", "--limit", "8GiB", "--", py, "-c", script, out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"max_bytes:8589934592,page_mapped:true", lib, "True", "True"}
	if got := strings.Split(string(b), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the job saw %q, want %q", got, want)
	}

	_, stderr, code = vram(t, te.env(nil, false), "run", "--allocator", "vram", "--libvram", filepath.Join(dir, "missing.so"), "--", py, "-c", "print(1)")
	if code != 2 || !strings.Contains(stderr.String(), "--libvram") || !strings.Contains(stderr.String(), "missing.so") {
		t.Errorf("missing library: exit %d, %s", code, stderr)
	}
	_, stderr, code = vram(t, te.env(nil, false), "run", "--alloc-conf", "page_mapped:true", "--", py, "-c", "print(1)")
	if code != 2 || !strings.Contains(stderr.String(), "--alloc-conf needs --allocator vram") {
		t.Errorf("--alloc-conf alone: exit %d, %s", code, stderr)
	}
}
