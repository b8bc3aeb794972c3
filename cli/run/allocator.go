package run

// --allocator vram: vram's allocator inside the job's Python processes.
//
// The vram Python package (embedded in this binary, package python) is
// written to a temporary folder with a sitecustomize module that Python
// imports at start-up when the folder is first on PYTHONPATH. That module
// installs vram as PyTorch's allocator before the script runs, with the
// settings of VRAM_ALLOC_CONF, and records in VRAM_RUN_MARKER that it did.
// The library is found with --libvram, $VRAM_LIBRARY, or beside the vram
// executable, and checked before the job starts.
//
// With --limit, the limit becomes the allocator's own cap (max_bytes or
// max_fraction, the smaller of it and --alloc-conf's): the job gets
// PyTorch's out-of-memory error at the limit and can catch it. vram still
// watches the job's memory on the driver's side, as without --allocator;
// once a process of the job has installed the allocator, the signal
// threshold rises by contextAllowance per GPU, the CUDA context and
// library workspaces that no allocator sees. A job in which nothing
// installs the allocator is signalled at the limit, as before.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/job"
)

// contextAllowance is what a process on the allocator may hold beyond its
// cap on one GPU: its CUDA context, cuBLAS and cuDNN handles.
const contextAllowance = 1 << 30

// Environment variables the job sees with --allocator vram.
const (
	envLibrary = "VRAM_LIBRARY"    // the libvram.so the package loads
	envConf    = alloc.EnvConfig   // the allocator's settings
	envMarker  = "VRAM_RUN_MARKER" // the file sitecustomize appends its PID to
	envRequire = "VRAM_REQUIRE_ALLOCATOR"
)

type allocatorFlags struct {
	name string // "" or "torch": the framework's own; "vram"
	conf string
	lib  string
}

func (a *allocatorFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&a.name, "allocator", "", "device-memory allocator of the job's PyTorch processes: torch (their own) or vram")
	fl.StringVar(&a.conf, "alloc-conf", "", "settings of vram's allocator, VRAM_ALLOC_CONF syntax (page_mapped:true,max_bytes:40GiB); with --allocator vram")
	fl.StringVar(&a.lib, "libvram", "", "path of libvram.so (default: $VRAM_LIBRARY, else beside the vram executable); with --allocator vram")
}

// check validates the flags; it does not look for the library.
func (a *allocatorFlags) check() error {
	switch a.name {
	case "", "torch":
		if a.conf != "" {
			return errors.New("--alloc-conf needs --allocator vram")
		}
		if a.lib != "" {
			return errors.New("--libvram needs --allocator vram")
		}
		return nil
	case "vram":
		if _, err := alloc.ParseConfig(a.conf); err != nil {
			return fmt.Errorf("--alloc-conf: %w", err)
		}
		return nil
	}
	return fmt.Errorf("--allocator %q: want torch or vram", a.name)
}

func (a *allocatorFlags) vram() bool { return a.name == "vram" }

// findLibrary returns the libvram.so to use, or an error that says where it
// looked and how to build it.
func (a *allocatorFlags) findLibrary(executable func() (string, error)) (string, error) {
	var tried []string
	try := func(p, from string) (string, bool) {
		if p == "" {
			return "", false
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			abs = p
		}
		if st, err := os.Stat(abs); err == nil && st.Mode().IsRegular() {
			return abs, true
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", abs, from))
		return "", false
	}
	if a.lib != "" {
		if p, ok := try(a.lib, "--libvram"); ok {
			return p, nil
		}
		return "", fmt.Errorf("--libvram %s: no such file", a.lib)
	}
	if p, ok := try(os.Getenv(envLibrary), "$"+envLibrary); ok {
		return p, nil
	}
	if exe, err := executable(); err == nil {
		if p, ok := try(filepath.Join(filepath.Dir(exe), "libvram.so"), "beside vram"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("--allocator vram: libvram.so not found (looked in %s); build it with "+
		"`go build -buildmode=c-shared -o libvram.so ./cmd/libvram` beside the vram binary, or name it with --libvram",
		strings.Join(tried, ", "))
}

// allocatorConf is --alloc-conf with the limit as the allocator's cap.
func allocatorConf(conf string, limit job.Limit) (string, error) {
	c, err := alloc.ParseConfig(conf)
	if err != nil {
		return "", fmt.Errorf("--alloc-conf: %w", err)
	}
	if limit.Bytes > 0 && (c.MaxBytes == 0 || limit.Bytes < c.MaxBytes) {
		c.MaxBytes = limit.Bytes
	}
	if f := limit.Percent / 100; f > 0 && (c.MaxFraction == 0 || f < c.MaxFraction) {
		c.MaxFraction = f
	}
	return c.String(), nil
}

// allocatorSetup is what --allocator vram prepared for one job.
type allocatorSetup struct {
	dir    string   // the temporary folder; removed by cleanup
	env    []string // the job's environment
	marker string
}

// prepareAllocator writes the Python package from pkg (its vram/ folder and
// its sitecustomize module) to a temporary folder and returns the job's
// environment: base with PYTHONPATH, VRAM_LIBRARY, VRAM_ALLOC_CONF and
// VRAM_RUN_MARKER set.
func prepareAllocator(pkg fs.FS, lib, conf string, base []string) (*allocatorSetup, error) {
	dir, err := os.MkdirTemp("", "vram-run-")
	if err != nil {
		return nil, fmt.Errorf("--allocator vram: %w", err)
	}
	s := &allocatorSetup{dir: dir, marker: filepath.Join(dir, "installed")}
	if err := writeTree(pkg, dir); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("--allocator vram: writing the Python package: %w", err)
	}
	site := filepath.Join(dir, "vram", "_site")
	path := site + string(os.PathListSeparator) + dir
	var env []string
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONPATH":
			if v != "" {
				path += string(os.PathListSeparator) + v
			}
			continue
		case envLibrary, envConf, envMarker, envRequire:
			continue
		}
		env = append(env, kv)
	}
	s.env = append(env, "PYTHONPATH="+path, envLibrary+"="+lib, envConf+"="+conf, envMarker+"="+s.marker, envRequire+"=1")
	return s, nil
}

// installed reports whether a process of the job installed the allocator.
func (s *allocatorSetup) installed() bool {
	st, err := os.Stat(s.marker)
	return err == nil && st.Size() > 0
}

// headroom is the limit's allowance for processes on the allocator.
func (s *allocatorSetup) headroom() uint64 {
	if s.installed() {
		return contextAllowance
	}
	return 0
}

func (s *allocatorSetup) cleanup() { os.RemoveAll(s.dir) }

// writeTree copies every file of pkg under dir.
func writeTree(pkg fs.FS, dir string) error {
	return fs.WalkDir(pkg, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(pkg, p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
