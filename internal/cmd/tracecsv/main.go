// Command tracecsv writes any trace that vram replay reads (an RMM log, a
// PyTorch memory snapshot pickle, a synth: spec) as an RMM CSV log, the one
// format PyTorch's replay harness (bench/torchreplay) reads, so that both
// programs replay the same records in the same order.
//
//	go run ./internal/cmd/tracecsv replay/testdata/recorded/kvgen.pickle.gz kvgen.csv.gz
//	go run ./internal/cmd/tracecsv -trace snap@dev1 snap.pickle snap1.csv
//	go run ./internal/cmd/tracecsv synth:kvcache kvcache.csv.gz
//
// OUT ending in .gz is gzip-compressed. A snapshot with histories on more
// than one device gives one trace per device (NAME@devN, as vram replay
// names them); -trace picks one. Every record is written, allocate
// failures included, with its thread, time and stream as the reader gave
// them (a snapshot's are its stream handles and its times since the first
// event), so that vram replay finds the same records in the CSV as in the
// source.
//
// The output is written to a temporary file beside OUT, then read back
// with the same reader vram replay uses and compared with the source
// record by record; only a file that matches is renamed to OUT. A summary
// line goes to stderr.
package main

import (
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/replay"
	"github.com/vramhq/vram/trace/rmm"
)

const usage = "usage: tracecsv [-trace NAME] TRACE OUT[.gz]"

func main() {
	err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) { // -h: the usage is printed
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracecsv:", err)
	}
	os.Exit(cmdutil.ExitCode(err)) // 2 for a usage mistake
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracecsv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pick := fs.String("trace", "", "the trace to write when TRACE holds several (a snapshot with histories on several devices: NAME@devN)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cmdutil.Usage(err)
	}
	if fs.NArg() != 2 {
		return cmdutil.Usage(errors.New(usage))
	}
	spec, out := fs.Arg(0), fs.Arg(1)
	ts, err := replay.Open(spec)
	if err != nil {
		return err
	}
	tr, err := choose(ts, *pick)
	if err != nil {
		return fmt.Errorf("%s: %w", spec, err)
	}
	st, err := write(tr, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tracecsv: %s: %d records (%d allocations, %d frees, %d allocate failures, %d streams) written to %s and read back identical\n",
		tr.Name, st.records, st.allocs, st.frees, st.failures, len(st.streams), out)
	return nil
}

// choose returns the trace named pick, or the only one when pick is empty.
func choose(ts []*replay.Trace, pick string) (*replay.Trace, error) {
	var names []string
	for _, t := range ts {
		if t.Name == pick || (pick == "" && len(ts) == 1) {
			return t, nil
		}
		names = append(names, t.Name)
	}
	if pick == "" {
		return nil, fmt.Errorf("holds %d traces (%s): pick one with -trace", len(ts), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("no trace %q (it holds %s)", pick, strings.Join(names, ", "))
}

type stats struct {
	records, allocs, frees, failures int64
	streams                          map[uint64]bool
}

// write writes t to out through a temporary file that is checked against t
// before it replaces out.
func write(t *replay.Trace, out string) (st stats, err error) {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return st, err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	var w io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(out, ".gz") {
		zw = gzip.NewWriter(f)
		w = zw
	}
	st, err = copyRecords(t, rmm.NewWriter(w))
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, fmt.Errorf("writing %s: %w", out, err)
	}
	if err := compare(t, tmp); err != nil {
		return st, fmt.Errorf("%s read back: %w", out, err)
	}
	// CreateTemp makes the file private; a trace is for others to read.
	if err := os.Chmod(tmp, 0o644); err != nil {
		return st, err
	}
	return st, os.Rename(tmp, out)
}

func copyRecords(t *replay.Trace, w *rmm.Writer) (stats, error) {
	st := stats{streams: map[uint64]bool{}}
	src, done, err := t.Records()
	if err != nil {
		return st, err
	}
	defer done()
	for {
		r, err := src.Next()
		if err == io.EOF {
			return st, w.Flush()
		}
		if err != nil {
			return st, err
		}
		if err := w.Write(r); err != nil {
			return st, err
		}
		st.records++
		st.streams[r.Stream] = true
		switch r.Action {
		case rmm.Allocate:
			st.allocs++
		case rmm.Free:
			st.frees++
		case rmm.AllocateFailure:
			st.failures++
		}
	}
}

// compare reads the file at path as vram replay does and checks that it
// holds t's records, field by field.
func compare(t *replay.Trace, path string) error {
	back, err := replay.Open(path)
	if err != nil {
		return err
	}
	if len(back) != 1 {
		return fmt.Errorf("%d traces, want 1", len(back))
	}
	a, doneA, err := t.Records()
	if err != nil {
		return err
	}
	defer doneA()
	b, doneB, err := back[0].Records()
	if err != nil {
		return err
	}
	defer doneB()
	for i := int64(1); ; i++ {
		ra, errA := a.Next()
		rb, errB := b.Next()
		switch {
		case errA == io.EOF && errB == io.EOF:
			return nil
		case errA != nil && errA != io.EOF:
			return errA
		case errB != nil && errB != io.EOF:
			return errB
		case errA == io.EOF:
			return fmt.Errorf("record %d is extra: %+v", i, rb)
		case errB == io.EOF:
			return fmt.Errorf("ends before record %d", i)
		case ra != rb:
			return fmt.Errorf("record %d: %+v, want %+v", i, rb, ra)
		}
	}
}
