// Package units reads and writes byte counts the way every vram command and
// setting spells them: "4096", "512MiB", "1.5GiB", "8GB".
//
// Binary units (KiB, MiB, GiB, TiB, PiB, EiB and the bare K, M, G, T, P, E)
// are powers of 1024; KB, MB, GB, TB, PB and EB are powers of 1000, as on
// disk labels. Units are
// case-insensitive and may be separated from the number by spaces. Whole
// numbers are exact (no float rounding); fractions are rounded up to a
// whole byte, so "1.5KiB" is 1536 and a cap is never smaller than asked.
package units

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

var multipliers = map[string]uint64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50, "eib": 1 << 60,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50, "e": 1 << 60,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15, "eb": 1e18,
}

// ParseBytes reads a byte count with an optional unit. Errors name the input
// and the problem: no number, unknown unit, not a number, too large.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	mult, ok := multipliers[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, strings.TrimSpace(t[i:]))
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %w", s, numErr(err))
		}
		hi, lo := bits.Mul64(n, mult)
		if hi != 0 {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return lo, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	v := math.Ceil(f * float64(mult))
	if v >= math.MaxUint64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return uint64(v), nil
}

// numErr shortens strconv's errors ("strconv.ParseUint: parsing "x":
// invalid syntax") to their reason.
func numErr(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}

// binaryUnits are FormatBytes's units above bytes, each 1024 times the one
// before; EiB is the last that a uint64 reaches.
var binaryUnits = [...]string{" KiB", " MiB", " GiB", " TiB", " PiB", " EiB"}

// FormatBytes prints a byte count with a binary unit and two decimals, like
// PyTorch's memory_summary: "512 B", "1.50 KiB", "20.00 MiB", "12.34 GiB",
// up to "16.00 EiB" for the largest uint64. Every vram command prints sizes
// with it, so one amount reads the same everywhere.
func FormatBytes(b uint64) string { return string(AppendBytes(nil, b)) }

// AppendBytes appends FormatBytes(v) to b, without allocating when b has
// room: for output written many times a second.
func AppendBytes(b []byte, v uint64) []byte {
	if v < 1024 {
		return append(strconv.AppendUint(b, v, 10), " B"...)
	}
	f, i := float64(v)/1024, 0
	for f >= 1024 && i < len(binaryUnits)-1 {
		f /= 1024
		i++
	}
	for ; ; i++ {
		n := len(b)
		b = strconv.AppendFloat(b, f, 'f', 2, 64)
		// A value just below the next unit rounds up to 1024.00 of this
		// one; it reads better as 1.00 of the next.
		if i == len(binaryUnits)-1 || string(b[n:]) != "1024.00" {
			return append(b, binaryUnits[i]...)
		}
		b = b[:n]
		f /= 1024
	}
}

// Style is a way of writing a byte count. Precise is FormatBytes, the one
// every command prints unless a column is too narrow for it; the others
// are for narrow table columns, for rates and for messages that must read
// as PyTorch's.
type Style uint8

const (
	// Precise is FormatBytes: "512 B", "1.50 KiB", "12.34 GiB".
	Precise Style = iota
	// Compact is for table columns: whole MiB below 1 GiB, GiB with one
	// decimal from there: "0 MiB", "512 MiB", "12.3 GiB" (vram top).
	Compact
	// Short is Compact with one letter and no space: "512M", "12.3G" (vram
	// top's narrow header and its graph's axis).
	Short
	// Torch is PyTorch's format_size, as its out-of-memory message writes
	// sizes: "1024 bytes" up to 1 KiB, then KiB, MiB or GiB with two
	// decimals, each unit up to and including 1024 of it.
	Torch
	// MiB is MiB only, with fewer decimals as the value grows: "0.25 MiB",
	// "12.5 MiB", "300 MiB" (leak slopes and growth, which FormatFloat
	// writes signed).
	MiB
)

// Format writes b in style s.
func (s Style) Format(b uint64) string {
	switch s {
	case Compact, Short:
		unitM, unitG := " MiB", " GiB"
		if s == Short {
			unitM, unitG = "M", "G"
		}
		if b < 1<<30 {
			return strconv.FormatUint(b>>20, 10) + unitM
		}
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + unitG
	case Torch:
		switch {
		case b <= 1<<10:
			return strconv.FormatUint(b, 10) + " bytes"
		case b <= 1<<20:
			return strconv.FormatFloat(float64(b)/(1<<10), 'f', 2, 64) + " KiB"
		case b <= 1<<30:
			return strconv.FormatFloat(float64(b)/(1<<20), 'f', 2, 64) + " MiB"
		}
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) + " GiB"
	case MiB:
		return s.FormatFloat(float64(b))
	}
	return FormatBytes(b)
}

// FormatSigned writes b in style s, with a minus sign when negative.
func (s Style) FormatSigned(b int64) string {
	if b < 0 {
		return "-" + s.Format(uint64(-(b+1))+1) // -MinInt64 overflows; this does not
	}
	return s.Format(uint64(b))
}

// FormatFloat writes b, which may be negative or fractional (a rate in
// bytes per second), in style s: MiB keeps the fraction; the others write
// the nearest whole number of bytes.
func (s Style) FormatFloat(b float64) string {
	if s != MiB {
		a := math.Round(math.Abs(b))
		u := uint64(math.MaxUint64)
		if a < 1<<64 {
			u = uint64(a)
		}
		if b < 0 && u > 0 {
			return "-" + s.Format(u)
		}
		return s.Format(u)
	}
	const mib = 1 << 20
	switch a := math.Abs(b); {
	case a >= 100*mib:
		return strconv.FormatFloat(b/mib, 'f', 0, 64) + " MiB"
	case a >= mib:
		return strconv.FormatFloat(b/mib, 'f', 1, 64) + " MiB"
	default:
		return strconv.FormatFloat(b/mib, 'f', 2, 64) + " MiB"
	}
}

// String names the style.
func (s Style) String() string {
	switch s {
	case Precise:
		return "precise"
	case Compact:
		return "compact"
	case Short:
		return "short"
	case Torch:
		return "torch"
	case MiB:
		return "mib"
	}
	return "Style(" + strconv.Itoa(int(s)) + ")"
}
