package units

import (
	"math"
	"strings"
	"testing"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  string
	}{
		{"4096", 4096, ""},
		{" 4096 ", 4096, ""},
		{"8GiB", 8 * gib, ""},
		{"8 gib", 8 * gib, ""},
		{"1.5 GiB", 3 * gib / 2, ""},
		{"1.5KiB", 1536, ""},
		{"0.0001KiB", 1, ""}, // rounded up
		{"8GB", 8e9, ""},
		{"512m", 512 * mib, ""},
		{"16EiB", 0, "too large"},
		{"15EiB", 15 << 60, ""},
		{"2 PiB", 2 << 50, ""},
		{"3PB", 3e15, ""},
		{"16 ZiB", 0, "unknown unit"},
		{"18446744073709551615", 18446744073709551615, ""},
		{"18446744073709551616", 0, "out of range"},
		{"", 0, "want a number"},
		{"GiB", 0, "want a number"},
		{"-1GiB", 0, "want a number"},
		{"8 parsecs", 0, "unknown unit"},
		{"1.2.3GiB", 0, "not a number"},
		{"99999999999TiB", 0, "too large"},
		{"1e30", 0, "unknown unit"},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseBytes(%q) = %d, %v; want error %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1536, "1.50 KiB"},
		{20 * mib, "20.00 MiB"},
		{12*gib + 365*mib, "12.36 GiB"},
		{3 << 40, "3.00 TiB"},
		{5 << 50, "5.00 PiB"},
		{8 << 60, "8.00 EiB"},
		{math.MaxUint64, "16.00 EiB"},
		// Just below a unit, the figure that would round to 1024.00 is
		// written in the next unit.
		{1<<20 - 1, "1.00 MiB"},
		{1<<60 - 1, "1.00 EiB"},
		{1023 << 20, "1023.00 MiB"},
	}
	for _, tt := range tests {
		if got := FormatBytes(tt.in); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if got := string(AppendBytes([]byte("x"), tt.in)); got != "x"+tt.want {
			t.Errorf("AppendBytes(x, %d) = %q, want %q", tt.in, got, "x"+tt.want)
		}
	}
}

func TestAppendBytesAllocates(t *testing.T) {
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = AppendBytes(buf[:0], 12345678901) }); n != 0 {
		t.Errorf("AppendBytes allocates %v times per call", n)
	}
}

// FuzzParseBytes checks that no input panics and that every accepted whole
// number of bytes formats and parses back to a value within rounding.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"4096", "8GiB", "1.5 GiB", "8GB", "", "x", "1e3", "99999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if !strings.Contains(err.Error(), "size ") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		if got, err := ParseBytes(FormatBytes(n)); err != nil {
			t.Fatalf("FormatBytes(%d) = %q does not parse: %v", n, FormatBytes(n), err)
		} else if n >= 1024 && (float64(got) < float64(n)*0.99 || float64(got) > float64(n)*1.01) {
			t.Fatalf("%d formats as %q, which parses as %d", n, FormatBytes(n), got)
		}
	})
}
