package units

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestStyles(t *testing.T) {
	tests := []struct {
		style Style
		in    uint64
		want  string
	}{
		{Precise, 1536, "1.50 KiB"},
		{Compact, 0, "0 MiB"},
		{Compact, 1<<20 - 1, "0 MiB"},
		{Compact, 512 * mib, "512 MiB"},
		{Compact, 1<<30 - 1, "1023 MiB"},
		{Compact, 1 << 30, "1.0 GiB"},
		{Compact, 12*gib + 300*mib, "12.3 GiB"},
		{Compact, 3 << 40, "3072.0 GiB"},
		{Short, 512 * mib, "512M"},
		{Short, 20*gib + 100*mib, "20.1G"},
		{Torch, 0, "0 bytes"},
		{Torch, 1024, "1024 bytes"},
		{Torch, 1025, "1.00 KiB"},
		{Torch, 1 << 20, "1024.00 KiB"},
		{Torch, 20 * mib, "20.00 MiB"},
		{Torch, 1 << 30, "1024.00 MiB"},
		{Torch, 15*gib + gib/4, "15.25 GiB"},
		{Torch, 3 << 40, "3072.00 GiB"},
		{MiB, 0, "0.00 MiB"},
		{MiB, mib / 4, "0.25 MiB"},
		{MiB, 12*mib + mib/2, "12.5 MiB"},
		{MiB, 300 * mib, "300 MiB"},
	}
	for _, tt := range tests {
		if got := tt.style.Format(tt.in); got != tt.want {
			t.Errorf("%v.Format(%d) = %q, want %q", tt.style, tt.in, got, tt.want)
		}
	}
}

func TestStyleSignedAndFloat(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{"signed negative", Precise.FormatSigned(-1536), "-1.50 KiB"},
		{"signed positive", Precise.FormatSigned(1536), "1.50 KiB"},
		{"signed min", Precise.FormatSigned(math.MinInt64), "-8.00 EiB"},
		{"float MiB negative", MiB.FormatFloat(-2.5 * mib), "-2.5 MiB"},
		{"float MiB fraction", MiB.FormatFloat(1000), "0.00 MiB"},
		{"float MiB large", MiB.FormatFloat(-250 * mib), "-250 MiB"},
		{"float rounds", Precise.FormatFloat(1535.6), "1.50 KiB"},
		{"float negative", Compact.FormatFloat(-2 * gib), "-2.0 GiB"},
		{"float tiny negative", Precise.FormatFloat(-0.2), "0 B"},
		{"float huge", Precise.FormatFloat(1e30), "16.00 EiB"},
		{"float minus infinity", Short.FormatFloat(math.Inf(-1)), "-17179869184.0G"},
		{"unknown style", Style(99).String(), "Style(99)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// TestStylesMatchTheFormattersTheyReplaced compares each style with the
// fmt-based formatter it replaced (vram top's gib and gibShort, PyTorch's
// format_size as vram run's fake jobs wrote it, the leak detector's mib) on
// random sizes of every magnitude and on the unit edges.
func TestStylesMatchTheFormattersTheyReplaced(t *testing.T) {
	gibOld := func(b uint64) string {
		if b < 1<<30 {
			return fmt.Sprintf("%d MiB", b>>20)
		}
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	gibShortOld := func(b uint64) string {
		if b < 1<<30 {
			return fmt.Sprintf("%dM", b>>20)
		}
		return fmt.Sprintf("%.1fG", float64(b)/(1<<30))
	}
	torchOld := func(b uint64) string {
		switch {
		case b <= 1024:
			return fmt.Sprintf("%d bytes", b)
		case b <= 1<<20:
			return fmt.Sprintf("%.2f KiB", float64(b)/(1<<10))
		case b <= 1<<30:
			return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
		}
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	mibOld := func(b float64) string {
		switch a := math.Abs(b); {
		case a >= 100*mib:
			return fmt.Sprintf("%.0f MiB", b/mib)
		case a >= mib:
			return fmt.Sprintf("%.1f MiB", b/mib)
		default:
			return fmt.Sprintf("%.2f MiB", b/mib)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []uint64{0, 1, 1023, 1024, 1025, 1<<20 - 1, 1 << 20, 1<<20 + 1, 1<<30 - 1, 1 << 30, 1<<30 + 1, 100 * mib, 100*mib - 1, math.MaxUint64}
	for range 20000 {
		sizes = append(sizes, rng.Uint64()>>rng.IntN(64))
	}
	for _, b := range sizes {
		for _, c := range []struct {
			style    Style
			got, old string
		}{
			{Compact, Compact.Format(b), gibOld(b)},
			{Short, Short.Format(b), gibShortOld(b)},
			{Torch, Torch.Format(b), torchOld(b)},
			{MiB, MiB.FormatFloat(float64(b)), mibOld(float64(b))},
			{MiB, MiB.FormatFloat(-float64(b) / 3), mibOld(-float64(b) / 3)},
		} {
			if c.got != c.old {
				t.Fatalf("%v of %d: %q, the old formatter wrote %q", c.style, b, c.got, c.old)
			}
		}
	}
}

func ExampleStyle_Format() {
	for _, s := range []Style{Precise, Compact, Short, Torch, MiB} {
		fmt.Printf("%-8s %s\n", s, s.Format(12*gib+300*mib))
	}
	// Output:
	// precise  12.29 GiB
	// compact  12.3 GiB
	// short    12.3G
	// torch    12.29 GiB
	// mib      12588 MiB
}
