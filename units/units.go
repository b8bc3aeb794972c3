// Package units reads and writes byte counts the way every vram command and
// setting spells them: "4096", "512MiB", "1.5GiB", "8GB".
//
// Binary units (KiB, MiB, GiB, TiB and the bare K, M, G, T) are powers of
// 1024; KB, MB, GB and TB are powers of 1000, as on disk labels. Units are
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
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
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

// FormatBytes prints a byte count with a binary unit and two decimals, like
// PyTorch's memory_summary: "512 B", "1.50 KiB", "20.00 MiB", "12.34 GiB".
func FormatBytes(b uint64) string {
	const k = 1024
	switch {
	case b < k:
		return strconv.FormatUint(b, 10) + " B"
	case b < k*k:
		return fmt.Sprintf("%.2f KiB", float64(b)/k)
	case b < k*k*k:
		return fmt.Sprintf("%.2f MiB", float64(b)/(k*k))
	case b < k*k*k*k:
		return fmt.Sprintf("%.2f GiB", float64(b)/(k*k*k))
	}
	return fmt.Sprintf("%.2f TiB", float64(b)/(k*k*k*k))
}
