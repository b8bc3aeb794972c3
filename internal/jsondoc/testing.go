package jsondoc

import (
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	repoOnce sync.Once
	repoDoc  *Doc
	repoErr  error
)

// RepoDoc is docs/json.md of the source tree this package was built from,
// parsed once.
func RepoDoc() (*Doc, error) {
	repoOnce.Do(func() {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			repoErr = errorString("jsondoc: cannot tell where the source tree is")
			return
		}
		repoDoc, repoErr = Load(filepath.Join(filepath.Dir(file), "..", "..", "docs", "json.md"))
	})
	return repoDoc, repoErr
}

// maxErrors is how many differences Test reports before it counts them.
const maxErrors = 20

type errorString string

func (e errorString) Error() string { return string(e) }

// Test checks one JSON document against docs/json.md's section titled
// title and fails t with every difference.
func Test(t testing.TB, title string, data []byte) {
	t.Helper()
	report(t, title, data, func(d *Doc) []error { return d.Check(title, data) })
}

// TestLines is Test for JSON lines.
func TestLines(t testing.TB, title string, data []byte) {
	t.Helper()
	report(t, title, data, func(d *Doc) []error { return d.CheckLines(title, data) })
}

func report(t testing.TB, title string, data []byte, check func(*Doc) []error) {
	t.Helper()
	d, err := RepoDoc()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Errorf("%s: no JSON to check", title)
		return
	}
	errs := check(d)
	for _, err := range errs[:min(len(errs), maxErrors)] {
		t.Errorf("docs/json.md: %v", err)
	}
	if len(errs) > maxErrors {
		t.Errorf("docs/json.md: and %d more differences", len(errs)-maxErrors)
	}
}
