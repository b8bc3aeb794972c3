package statchan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// The layout, version 1: Size bytes as 64-bit little-endian words; the
// word index of each field. docs/channel.md is the reference for other
// languages and must change with this table.
const (
	wMagic        = 0  // "VRAMSTAT"
	wVersionSize  = 1  // version (low 32 bits), size in bytes (high 32 bits)
	wSeq          = 2  // sequence: odd while an update is under way
	wPIDDevice    = 3  // PID (low 32 bits), device ordinal (high 32 bits)
	wStartTicks   = 4  // the process's start time, clock ticks after boot (/proc/PID/stat field 22)
	wUUID         = 5  // 16 bytes: words 5 and 6, the device's UUID as CUDA gives it
	wFlags        = 7  // FlagClosed, FlagUUID, FlagPageMapped
	wUpdated      = 8  // time of the last update, Unix nanoseconds
	wInterval     = 9  // the writer's period, nanoseconds
	wFigures      = 10 // first of numFigures int64 words, in the order of Figures
	numFigures    = 21
	wBackend      = 32 // 16 bytes, NUL-padded
	wVersion      = 34 // 32 bytes, NUL-padded
	wConfig       = 38 // 208 bytes, NUL-padded, to the end
	numWords      = 64
	backendBytes  = 16
	versionBytes  = 32
	configBytes   = (numWords - wConfig) * 8
	maxFigure     = 1 << 62 // no count or size of a device reaches it
	maxDeviceSlot = 64      // device ordinals are below this (libvram.MaxDevices)
)

// Magic opens every channel file: "VRAMSTAT" as a little-endian word.
const Magic = 0x5441545353415256

// Version is the layout this package writes and the only one it reads.
const Version = 1

// Size is a channel file's size in bytes.
const Size = numWords * 8

// Flags of the header word.
const (
	FlagClosed     = 1 << 0 // the writer closed the file (its process is exiting)
	FlagUUID       = 1 << 1 // the UUID words hold the device's UUID
	FlagPageMapped = 1 << 2 // the allocator runs in page-mapped mode
)

// Figures are the allocator's statistics at one moment, in bytes unless
// named as a count. The names are PyTorch's (torch.cuda.memory_stats):
// Allocated is allocated_bytes.all.current, Reserved is
// reserved_bytes.all.current, and so on.
type Figures struct {
	Allocated, AllocatedPeak         int64
	Reserved, ReservedPeak           int64
	Active, ActivePeak               int64
	InactiveSplit, InactiveSplitPeak int64 // free bytes in split segments (non-releasable)
	Requested, RequestedPeak         int64 // sizes asked for, before rounding
	// FreeCached is the free reserve: bytes in free cached blocks, all
	// pools and streams; LargestFree is the largest of those blocks.
	FreeCached, LargestFree  int64
	Allocations, Segments    int64 // counts: live allocations, segments held
	NumOOMs, NumAllocRetries int64
	NumDeviceAlloc           int64 // successful device allocations (segments, pages)
	NumDeviceFree            int64
	// Cap is the most the allocator may reserve; DeviceTotal the device's
	// memory as the allocator sees it.
	Cap, DeviceTotal int64
	MaxSplitSize     int64 // max_split_size in bytes, -1 when unlimited
}

// fields lists the figures in their word order.
func (f *Figures) fields() *[numFigures]int64 {
	return (*[numFigures]int64)(figuresPointer(f))
}

// Fragmentation is the share of reserved memory that is cached free but
// outside the largest free block, in [0, 1]: memory that a request as
// large as the largest block cannot use. 0 with nothing reserved. (The
// summary table's line "fragmented" divides the same bytes by the free
// reserve instead.)
func (f Figures) Fragmentation() float64 {
	if f.Reserved <= 0 || f.FreeCached <= f.LargestFree {
		return 0
	}
	return float64(f.FreeCached-f.LargestFree) / float64(f.Reserved)
}

// Header is who wrote a channel file.
type Header struct {
	PID        int
	Device     int    // the device ordinal inside the process (after CUDA_VISIBLE_DEVICES)
	StartTicks uint64 // the process's start time in clock ticks after boot
	// UUID is the device's UUID as CUDA gives it; zero and UUIDKnown
	// false on the simulated device.
	UUID       [16]byte
	UUIDKnown  bool
	PageMapped bool
	Backend    string // "cuda" or "sim"
	Version    string // libvram's version
	Config     string // the settings in force, VRAM_ALLOC_CONF syntax
	// Interval is how often the writer publishes.
	Interval time.Duration
}

// UUIDString formats the UUID as NVML does (GPU-xxxxxxxx-xxxx-...), or ""
// when it is not known.
func (h Header) UUIDString() string {
	if !h.UUIDKnown {
		return ""
	}
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 40)
	out = append(out, "GPU-"...)
	for i, b := range h.UUID {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[b>>4], digits[b&15])
	}
	return string(out)
}

// Record is one decoded channel file.
type Record struct {
	Header
	Figures
	Seq     uint64
	Updated time.Time // when the writer last published
	Closed  bool
	// Path and Owner are the file's, filled in by Reader.
	Path  string
	Owner uint32
}

// Age is how old the figures are at now.
func (r *Record) Age(now time.Time) time.Duration { return now.Sub(r.Updated) }

// FileName is the channel file's name for a process and device.
func FileName(pid, device int) string {
	return "vram-stats." + strconv.Itoa(pid) + "." + strconv.Itoa(device)
}

// ParseFileName returns the PID and device a channel file's name gives,
// and false for any other name (signs, leading zeros and suffixes
// included). It allocates nothing.
func ParseFileName(name string) (pid, device int, ok bool) {
	rest, ok := strings.CutPrefix(name, "vram-stats.")
	if !ok {
		return 0, 0, false
	}
	p, d, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	pid, ok1 := parseDecimal(p, 1<<22)
	device, ok2 := parseDecimal(d, maxDeviceSlot-1)
	if !ok1 || !ok2 || pid == 0 {
		return 0, 0, false
	}
	return pid, device, true
}

// parseDecimal parses s, digits only with no leading zero, up to most.
func parseDecimal(s string, most int) (int, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' || len(s) > 8 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= most
}

// Errors of Decode; every error it returns wraps ErrInvalid.
var (
	ErrInvalid = errors.New("not a valid vram statistics channel")
	// ErrTorn: the image was copied while an update was under way.
	ErrTorn = fmt.Errorf("%w: copied during an update", ErrInvalid)
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// encode writes the header h and figures f with sequence seq into w.
func encode(w *[numWords]uint64, h Header, f Figures, seq uint64, updated time.Time, flags uint64) {
	*w = [numWords]uint64{}
	w[wMagic] = Magic
	w[wVersionSize] = Version | Size<<32
	w[wSeq] = seq
	w[wPIDDevice] = uint64(uint32(h.PID)) | uint64(uint32(h.Device))<<32
	w[wStartTicks] = h.StartTicks
	w[wUUID] = binary.LittleEndian.Uint64(h.UUID[:8])
	w[wUUID+1] = binary.LittleEndian.Uint64(h.UUID[8:])
	if h.UUIDKnown {
		flags |= FlagUUID
	}
	if h.PageMapped {
		flags |= FlagPageMapped
	}
	w[wFlags] = flags
	w[wUpdated] = uint64(updated.UnixNano())
	w[wInterval] = uint64(h.Interval)
	for i, v := range f.fields() {
		w[wFigures+i] = uint64(v)
	}
	putString(w[wBackend:wVersion], h.Backend)
	putString(w[wVersion:wConfig], h.Version)
	putString(w[wConfig:], h.Config)
}

// putString stores s NUL-padded in words, cut at a rune boundary so that
// at least one NUL is left.
func putString(words []uint64, s string) {
	n := len(words)*8 - 1
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	var b [configBytes]byte
	copy(b[:], s)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
}

// getString reads a NUL-padded string from words.
func getString(words []uint64, what string) (string, error) {
	var b [configBytes]byte
	for i, v := range words {
		binary.LittleEndian.PutUint64(b[i*8:], v)
	}
	raw := b[:len(words)*8]
	end := bytes.IndexByte(raw, 0)
	if end < 0 {
		return "", invalid("%s is not NUL-terminated", what)
	}
	if bytes.ContainsFunc(raw[end:], func(r rune) bool { return r != 0 }) {
		return "", invalid("%s has bytes after its end", what)
	}
	s := raw[:end]
	if !utf8.Valid(s) {
		return "", invalid("%s is not UTF-8", what)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return "", invalid("%s holds a control character", what)
		}
	}
	return string(s), nil
}

// Decode checks the image b of a channel file and returns its record. It
// returns an error wrapping ErrInvalid for anything a Writer of this
// version would not have written; ErrTorn when the sequence is odd.
func Decode(b []byte) (Record, error) {
	if len(b) < 16 {
		return Record{}, invalid("%d bytes, too short for a header", len(b))
	}
	var w [numWords]uint64
	if binary.LittleEndian.Uint64(b) != Magic {
		return Record{}, invalid("bad magic")
	}
	vs := binary.LittleEndian.Uint64(b[8:])
	if v := uint32(vs); v != Version {
		return Record{}, invalid("version %d, this vram reads version %d", v, Version)
	}
	if size := vs >> 32; size != Size || len(b) != Size {
		return Record{}, invalid("size %d in the header, %d bytes read, want %d", size, len(b), Size)
	}
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return decodeWords(&w, nil)
}

// stringCache keeps the strings of the last decode of one file: they
// change only when the settings do, so a Reader decodes them once.
type stringCache struct {
	raw                      [numWords - wBackend]uint64
	backend, version, config string
	ok                       bool
}

func decodeWords(w *[numWords]uint64, sc *stringCache) (Record, error) {
	if w[wMagic] != Magic || w[wVersionSize] != Version|Size<<32 {
		return Record{}, invalid("bad magic, version or size")
	}
	var r Record
	r.Seq = w[wSeq]
	if r.Seq%2 != 0 {
		return Record{}, ErrTorn
	}
	pid, dev := uint32(w[wPIDDevice]), uint32(w[wPIDDevice]>>32)
	if pid == 0 || pid > 1<<22 {
		return Record{}, invalid("PID %d out of range", pid)
	}
	if dev >= maxDeviceSlot {
		return Record{}, invalid("device %d out of range", dev)
	}
	r.PID, r.Device = int(pid), int(dev)
	r.StartTicks = w[wStartTicks]
	binary.LittleEndian.PutUint64(r.UUID[:8], w[wUUID])
	binary.LittleEndian.PutUint64(r.UUID[8:], w[wUUID+1])
	flags := w[wFlags]
	if flags&^(FlagClosed|FlagUUID|FlagPageMapped) != 0 {
		return Record{}, invalid("unknown flags %#x", flags)
	}
	r.Closed = flags&FlagClosed != 0
	r.UUIDKnown = flags&FlagUUID != 0
	r.PageMapped = flags&FlagPageMapped != 0
	if !r.UUIDKnown && r.UUID != [16]byte{} {
		return Record{}, invalid("a UUID without its flag")
	}
	if w[wUpdated] > maxFigure || w[wInterval] > uint64(time.Hour) {
		return Record{}, invalid("update time or interval out of range")
	}
	r.Updated = time.Unix(0, int64(w[wUpdated]))
	r.Interval = time.Duration(w[wInterval])
	fs := r.Figures.fields()
	for i := range fs {
		v := int64(w[wFigures+i])
		if (v < 0 && !(i == numFigures-1 && v == -1)) || v > maxFigure {
			return Record{}, invalid("figure %d out of range: %d", i, v)
		}
		fs[i] = v
	}
	if err := r.Figures.check(); err != nil {
		return Record{}, err
	}
	for i := wFigures + numFigures; i < wBackend; i++ { // unused: a Writer leaves them zero
		if w[i] != 0 {
			return Record{}, invalid("unused word %d is %#x, not zero", i, w[i])
		}
	}
	if sc != nil && sc.ok && [numWords - wBackend]uint64(w[wBackend:]) == sc.raw {
		r.Backend, r.Version, r.Config = sc.backend, sc.version, sc.config
		return r, nil
	}
	var err error
	if r.Backend, err = getString(w[wBackend:wVersion], "backend"); err != nil {
		return Record{}, err
	}
	if r.Version, err = getString(w[wVersion:wConfig], "version"); err != nil {
		return Record{}, err
	}
	if r.Config, err = getString(w[wConfig:], "settings"); err != nil {
		return Record{}, err
	}
	if sc != nil {
		*sc = stringCache{raw: [numWords - wBackend]uint64(w[wBackend:]), backend: r.Backend, version: r.Version, config: r.Config, ok: true}
	}
	return r, nil
}

// check refuses figures that contradict each other.
func (f *Figures) check() error {
	pairs := []struct {
		name      string
		cur, peak int64
	}{
		{"allocated", f.Allocated, f.AllocatedPeak}, {"reserved", f.Reserved, f.ReservedPeak},
		{"active", f.Active, f.ActivePeak}, {"inactive split", f.InactiveSplit, f.InactiveSplitPeak},
		{"requested", f.Requested, f.RequestedPeak},
	}
	for _, p := range pairs {
		if p.cur > p.peak {
			return invalid("%s %d above its peak %d", p.name, p.cur, p.peak)
		}
	}
	switch {
	case f.Allocated > f.Active || f.Active > f.Reserved:
		return invalid("allocated %d, active %d, reserved %d: want allocated ≤ active ≤ reserved", f.Allocated, f.Active, f.Reserved)
	case f.LargestFree > f.FreeCached || f.FreeCached > f.Reserved || f.InactiveSplit > f.Reserved:
		return invalid("largest free block %d, free reserve %d, inactive split %d, reserved %d: want largest ≤ free ≤ reserved",
			f.LargestFree, f.FreeCached, f.InactiveSplit, f.Reserved)
	}
	return nil
}

// figuresPointer views f as its words: Figures is numFigures int64 fields
// and nothing else (TestFiguresLayout checks it).
func figuresPointer(f *Figures) unsafe.Pointer { return unsafe.Pointer(f) }
