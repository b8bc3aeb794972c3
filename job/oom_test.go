package job

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// approx is a figure PyTorch rounded to two decimals of its unit.
func approx(v float64, unit uint64) uint64 { return uint64(v*float64(unit) + 0.5) }

func TestScanMessages(t *testing.T) {
	tests := []struct {
		file      string
		framework string // "" : no OOM
		want      Message
	}{
		{"pytorch_2x.txt", "pytorch", Message{GPU: 0, Tried: 546 * mib, Capacity: approx(15.77, gib), Free: approx(514.19, mib),
			Allocated: approx(13.73, gib), PrivatePools: 46 * mib, Unallocated: approx(736.86, mib),
			Holders: []Holder{{PID: 562167, Bytes: approx(15.25, gib)}}}},
		{"pytorch_2x_fragmented.txt", "pytorch", Message{GPU: 0, Tried: 2 * gib, Capacity: approx(79.25, gib), Free: approx(1.12, gib),
			Allocated: approx(61.50, gib), Unallocated: approx(16.03, gib), Holders: []Holder{{PID: 0, Bytes: approx(78.12, gib)}}}},
		{"pytorch_2x_allowed.txt", "pytorch", Message{GPU: 0, Tried: 20 * mib, Capacity: approx(139.80, gib), Free: approx(97.31, gib),
			Allocated: approx(41.20, gib), Unallocated: 238 * mib, Allowed: approx(41.94, gib), Holders: []Holder{{PID: 0, Bytes: 42 * gib}}}},
		{"pytorch_1x.txt", "pytorch", Message{GPU: 0, Tried: approx(1.71, gib), Capacity: 6 * gib, Free: approx(1.04, gib),
			Allocated: approx(3.49, gib), Unallocated: approx(3.50, gib) - approx(3.49, gib)}},
		{"pytorch_2018.txt", "pytorch", Message{GPU: 0, Tried: approx(12.50, mib), Capacity: approx(11.17, gib), Free: approx(2.06, mib),
			Allocated: approx(10.51, gib), Unallocated: 179 * kib}},
		{"tensorflow.txt", "tensorflow", Message{GPU: -1, Tried: 4 * gib}},
		{"jax.txt", "jax", Message{GPU: -1, Tried: approx(86.89, gib)}},
		{"jax_bytes.txt", "jax", Message{GPU: -1, Tried: 49807360}},
		{"cupy.txt", "cupy", Message{GPU: -1, Tried: 85899345920, Allocated: 1073741824}},
		{"cuda_runtime.txt", "cuda", Message{GPU: -1}},
		{"cuda_driver.txt", "cuda", Message{GPU: -1}},
		{"cuda_error.txt", "cuda", Message{GPU: -1}},
		{"not_oom.txt", "", Message{}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join("testdata", "oom", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			s := NewScanner(time.Now(), nil)
			// Write in odd-sized chunks: lines are split across writes.
			for len(text) > 0 {
				n := min(7, len(text))
				s.Write(text[:n])
				text = text[n:]
			}
			s.Close()
			m, ok := s.Best()
			if tt.framework == "" {
				if ok {
					t.Fatalf("found an OOM in %s: %+v", tt.file, m)
				}
				return
			}
			if !ok {
				t.Fatalf("no OOM found in %s", tt.file)
			}
			if m.Framework != tt.framework {
				t.Errorf("framework %q, want %q", m.Framework, tt.framework)
			}
			m.Text, m.At, m.Framework = "", 0, ""
			if !equalMessage(m, tt.want) {
				t.Errorf("figures\n got %+v\nwant %+v", m, tt.want)
			}
		})
	}
}

func equalMessage(a, b Message) bool {
	if len(a.Holders) != len(b.Holders) {
		return false
	}
	for i := range a.Holders {
		if a.Holders[i] != b.Holders[i] {
			return false
		}
	}
	a.Holders, b.Holders = nil, nil
	return a.Tried == b.Tried && a.GPU == b.GPU && a.Capacity == b.Capacity && a.Free == b.Free &&
		a.Allocated == b.Allocated && a.Unallocated == b.Unallocated && a.PrivatePools == b.PrivatePools && a.Allowed == b.Allowed
}

func TestScannerTailAndLongLines(t *testing.T) {
	s := NewScanner(time.Now(), nil)
	var buf bytes.Buffer
	for i := range 100 {
		buf.WriteString(strings.Repeat("x", i) + "\n")
	}
	buf.WriteString(strings.Repeat("y", MaxLine+10) + " no marker in this long line\n")
	buf.WriteString("last line without newline")
	s.Write(buf.Bytes())
	s.Close()
	tail := s.Tail()
	if len(tail) != tailLines || tail[len(tail)-1] != "last line without newline" {
		t.Fatalf("tail has %d lines, last %q", len(tail), tail[len(tail)-1])
	}
	if len(s.partial) != 0 || cap(s.partial) > MaxLine || cap(s.win) > 2*MaxLine {
		t.Errorf("line buffers %d/%d and %d/%d", len(s.partial), cap(s.partial), len(s.win), cap(s.win))
	}
	if m, ok := s.Best(); ok {
		t.Errorf("matched %q", m.Text[:40])
	}
}

// A marker anywhere in a line longer than MaxLine is found, whatever the
// chunks the line arrives in, with the figures that follow it; memory
// stays bounded.
func TestScannerMarkerInLongLine(t *testing.T) {
	const torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.25 GiB of which 1.12 GiB is free."
	const cupy = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 8,589,934,592 bytes (allocated so far: 8,589,934,592 bytes)."
	pad := func(n int) string {
		return strings.Repeat("\r 37%|███▋      | 370/1000 [00:12<00:21, 29.6it/s]", n/48+1)[:n]
	}
	tests := []struct {
		name      string
		line      string
		framework string
		tried     uint64
	}{
		{"after 100 KiB", pad(100<<10) + torch, "pytorch", 2 * gib},
		{"across MaxLine", pad(MaxLine-10) + torch, "pytorch", 2 * gib},
		{"at the first window's end", pad(2*MaxLine-(maxMarker-1)-5) + torch, "pytorch", 2 * gib},
		{"at the second window's start", pad(2*MaxLine-(maxMarker-1)) + torch, "pytorch", 2 * gib},
		{"mid-line in 1 MiB", pad(600<<10) + torch + pad(500<<10), "pytorch", 2 * gib},
		{"CuPy's full marker", pad(3*MaxLine+1) + cupy + pad(MaxLine), "cupy", 8 << 30},
		{"within the head", pad(100) + torch + pad(200<<10), "pytorch", 2 * gib},
		{"no marker", pad(1 << 20), "", 0},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1 << 30, 32 << 10, 4093, 61} {
			t.Run(fmt.Sprintf("%s/chunks of %d", tt.name, min(chunk, len(tt.line)+1)), func(t *testing.T) {
				s := NewScanner(time.Now(), nil)
				in := []byte("first line\n" + tt.line + "\nlast line\n")
				for len(in) > 0 {
					n := min(chunk, len(in))
					s.Write(in[:n])
					in = in[n:]
					if cap(s.win) > 2*MaxLine || cap(s.partial) > MaxLine {
						t.Fatalf("line buffers grew to %d and %d bytes", cap(s.partial), cap(s.win))
					}
				}
				s.Close()
				msgs := s.Messages()
				if tt.framework == "" {
					if len(msgs) != 0 {
						t.Fatalf("%d messages in a line without a marker", len(msgs))
					}
					return
				}
				if len(msgs) != 1 {
					t.Fatalf("%d messages, want 1", len(msgs))
				}
				m := msgs[0]
				if m.Framework != tt.framework || m.Tried != tt.tried || len(m.Text) > MaxLine {
					t.Errorf("framework %s, tried %d, text of %d bytes; want %s, %d", m.Framework, m.Tried, len(m.Text), tt.framework, tt.tried)
				}
				if tail := s.Tail(); len(tail) != 3 || tail[2] != "last line" {
					t.Errorf("tail %d lines", len(tail))
				}
			})
		}
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want Limit
		err  string
	}{
		{"8GiB", Limit{Bytes: 8 * gib}, ""},
		{"50%", Limit{Percent: 50}, ""},
		{"100%", Limit{Percent: 100}, ""},
		{"0%", Limit{}, "(0, 100]"},
		{"150%", Limit{}, "(0, 100]"},
		{"x%", Limit{}, "(0, 100]"},
		{"0", Limit{}, "more than 0"},
		{"", Limit{}, "empty limit"},
	}
	for _, tt := range tests {
		got, err := ParseLimit(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLimit(%q) = %v, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	d := Device{Total: 80 * gib}
	if got := (Limit{Percent: 50}).On(d); got != 40*gib {
		t.Errorf("50%% of 80 GiB = %d", got)
	}
}

func FuzzMatchLine(f *testing.F) {
	ents, _ := os.ReadDir(filepath.Join("testdata", "oom"))
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("testdata", "oom", e.Name()))
		for _, l := range strings.Split(string(b), "\n") {
			f.Add(l)
		}
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, ok := MatchLine(line)
		if !ok {
			return
		}
		if m.Framework == "" || len(m.Text) > MaxLine {
			t.Fatalf("bad message %+v", m)
		}
	})
}
