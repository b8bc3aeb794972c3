package rmm

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var sample = []Record{
	{Thread: 0, Time: 5 * time.Microsecond, Action: Allocate, Pointer: 0x7f7d46800000, Size: 8388608},
	{Thread: 140573312345856, Time: 2*time.Second + 353*time.Microsecond, Action: AllocateFailure, Size: 1 << 40, Stream: 0x7f8a38001020},
	{Thread: 1, Time: 25*time.Hour + 61*time.Second + 1, Action: Free, Pointer: 0x7f7d46800000, Size: 8388608, Stream: 7},
	{Thread: 2, Time: 0, Action: Allocate, Pointer: 0, Size: 0},
}

const sampleText = `Thread,Time,Action,Pointer,Size,Stream
0,00:00:00.000005,allocate,0x7f7d46800000,8388608,0
140573312345856,00:00:02.000353,allocate failure,(nil),1099511627776,140231621742624
1,25:01:01.000000001,free,0x7f7d46800000,8388608,7
2,00:00:00.000000,allocate,0x0,0,0
`

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, r := range sample {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.String() != sampleText {
		t.Errorf("written log:\n%s\nwant:\n%s", buf.String(), sampleText)
	}
	if err := w.Write(Record{Time: -1}); err == nil {
		t.Error("negative time accepted")
	}
	if err := w.Write(Record{Action: 9}); err == nil {
		t.Error("unknown action accepted")
	}
}

func TestWriterEmptyLogHasHeader(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.String() != header+"\n" {
		t.Errorf("empty log = %q", buf.String())
	}
	recs, err := ReadAll(&buf)
	if err != nil || len(recs) != 0 {
		t.Errorf("ReadAll(empty log) = %v, %v", recs, err)
	}
}

func TestRoundTripPlainAndGzip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(sampleText))
	zw.Close()
	for name, in := range map[string][]byte{"plain": []byte(sampleText), "gzip": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			got, err := ReadAll(bytes.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(sample) {
				t.Fatalf("got %d records, want %d", len(got), len(sample))
			}
			for i := range got {
				if got[i] != sample[i] {
					t.Errorf("record %d = %+v, want %+v", i, got[i], sample[i])
				}
			}
		})
	}
}

func TestReaderVariants(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Record
	}{
		{"crlf and blank lines and no final newline",
			"Thread,Time,Action,Pointer,Size,Stream\r\n\r\n0,00:00:01.5,free,0x10,16,0\r\n\n1,00:00:02.000001,allocate,0X20,32,0",
			[]Record{
				{Time: 1500 * time.Millisecond, Action: Free, Pointer: 0x10, Size: 16},
				{Thread: 1, Time: 2*time.Second + time.Microsecond, Action: Allocate, Pointer: 0x20, Size: 32},
			}},
		{"reordered columns, spaces, quotes",
			"\xef\xbb\xbfAction, Size ,Pointer,Stream,Thread,time\n\"allocate failure\", 64 ,(nil),0x0,3,1:00:00\n",
			[]Record{{Thread: 3, Time: time.Hour, Action: AllocateFailure, Size: 64}}},
		{"seconds since the epoch, deallocate, bare hex",
			"Thread,Time,Action,Pointer,Size,Stream\n7,1634567890.123456,deallocate,7f8a40000000,1024,0x7f8a38001020\n",
			[]Record{{Thread: 7, Time: 1634567890*time.Second + 123456*time.Microsecond, Action: Free,
				Pointer: 0x7f8a40000000, Size: 1024, Stream: 0x7f8a38001020}}},
		{"header only", "Thread,Time,Action,Pointer,Size,Stream", nil},
		{"hundreds of hours", "Thread,Time,Action,Pointer,Size,Stream\n0,123:59:59.999999,free,0x1,1,0\n",
			[]Record{{Time: 123*time.Hour + 59*time.Minute + 59*time.Second + 999999*time.Microsecond, Action: Free, Pointer: 1, Size: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadAll(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("record %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	const h = "Thread,Time,Action,Pointer,Size,Stream\n"
	tests := []struct {
		name     string
		in       string
		line     int
		column   string
		contains string
	}{
		{"empty input", "", 1, "", "no header"},
		{"blank input", "\n\n", 2, "", "no header"},
		{"header with too few columns", "Thread,Time,Action\n", 1, "", "header has 3 columns"},
		{"unknown header column", "Thread,Time,Action,Pointer,Bytes,Stream\n", 1, "", `unknown column "Bytes"`},
		{"duplicate header column", "Thread,Time,Action,Pointer,Size,Size\n", 1, "", "appears twice"},
		{"too few columns", h + "0,00:00:00.1,free,0x1,1\n", 2, "", "5 columns, want 6"},
		{"too many columns", h + "0,00:00:00.1,free,0x1,1,0,9\n", 2, "", "7 columns, want 6"},
		{"bad thread", h + "x,00:00:00.1,free,0x1,1,0\n", 2, "Thread", "bad thread"},
		{"bad time", h + "0,00:00,free,0x1,1,0\n", 2, "Time", "bad time"},
		{"minutes out of range", h + "0,00:60:00.0,free,0x1,1,0\n", 2, "Time", "bad time"},
		{"ten fraction digits", h + "0,00:00:00.0123456789,free,0x1,1,0\n", 2, "Time", "bad time"},
		{"overflowing hours", h + "0,99999999999:00:00.0,free,0x1,1,0\n", 2, "Time", "bad time"},
		{"unknown action", h + "0,00:00:00.1,alloc,0x1,1,0\n", 2, "Action", "unknown action"},
		{"bad pointer", h + "0,00:00:00.1,free,0xZZ,1,0\n", 2, "Pointer", "bad pointer"},
		{"pointer too long", h + "0,00:00:00.1,free,0x11112222333344445,1,0\n", 2, "Pointer", "bad pointer"},
		{"empty pointer", h + "0,00:00:00.1,free,,1,0\n", 2, "Pointer", "bad pointer"},
		{"negative size", h + "0,00:00:00.1,free,0x1,-1,0\n", 2, "Size", "bad size"},
		{"size overflow", h + "0,00:00:00.1,free,0x1,18446744073709551616,0\n", 2, "Size", "bad size"},
		{"bad stream", h + "0,00:00:00.1,free,0x1,1,s\n", 2, "Stream", "bad stream"},
		{"error on a later line", h + "0,00:00:00.1,free,0x1,1,0\n\n0,00:00:00.1,free,0x1,1,0,\n", 4, "", "7 columns"},
		{"line too long", h + strings.Repeat("9", maxLine+10) + "\n", 2, "", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAll(strings.NewReader(tt.in))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ParseError", err)
			}
			if pe.Line != tt.line || pe.Column != tt.column || !strings.Contains(pe.Error(), tt.contains) {
				t.Errorf("err = %q (line %d, column %q), want line %d, column %q, containing %q",
					pe, pe.Line, pe.Column, tt.line, tt.column, tt.contains)
			}
		})
	}
}

func TestReaderGoesOnAfterBadLine(t *testing.T) {
	in := "Thread,Time,Action,Pointer,Size,Stream\n0,bad,free,0x1,1,0\n" +
		strings.Repeat("x", maxLine+1) + "\n0,00:00:01.0,free,0x2,2,0\n"
	r := NewReader(strings.NewReader(in))
	for _, wantErr := range []bool{true, true, false} {
		rec, err := r.Next()
		if (err != nil) != wantErr {
			t.Fatalf("line %d: err = %v, want error %v", r.Line(), err, wantErr)
		}
		if !wantErr && rec.Pointer != 2 {
			t.Errorf("record after bad lines = %+v", rec)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("at end: err = %v, want io.EOF", err)
	}
	if r.Line() != 4 {
		t.Errorf("Line = %d, want 4", r.Line())
	}
}

func TestReaderTruncatedGzip(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Repeat("0,00:00:00.1,free,0x1,1,0\n", 1000)))
	zw.Close()
	in := append([]byte(nil), gz.Bytes()[:gz.Len()/2]...)
	_, err := ReadAll(bytes.NewReader(in))
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("truncated gzip: err = %v", err)
	}
	if _, err := ReadAll(bytes.NewReader([]byte{0x1f, 0x8b, 0})); err == nil {
		t.Error("corrupt gzip header accepted")
	}
}

// traces returns the recorded traces shipped with the project, if present.
func traces(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "shared", "traces", "*.csv.gz"))
	files = append(files, mustGlob("testdata/*.csv.gz")...)
	return files
}

func mustGlob(p string) []string { m, _ := filepath.Glob(p); return m }

func TestRealTraces(t *testing.T) {
	files := traces(t)
	if len(files) == 0 {
		t.Fatal("no trace found in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := ReadAll(bytes.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			// Every free matches a live allocation, and times never go back.
			live := map[uint64]uint64{}
			var last time.Duration
			for i, r := range recs {
				if r.Time < last {
					t.Fatalf("record %d: time %v before %v", i, r.Time, last)
				}
				last = r.Time
				switch r.Action {
				case Allocate:
					live[r.Pointer] = r.Size
				case Free:
					if _, ok := live[r.Pointer]; !ok {
						t.Fatalf("record %d: free of %#x, not live", i, r.Pointer)
					}
					delete(live, r.Pointer)
				}
			}
			// Writing it back and reading again gives the same records.
			var buf bytes.Buffer
			w := NewWriter(&buf)
			for _, r := range recs {
				w.Write(r)
			}
			w.Flush()
			again, err := ReadAll(&buf)
			if err != nil || len(again) != len(recs) {
				t.Fatalf("re-read: %d records, %v", len(again), err)
			}
			for i := range recs {
				if again[i] != recs[i] {
					t.Fatalf("record %d re-read as %+v, was %+v", i, again[i], recs[i])
				}
			}
		})
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte(sampleText))
	f.Add([]byte("Thread,Time,Action,Pointer,Size,Stream\n0,1.5,deallocate,ff,1,0x0\n"))
	f.Add([]byte("Stream,Size,Pointer,Action,Time,Thread\n0,1,(nil),allocate failure,99:00:00,1\r\n"))
	f.Add([]byte{0x1f, 0x8b, 8, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		var recs []Record
		for range 10000 {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			var pe *ParseError
			if err != nil && !errors.As(err, &pe) {
				break // an input error ends the log
			}
			if err == nil {
				recs = append(recs, rec)
			}
		}
		var buf bytes.Buffer
		w := NewWriter(&buf)
		for _, rec := range recs {
			if err := w.Write(rec); err != nil {
				t.Fatalf("writing accepted record %+v: %v", rec, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		again, err := ReadAll(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("re-reading %q: %v", buf.Bytes(), err)
		}
		if len(again) != len(recs) {
			t.Fatalf("re-read %d records, wrote %d", len(again), len(recs))
		}
		for i := range recs {
			if again[i] != recs[i] {
				t.Fatalf("record %d: wrote %+v, read %+v", i, recs[i], again[i])
			}
		}
	})
}

// largestTrace returns the largest recorded trace, compressed and not.
func largestTrace(b *testing.B) (gz, plain []byte) {
	files := traces(b)
	if len(files) == 0 {
		b.Skip("no trace")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		p, err := io.ReadAll(zr)
		if err != nil {
			b.Fatal(err)
		}
		if len(p) > len(plain) {
			gz, plain = raw, p
		}
	}
	return gz, plain
}

// BenchmarkReader measures parsing alone, on the decompressed trace.
func BenchmarkReader(b *testing.B) {
	_, plain := largestTrace(b)
	benchRead(b, plain)
}

// BenchmarkReaderGzip measures reading the trace as it is stored, gzip included.
func BenchmarkReaderGzip(b *testing.B) {
	gz, _ := largestTrace(b)
	benchRead(b, gz)
}

func benchRead(b *testing.B, in []byte) {
	b.SetBytes(int64(len(in)))
	var n int
	for b.Loop() {
		r := NewReader(bytes.NewReader(in))
		for {
			if _, err := r.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}
