package run

// The files vram run and vram fit write once the job has ended: checked
// before it starts, and kept somewhere when writing them still fails.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// output is one result vram writes when the job has ended.
type output struct {
	flag  string // as the user typed it: --csv
	path  string // "" for standard output (--json)
	what  string // what it holds, for messages: "the samples"
	write func(io.Writer) error
}

// checkOutputs makes sure every output file can be written before the job
// starts, so that a long job's results are not lost to a typo: the
// directory exists, the file (if it exists) is writable, a new file can be
// created there (it is removed again), and no file is named twice. The
// error names the flag and the path.
func checkOutputs(outs []output) error {
	seen := map[string]string{}
	for _, o := range outs {
		if o.path == "" {
			continue
		}
		abs, err := filepath.Abs(o.path)
		if err != nil {
			abs = o.path
		}
		if prev, ok := seen[abs]; ok {
			return fmt.Errorf("%s and %s both name %s: give each its own file", prev, o.flag, o.path)
		}
		seen[abs] = o.flag
		if err := checkWritable(o.path); err != nil {
			return fmt.Errorf("%s %s: cannot be written: %w", o.flag, o.path, err)
		}
	}
	return nil
}

// checkWritable tells whether path can be written, without changing it.
func checkWritable(path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return errors.New("it is a directory")
	case err == nil && !st.Mode().IsRegular():
		// A pipe or a device (/dev/stdout, a shell's >(...)): opening it
		// now could block or consume it; it is written at the end.
		return nil
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // no O_TRUNC: left as it is
		if err != nil {
			return reason(err)
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return reason(err)
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the directory %s does not exist", dir)
		}
		return reason(err)
	} else if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return reason(err)
	}
	f.Close()
	return os.Remove(path)
}

// reason is the system's word for a failed file operation, without the
// operation and path (the caller names them).
func reason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeOutputs writes every output and reports on stderr each one that
// fails. A file that cannot be written is written instead to a new file in
// one of the fallback directories (by default the temporary directory, then
// the current one), and the message says where. It returns false when some
// result could not be written anywhere.
func writeOutputs(stdout, stderr io.Writer, fallbackDirs []string, outs []output) bool {
	ok := true
	for _, o := range outs {
		label := o.flag + " " + o.path
		var err error
		if o.path == "" {
			label = o.flag + " (standard output)"
			err = reason(o.write(stdout))
		} else {
			err = writeFile(o.path, o.write)
		}
		if err == nil {
			continue
		}
		where, ferr := writeFallback(o, fallbackDirs)
		if ferr != nil {
			fmt.Fprintf(stderr, "vram: %s: cannot be written: %v; %s could not be kept anywhere else either: %v\n", label, err, o.what, ferr)
			ok = false
			continue
		}
		fmt.Fprintf(stderr, "vram: %s: cannot be written: %v; vram kept %s in %s instead\n", label, err, o.what, where)
	}
	return ok
}

// writeFile creates path and writes it.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return reason(err)
	}
	if err := write(f); err != nil {
		f.Close()
		return reason(err)
	}
	return reason(f.Close())
}

// writeFallback writes o to a new file named after it (vram-NAME-*.EXT) in
// the first of dirs where that works, and returns its path.
func writeFallback(o output, dirs []string) (string, error) {
	name := "json-result.json"
	if o.path != "" {
		name = filepath.Base(o.path)
	}
	ext := filepath.Ext(name)
	pattern := "vram-" + strings.TrimSuffix(name, ext) + "-*" + ext
	var errs []error
	for _, dir := range dirs {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			errs = append(errs, reason(err))
			continue
		}
		err = o.write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			errs = append(errs, fmt.Errorf("%s: %w", f.Name(), reason(err)))
			continue
		}
		if abs, err := filepath.Abs(f.Name()); err == nil {
			return abs, nil
		}
		return f.Name(), nil
	}
	return "", errors.Join(errs...)
}
