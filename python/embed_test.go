package python_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vramhq/vram/python"
)

// TestPackage checks that the embedded files are the package's Python
// files on disk, those whose names start with "_" included (a plain
// directory pattern would leave them out), and nothing built.
func TestPackage(t *testing.T) {
	var got []string
	err := fs.WalkDir(python.Package, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			got = append(got, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, pattern := range []string{"vram/*.py", "vram/_site/*.py"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m...)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("embedded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range []string{"vram/__init__.py", "vram/_lib.py", "vram/torch.py", "vram/_site/sitecustomize.py"} {
		b, err := fs.ReadFile(python.Package, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		disk, err := os.ReadFile(f)
		if err != nil || string(disk) != string(b) {
			t.Errorf("%s differs from the file on disk (%v)", f, err)
		}
	}
	for _, p := range got {
		if !strings.HasSuffix(p, ".py") {
			t.Errorf("embedded %s, which is not Python source", p)
		}
	}
}
