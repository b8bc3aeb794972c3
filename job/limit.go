package job

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vramhq/vram/internal/units"
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
	b, err := units.ParseBytes(s)
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
		return units.FormatBytes(l.Bytes)
	}
	return "none"
}
