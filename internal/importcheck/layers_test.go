package importcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/vramhq/vram"

// The layers, as package patterns relative to the module ("x/..." is x and
// every package below it).
var (
	library = []string{"alloc/...", "cuda/...", "trace/...", "replay/...", "gpu/...", "proc/...", "detect/...", "estimate/..."}
	command = []string{"cli/...", "serve/...", "job/...", "policy/...", "python/...", "cmd/...", "internal/cmd/..."}
	// other holds internal helpers and the packages that are only tests
	// (of the deployment files and of the scripts).
	other    = []string{"internal/...", "deploy/...", "scripts/..."}
	programs = []string{"cmd/...", "internal/cmd/..."}
)

// rule forbids the packages matching from to depend on those matching
// forbidden, directly or through other packages.
type rule struct {
	from, forbidden []string
	why             string
}

var rules = []rule{
	{library, command, "the public library does not depend on command code"},
	{[]string{"alloc/..."}, []string{"replay/..."}, "replay sits above alloc"},
	{[]string{"trace/..."}, []string{"alloc/...", "replay/..."}, "the trace formats are leaves that alloc may import"},
	{[]string{"proc/..."}, []string{"gpu/..."}, "process identity is proc's and gpu uses it, not the reverse"},
	{[]string{"cuda/..."}, []string{"alloc/..."}, "cuda is the driver binding below alloc/cudadev"},
}

// pkg is what the check needs of `go list -json`.
type pkg struct {
	ImportPath   string
	Name         string
	Deps         []string // everything the package's own files import, directly or not
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// match reports whether the module-relative path rel matches pattern.
func match(pattern, rel string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == pattern
}

func matchAny(patterns []string, rel string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, rel) })
}

// rel is path relative to the module, and whether it is in the module.
func rel(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// violations lists every broken rule in pkgs, one line each, sorted.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		if !matchAny(library, from) && !matchAny(command, from) && !matchAny(other, from) {
			out = append(out, fmt.Sprintf("%s is in no layer: add it to the README's package layout and to this test", from))
		}
		if p.Name == "main" && !matchAny(programs, from) {
			out = append(out, fmt.Sprintf("%s is a program (package main): programs live under cmd/ or internal/cmd/", from))
		}
		for _, r := range rules {
			if !matchAny(r.from, from) {
				continue
			}
			for _, d := range p.Deps {
				if to, ok := rel(d); ok && matchAny(r.forbidden, to) {
					out = append(out, fmt.Sprintf("%s depends on %s: %s", from, to, r.why))
				}
			}
		}
		for _, imps := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
			for _, d := range imps {
				if to, ok := rel(d); ok && matchAny(programs, to) && to != from {
					out = append(out, fmt.Sprintf("%s imports %s: a program is not a package to import", from, to))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// list runs go list over the whole module with the given build tags.
func list(t *testing.T, tags string) []pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the module's packages: %v", err)
	}
	args := []string{"list", "-e", "-json=ImportPath,Name,Deps,Imports,TestImports,XTestImports,Error"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(gobin, append(args, module+"/...")...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(outb))
	for {
		var p struct {
			pkg
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p.pkg)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages in %s: not the module's root?", len(pkgs), cmd.Dir)
	}
	return pkgs
}

// consult stats every Go file and go.mod under the module root. go test
// caches a passing result until a file the test itself opened or statted
// changes; the files go list reads are not among them, so without this a
// wrong import added later would still pass from the cache.
func consult(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir // not a place for packages
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || name == "go.mod" {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatalf("read the module's files: %v", err)
	}
}

// TestLayers checks the module's packages, as built by default and with
// the gpu build tag.
func TestLayers(t *testing.T) {
	consult(t, filepath.Join("..", ".."))
	for _, tags := range []string{"", "gpu"} {
		t.Run("tags="+tags, func(t *testing.T) {
			for _, v := range violations(list(t, tags)) {
				t.Error(v)
			}
		})
	}
}

// TestViolations checks the checker on made-up packages: each case breaks
// one rule, or none.
func TestViolations(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	tests := []struct {
		name string
		pkg  pkg
		want []string
	}{
		{"allowed: replay uses alloc and the formats", pkg{ImportPath: m("replay"), Deps: []string{m("alloc"), m("trace/rmm"), m("internal/units"), "fmt"}}, nil},
		{"allowed: alloc uses a format", pkg{ImportPath: m("alloc"), Deps: []string{m("trace/rmm")}}, nil},
		{"allowed: command code uses the library", pkg{ImportPath: m("cli/top"), Deps: []string{m("gpu"), m("proc"), m("job")}}, nil},
		{"allowed: an outside path that looks alike", pkg{ImportPath: m("alloc"), Deps: []string{module + "x/replay", "example.com/cli"}}, nil},
		{"alloc on replay", pkg{ImportPath: m("alloc/sim"), Deps: []string{m("replay")}},
			[]string{"alloc/sim depends on replay: replay sits above alloc"}},
		{"a format on alloc", pkg{ImportPath: m("trace/synth"), Deps: []string{m("alloc")}},
			[]string{"trace/synth depends on alloc: the trace formats are leaves that alloc may import"}},
		{"proc on gpu", pkg{ImportPath: m("proc"), Deps: []string{m("gpu")}},
			[]string{"proc depends on gpu: process identity is proc's and gpu uses it, not the reverse"}},
		{"library on command code", pkg{ImportPath: m("gpu"), Deps: []string{m("serve/api")}},
			[]string{"gpu depends on serve/api: the public library does not depend on command code"}},
		{"cuda on alloc", pkg{ImportPath: m("cuda"), Deps: []string{m("alloc")}},
			[]string{"cuda depends on alloc: cuda is the driver binding below alloc/cudadev"}},
		{"a test imports a program", pkg{ImportPath: m("serve"), XTestImports: []string{m("internal/cmd/confusion")}},
			[]string{"serve imports internal/cmd/confusion: a program is not a package to import"}},
		{"a program inside a library folder", pkg{ImportPath: m("detect/internal/confusion"), Name: "main"},
			[]string{"detect/internal/confusion is a program (package main): programs live under cmd/ or internal/cmd/"}},
		{"allowed: a program under internal/cmd", pkg{ImportPath: m("internal/cmd/confusion"), Name: "main", Deps: []string{m("detect")}}, nil},
		{"the load harness back in serve", pkg{ImportPath: m("serve/load"), Name: "main"},
			[]string{"serve/load is a program (package main): programs live under cmd/ or internal/cmd/"}},
		{"a package in no layer", pkg{ImportPath: m("misc")},
			[]string{"misc is in no layer: add it to the README's package layout and to this test"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := violations([]pkg{tt.pkg}); !slices.Equal(got, tt.want) {
				t.Errorf("violations = %q, want %q", got, tt.want)
			}
		})
	}
}
