package job

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limit caps the memory a job's process tree may hold on each GPU: an
// absolute size or a percentage of the GPU's total memory. The zero Limit
// means no limit.
type Limit struct {
	Bytes   uint64  // absolute, per GPU
	Percent float64 // of each GPU's total, in (0, 100]
}

// ParseLimit reads "8GiB", "8000MB", "512MiB" or "50%".
func ParseLimit(s string) (Limit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Limit{}, errors.New("empty limit: want a size (8GiB) or a percentage of the GPU (50%)")
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 || v > 100 {
			return Limit{}, fmt.Errorf("limit %q: a percentage must be in (0, 100]", s)
		}
		return Limit{Percent: v}, nil
	}
	b, err := ParseBytes(s)
	if err != nil {
		return Limit{}, fmt.Errorf("limit: %w", err)
	}
	if b == 0 {
		return Limit{}, fmt.Errorf("limit %q: must be more than 0 bytes", s)
	}
	return Limit{Bytes: b}, nil
}

// Set reports whether l limits anything.
func (l Limit) Set() bool { return l.Bytes > 0 || l.Percent > 0 }

// On is the limit in bytes on device d.
func (l Limit) On(d Device) uint64 {
	if l.Percent > 0 {
		return uint64(float64(d.Total) * l.Percent / 100)
	}
	return l.Bytes
}

// String prints the limit as it was given.
func (l Limit) String() string {
	switch {
	case l.Percent > 0:
		return strconv.FormatFloat(l.Percent, 'f', -1, 64) + "%"
	case l.Bytes > 0:
		return FormatBytes(l.Bytes)
	}
	return "none"
}

// FormatBytes prints a byte count with a binary unit, like PyTorch's
// memory_summary: "512 B", "1.50 KiB", "20.00 MiB", "12.34 GiB".
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

// ParseBytes reads a byte count: "4096", "512MiB", "1.5GiB", "8GB".
// Binary units (KiB, MiB, GiB, TiB, and the bare K, M, G, T) are powers of
// 1024; KB, MB, GB and TB are powers of 1000.
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
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: not a number", s)
	}
	v := f * mult
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return uint64(v + 0.5), nil
}

var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}
