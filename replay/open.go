package replay

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vramhq/vram/trace/rmm"
	"github.com/vramhq/vram/trace/synth"
	"github.com/vramhq/vram/trace/torchsnap"
)

// Trace is a trace to replay: a file streamed from disk, or records held in
// memory (generated, or converted from a PyTorch snapshot). Measure keeps a
// Compact copy of a file after its first complete pass, for the passes
// that follow.
type Trace struct {
	Name string
	// open streams the file from its start; nil when recs holds the trace.
	open    func() (Source, io.Closer, error)
	recs    []rmm.Record
	compact *Compact
}

// FromRecords returns a Trace over records held in memory.
func FromRecords(name string, recs []rmm.Record) *Trace { return &Trace{Name: name, recs: recs} }

// FromFile returns a Trace that streams the RMM log at path (plain or gzip)
// on each pass until Measure has a compact copy. It does not check that the
// file exists; the first pass does.
func FromFile(name, path string) *Trace {
	return &Trace{Name: name, open: func() (Source, io.Closer, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return rmm.NewReader(f), f, nil
	}}
}

// Records returns a Source over the whole trace, from its first record,
// and a function that closes it. A file is streamed from disk, whole
// records; once Measure holds a compact copy of it, that copy is read
// instead, whose records have Thread and Time zero.
func (t *Trace) Records() (Source, func(), error) {
	src, done, _, err := t.source(false)
	return src, done, err
}

// source returns a Source over the whole trace and a function that closes
// it. With keep set and no compact copy yet, it also returns the Compact
// being filled.
func (t *Trace) source(keep bool) (Source, func(), *Compact, error) {
	switch {
	case t.compact != nil:
		return t.compact.Source(), func() {}, nil, nil
	case t.open == nil:
		return Records(t.recs), func() {}, nil, nil
	}
	src, c, err := t.open()
	if err != nil {
		return nil, nil, nil, err
	}
	closer := func() { c.Close() }
	if !keep {
		return src, closer, nil, nil
	}
	comp := new(Compact)
	return Tee(src, comp), closer, comp, nil
}

// load reads a file's whole trace into its Compact copy, unless it is held
// in memory already (a copy from an earlier pass, or records). Measure calls
// it before the timed pass, so that reading and parsing the file stay
// outside that pass's clock.
func (t *Trace) load() error {
	if t.compact != nil || t.open == nil {
		return nil
	}
	src, c, err := t.open()
	if err != nil {
		return err
	}
	defer c.Close()
	comp := new(Compact)
	for {
		r, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("loading the trace into memory: %w", err)
		}
		comp.Add(r)
	}
	t.compact = comp
	return nil
}

// SynthSyntax documents the synthetic trace specs that Open reads.
const SynthSyntax = "synth:" + synth.SpecSyntax

// Open reads a trace spec: "synth:..." (SynthSyntax), or the path of an RMM
// log (plain or gzip) or of a PyTorch memory snapshot pickle (plain or gzip,
// pickle protocol 2 or later), told apart by their content. A snapshot
// gives one Trace per device with a recorded history. A log is streamed, not
// read here: Open only checks that it can be opened and what it holds.
func Open(spec string) ([]*Trace, error) {
	if rest, ok := strings.CutPrefix(spec, "synth:"); ok {
		gen, err := synth.ParseSpec(rest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec, err)
		}
		return []*Trace{FromRecords(spec, gen())}, nil
	}
	f, err := os.Open(spec)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s: is a directory, not a trace", spec)
	}
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec, err)
		}
		r = bufio.NewReader(zr)
	}
	name := traceName(spec)
	first, err := r.(*bufio.Reader).Peek(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	if len(first) == 1 && first[0] == 0x80 { // pickle PROTO opcode
		return openSnapshot(spec, name, r)
	}
	return []*Trace{FromFile(name, spec)}, nil
}

func openSnapshot(spec, name string, r io.Reader) ([]*Trace, error) {
	snap, err := torchsnap.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec, err)
	}
	var out []*Trace
	withHistory := 0
	for _, tr := range snap.DeviceTraces {
		if len(tr) > 0 {
			withHistory++
		}
	}
	for dev, tr := range snap.DeviceTraces {
		if len(tr) == 0 {
			continue
		}
		recs, _ := torchsnap.ToRecords(tr)
		n := name
		if withHistory > 1 {
			n = fmt.Sprintf("%s@dev%d", name, dev)
		}
		out = append(out, FromRecords(n, recs))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: the snapshot has no allocation history (record it with torch.cuda.memory._record_memory_history)", spec)
	}
	return out, nil
}

// traceName is the file's base name without the extensions of traces.
func traceName(path string) string {
	n := filepath.Base(path)
	n = strings.TrimSuffix(n, ".gz")
	for _, ext := range []string{".csv", ".log", ".pickle", ".pkl"} {
		n = strings.TrimSuffix(n, ext)
	}
	return n
}
