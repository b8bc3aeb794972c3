package run

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vramhq/vram/job"
)

func TestAllocatorFlagsCheck(t *testing.T) {
	for _, tc := range []struct {
		f    allocatorFlags
		want string // "" for no error
	}{
		{allocatorFlags{}, ""},
		{allocatorFlags{name: "torch"}, ""},
		{allocatorFlags{name: "vram", conf: "page_mapped:true"}, ""},
		{allocatorFlags{name: "jemalloc"}, `--allocator "jemalloc": want torch or vram`},
		{allocatorFlags{conf: "page_mapped:true"}, "--alloc-conf needs --allocator vram"},
		{allocatorFlags{name: "torch", lib: "x.so"}, "--libvram needs --allocator vram"},
		{allocatorFlags{name: "vram", conf: "page_mapped:maybe"}, "--alloc-conf: "},
	} {
		err := tc.f.check()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}

func TestAllocatorConf(t *testing.T) {
	for _, tc := range []struct {
		conf  string
		limit job.Limit
		want  string
	}{
		{"", job.Limit{}, ""},
		{"page_mapped:true", job.Limit{Bytes: 16 << 30}, "max_bytes:17179869184,page_mapped:true"},
		{"max_bytes:8GiB", job.Limit{Bytes: 16 << 30}, "max_bytes:8589934592"},
		{"max_bytes:32GiB", job.Limit{Bytes: 16 << 30}, "max_bytes:17179869184"},
		{"", job.Limit{Percent: 25}, "max_fraction:0.25"},
		{"max_fraction:0.1", job.Limit{Percent: 25}, "max_fraction:0.1"},
	} {
		got, err := allocatorConf(tc.conf, tc.limit)
		if err != nil || got != tc.want {
			t.Errorf("allocatorConf(%q, %v) = %q, %v; want %q", tc.conf, tc.limit, got, err, tc.want)
		}
	}
}

func TestFindLibrary(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvram.so")
	if err := os.WriteFile(lib, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	exeBeside := func() (string, error) { return filepath.Join(dir, "vram"), nil }
	exeElsewhere := func() (string, error) { return "/nonexistent/bin/vram", nil }
	noExe := func() (string, error) { return "", errors.New("no executable") }

	t.Setenv(envLibrary, "")
	if got, err := (&allocatorFlags{name: "vram"}).findLibrary(exeBeside); err != nil || got != lib {
		t.Errorf("beside the executable: %q, %v", got, err)
	}
	if got, err := (&allocatorFlags{name: "vram", lib: lib}).findLibrary(noExe); err != nil || got != lib {
		t.Errorf("--libvram: %q, %v", got, err)
	}
	if _, err := (&allocatorFlags{name: "vram", lib: lib + ".missing"}).findLibrary(exeBeside); err == nil ||
		!strings.Contains(err.Error(), "--libvram") {
		t.Errorf("missing --libvram file: %v", err)
	}
	t.Setenv(envLibrary, lib)
	if got, err := (&allocatorFlags{name: "vram"}).findLibrary(exeElsewhere); err != nil || got != lib {
		t.Errorf("$VRAM_LIBRARY: %q, %v", got, err)
	}
	t.Setenv(envLibrary, filepath.Join(dir, "nope.so"))
	_, err := (&allocatorFlags{name: "vram"}).findLibrary(exeElsewhere)
	if err == nil || !strings.Contains(err.Error(), "nope.so ($VRAM_LIBRARY)") ||
		!strings.Contains(err.Error(), "/nonexistent/bin/libvram.so (beside vram)") ||
		!strings.Contains(err.Error(), "go build -buildmode=c-shared") {
		t.Errorf("nothing found: %v", err)
	}
}

func TestPrepareAllocator(t *testing.T) {
	pkg := fstest.MapFS{
		"vram/__init__.py":            {Data: []byte("# package\n")},
		"vram/_site/sitecustomize.py": {Data: []byte("# site\n")},
		"vram/torch.py":               {Data: []byte("# torch\n")},
	}
	base := []string{"HOME=/root", "PYTHONPATH=/user/lib", "VRAM_ALLOC_CONF=stale", "PATH=/bin"}
	s, err := prepareAllocator(pkg, "/lib/libvram.so", "page_mapped:true", base)
	if err != nil {
		t.Fatal(err)
	}
	defer s.cleanup()
	for _, f := range []string{"vram/__init__.py", "vram/_site/sitecustomize.py", "vram/torch.py"} {
		if _, err := os.Stat(filepath.Join(s.dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	env := strings.Join(s.env, "\n")
	for _, want := range []string{
		"HOME=/root", "PATH=/bin",
		"PYTHONPATH=" + filepath.Join(s.dir, "vram", "_site") + ":" + s.dir + ":/user/lib",
		"VRAM_LIBRARY=/lib/libvram.so", "VRAM_ALLOC_CONF=page_mapped:true", "VRAM_RUN_MARKER=" + s.marker,
	} {
		if !strings.Contains(env, want+"\n") && !strings.HasSuffix(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "stale") {
		t.Errorf("the old VRAM_ALLOC_CONF is kept:\n%s", env)
	}
	if s.installed() || s.headroom() != 0 {
		t.Fatal("installed before anything ran")
	}
	if err := os.WriteFile(s.marker, []byte("1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !s.installed() || s.headroom() != contextAllowance {
		t.Fatal("marker written, not installed")
	}
	s.cleanup()
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", s.dir)
	}
}
