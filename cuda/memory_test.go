package cuda

import (
	"strings"
	"testing"
)

func TestPinnedSet(t *testing.T) {
	var s pinnedSet
	s.add(0x1000, 0x100)
	s.add(0x5000, 0x1000)
	s.add(0x3000, 0x10)
	tests := []struct {
		start, n uintptr
		want     bool
	}{
		{0x1000, 0x100, true},        // whole range
		{0x1000, 0, true},            // empty at start
		{0x1080, 0x80, true},         // tail
		{0x1080, 0x81, false},        // one past the end
		{0x0fff, 2, false},           // starts before
		{0x1100, 1, false},           // just after
		{0x3008, 8, true},            // middle range
		{0x5fff, 1, true},            // last byte of last range
		{0x6000, 1, false},           // after everything
		{0x0, 1, false},              // before everything
		{0x5000, ^uintptr(0), false}, // huge length must not wrap around
	}
	for _, tt := range tests {
		if got := s.contains(tt.start, tt.n); got != tt.want {
			t.Errorf("contains(%#x, %#x) = %v, want %v", tt.start, tt.n, got, tt.want)
		}
	}
	if s.remove(0x1080) {
		t.Error("remove of an address inside a range succeeded")
	}
	if !s.remove(0x3000) || s.remove(0x3000) {
		t.Error("remove(0x3000) should succeed once")
	}
	if s.contains(0x3000, 1) {
		t.Error("removed range still contained")
	}
	if len(s.ranges) != 2 || s.ranges[0].start != 0x1000 || s.ranges[1].start != 0x5000 {
		t.Errorf("ranges after removal = %v", s.ranges)
	}
}

func TestAsyncCopyRefusesGoMemory(t *testing.T) {
	buf := make([]byte, 64)
	err := checkPinned("cuMemcpyHtoDAsync_v2", buf)
	if err == nil || !strings.Contains(err.Error(), "cuMemcpyHtoDAsync_v2") || !strings.Contains(err.Error(), "MemHostAlloc") {
		t.Errorf("checkPinned(Go memory) = %v, want an error naming the call and MemHostAlloc", err)
	}
}

func TestUUIDString(t *testing.T) {
	u := UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	if got, want := u.String(), "GPU-12345678-9abc-def0-0123-456789abcdef"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := (UUID{}).String(), "GPU-00000000-0000-0000-0000-000000000000"; got != want {
		t.Errorf("zero String() = %q, want %q", got, want)
	}
}

func TestCString(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H200\x00junk": "NVIDIA H200",
		"\x00":                "",
		"no terminator":       "no terminator",
	}
	for in, want := range tests {
		if got := cString([]byte(in)); got != want {
			t.Errorf("cString(%q) = %q, want %q", in, got, want)
		}
	}
}
