package statchan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestFiguresLayout(t *testing.T) {
	if got := unsafe.Sizeof(Figures{}); got != numFigures*8 {
		t.Fatalf("Figures is %d bytes, want %d: fields() would read past it", got, numFigures*8)
	}
	if wFigures+numFigures > wBackend || wConfig*8+configBytes != Size {
		t.Fatalf("the words overlap: figures end at %d, backend starts at %d", wFigures+numFigures, wBackend)
	}
}

func sampleHeader(pid int) Header {
	return Header{PID: pid, Device: 3, StartTicks: 123456, UUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		UUIDKnown: true, Backend: "cuda", Version: "v1.2.3 abcdef", Config: "page_mapped:true,max_bytes:40GiB", Interval: 100 * time.Millisecond}
}

func sampleFigures() Figures {
	return Figures{Allocated: 10 << 20, AllocatedPeak: 20 << 20, Reserved: 40 << 20, ReservedPeak: 50 << 20,
		Active: 12 << 20, ActivePeak: 22 << 20, InactiveSplit: 3 << 20, InactiveSplitPeak: 4 << 20,
		Requested: 9 << 20, RequestedPeak: 19 << 20, FreeCached: 28 << 20, LargestFree: 20 << 20,
		Allocations: 7, Segments: 2, NumOOMs: 1, NumAllocRetries: 2, NumDeviceAlloc: 5, NumDeviceFree: 3,
		Cap: 40 << 30, DeviceTotal: 80 << 30, MaxSplitSize: -1}
}

func image(h Header, f Figures, seq uint64) []byte {
	var w [numWords]uint64
	encode(&w, h, f, seq, time.Unix(1700000000, 5), 0)
	b := make([]byte, Size)
	for i, v := range w {
		binary.LittleEndian.PutUint64(b[i*8:], v)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	h, f := sampleHeader(42), sampleFigures()
	r, err := Decode(image(h, f, 8))
	if err != nil {
		t.Fatal(err)
	}
	if r.Header != h || r.Figures != f || r.Seq != 8 || !r.Updated.Equal(time.Unix(1700000000, 5)) || r.Closed {
		t.Fatalf("round trip:\n got %+v\nwant %+v %+v", r, h, f)
	}
	if got, want := r.UUIDString(), "GPU-01020304-0506-0708-090a-0b0c0d0e0f10"; got != want {
		t.Errorf("UUIDString = %q, want %q", got, want)
	}
	if got, want := f.Fragmentation(), 8.0/40; got != want {
		t.Errorf("Fragmentation = %v, want %v", got, want)
	}
}

func TestLongStringsAreCut(t *testing.T) {
	h := sampleHeader(1)
	h.Config = strings.Repeat("é", 200) // 400 bytes, cut at a rune boundary
	h.Backend = "a-backend-name-longer-than-16"
	r, err := Decode(image(h, sampleFigures(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Config) > configBytes-1 || !strings.HasPrefix(h.Config, r.Config) || len(r.Backend) != backendBytes-1 {
		t.Fatalf("config %d bytes %q, backend %q", len(r.Config), r.Config, r.Backend)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := image(sampleHeader(42), sampleFigures(), 2)
	word := func(i int, v uint64) []byte {
		b := append([]byte(nil), good...)
		binary.LittleEndian.PutUint64(b[i*8:], v)
		return b
	}
	fig := func(mod func(*Figures)) []byte {
		f := sampleFigures()
		mod(&f)
		return image(sampleHeader(42), f, 2)
	}
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", good[:100], "size"},
		{"long", append(append([]byte(nil), good...), 0), "size"},
		{"magic", word(wMagic, 1), "magic"},
		{"version", word(wVersionSize, 2|Size<<32), "version 2"},
		{"size field", word(wVersionSize, Version|1024<<32), "size 1024"},
		{"odd sequence", word(wSeq, 3), "during an update"},
		{"pid 0", word(wPIDDevice, 3<<32), "PID 0"},
		{"device 64", word(wPIDDevice, 42|64<<32), "device 64"},
		{"unknown flag", word(wFlags, FlagUUID|1<<9), "flags"},
		{"uuid without flag", word(wFlags, 0), "UUID without"},
		{"negative figure", word(wFigures, 1<<63), "out of range"},
		{"huge figure", word(wFigures+2, 1<<63-1), "out of range"},
		{"allocated above peak", fig(func(f *Figures) { f.AllocatedPeak = 1 }), "above its peak"},
		{"allocated above reserved", fig(func(f *Figures) {
			f.Allocated, f.AllocatedPeak, f.Active, f.ActivePeak = 41<<20, 41<<20, 41<<20, 41<<20
		}), "allocated ≤ active ≤ reserved"},
		{"largest above free", fig(func(f *Figures) { f.LargestFree = 29 << 20 }), "largest ≤ free"},
		{"unterminated string", func() []byte {
			b := word(wBackend, 0x4141414141414141)
			binary.LittleEndian.PutUint64(b[(wBackend+1)*8:], 0x4141414141414141)
			return b
		}(), "not NUL-terminated"},
		{"bytes after the end", word(wBackend+1, 0x41), "after its end"},
		{"control character", word(wBackend, 0x1b41), "control character"},
		{"bad utf-8", word(wBackend, 0xff41), "not UTF-8"},
		{"interval", word(wInterval, uint64(2*time.Hour)), "interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.b)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode: %v, want an ErrInvalid saying %q", err, tt.want)
			}
		})
	}
}

func TestSanitizeMakesValidFiles(t *testing.T) {
	f := Figures{Allocated: 100, Active: 50, Reserved: 40, FreeCached: 90, LargestFree: 95, InactiveSplit: 60,
		NumOOMs: -3, MaxSplitSize: -7, AllocatedPeak: 10}
	s := sanitize(f)
	if err := s.check(); err != nil {
		t.Fatalf("sanitized figures refused: %v (%+v)", err, s)
	}
	if s.NumOOMs != 0 || s.MaxSplitSize != -1 || s.Reserved != 100 || s.Allocated != 100 || s.Active != 100 || s.LargestFree != 90 {
		t.Fatalf("sanitize = %+v", s)
	}
}

func TestFileName(t *testing.T) {
	tests := []struct {
		name     string
		pid, dev int
		ok       bool
	}{
		{"vram-stats.42.0", 42, 0, true},
		{"vram-stats.1.63", 1, 63, true},
		{"vram-stats.1.64", 0, 0, false},
		{"vram-stats.042.0", 0, 0, false},
		{"vram-stats.+42.0", 0, 0, false},
		{"vram-stats.0.0", 0, 0, false},
		{"vram-stats.42", 0, 0, false},
		{".vram-stats.42.0.tmp", 0, 0, false},
		{"vram-stats.42.0.tmp", 0, 0, false},
		{"other", 0, 0, false},
	}
	for _, tt := range tests {
		pid, dev, ok := ParseFileName(tt.name)
		if pid != tt.pid || dev != tt.dev || ok != tt.ok {
			t.Errorf("ParseFileName(%q) = %d, %d, %v; want %d, %d, %v", tt.name, pid, dev, ok, tt.pid, tt.dev, tt.ok)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes back to
// the same image.
func FuzzDecode(f *testing.F) {
	f.Add(image(sampleHeader(42), sampleFigures(), 2))
	f.Add(image(Header{PID: 1}, Figures{MaxSplitSize: -1}, 0))
	f.Add([]byte("VRAMSTAT"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var flags uint64
		if r.Closed {
			flags = FlagClosed
		}
		var w [numWords]uint64
		encode(&w, r.Header, r.Figures, r.Seq, r.Updated, flags)
		for i, v := range w {
			if got := binary.LittleEndian.Uint64(b[i*8:]); got != v && i != wInterval && i != wUpdated {
				t.Fatalf("word %d: image %#x, re-encoded %#x", i, got, v)
			}
		}
	})
}

// fakeProc writes ProcRoot/PID/stat with the given start time.
func fakeProc(t testing.TB, root string, pid int, start uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (python3) S 1 %d %d 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, pid, pid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWriterReader(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	w, err := Create(dir, sampleHeader(42))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(w.Path())
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != Size {
		t.Fatalf("file %v: mode %v size %d, want 0600 and %d", err, st.Mode(), st.Size(), Size)
	}
	now := time.Unix(1700000000, 0)
	r := &Reader{Dir: dir, ProcRoot: root, Now: func() time.Time { return now }}
	defer r.Close()
	recs, err := r.Read(nil)
	if err != nil || len(recs) != 1 || recs[0].Allocated != 0 || recs[0].MaxSplitSize != -1 {
		t.Fatalf("fresh file: %v %+v", err, recs)
	}
	w.Publish(sampleFigures(), now)
	recs, err = r.Read(recs)
	if err != nil || len(recs) != 1 {
		t.Fatalf("after Publish: %v %+v", err, recs)
	}
	if got := recs[0]; got.Figures != sampleFigures() || got.Header != sampleHeader(42) || !got.Updated.Equal(now) || got.Path != w.Path() {
		t.Fatalf("read %+v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path()); !os.IsNotExist(err) {
		t.Fatalf("Close left the file: %v", err)
	}
	w.Publish(sampleFigures(), now) // after Close: nothing
	if recs, _ = r.Read(recs); len(recs) != 0 {
		t.Fatalf("after Close: %+v", recs)
	}
}

func TestReaderStale(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	fakeProc(t, root, 43, 999) // PID 43 is another process now
	for _, pid := range []int{42, 43, 44} {
		if _, err := Create(dir, sampleHeader(pid)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1700000000, 0)
	r := &Reader{Dir: dir, ProcRoot: root, RemoveStale: true, Now: func() time.Time { return now }}
	defer r.Close()
	recs, err := r.Read(nil)
	if err != nil || len(recs) != 1 || recs[0].PID != 42 || r.Stale != 2 {
		t.Fatalf("read %v %+v, stale %d", err, recs, r.Stale)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != FileName(42, 3) {
		t.Fatalf("left %v, want only the live process's file", left)
	}
	// The process exits without closing: seen at the next identity check.
	os.RemoveAll(filepath.Join(root, "42"))
	if recs, _ = r.Read(recs); len(recs) != 1 {
		t.Fatalf("before Recheck: %+v", recs)
	}
	now = now.Add(DefaultRecheck)
	if recs, _ = r.Read(recs); len(recs) != 0 {
		t.Fatalf("after Recheck: %+v", recs)
	}
}

func TestReaderHostileFiles(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	good := image(sampleHeader(42), sampleFigures(), 2)
	write := func(name string, b []byte, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	write(FileName(42, 0), good[:100], 0o600)                                  // short
	write(FileName(42, 1), append(good, make([]byte, 4096)...), 0o600)         // long
	write(FileName(42, 2), good, 0o666)                                        // writable by anyone
	write(FileName(42, 4), good, 0o600)                                        // device 3 inside
	write(FileName(42, 5), make([]byte, Size), 0o600)                          // zeros
	write(FileName(42, 6), image(sampleHeader(42), sampleFigures(), 3), 0o600) // torn forever
	os.Symlink(filepath.Join(dir, FileName(42, 3)), filepath.Join(dir, FileName(42, 7)))
	write(FileName(42, 3), good, 0o600) // the one valid file
	os.Mkdir(filepath.Join(dir, FileName(42, 8)), 0o700)
	r := &Reader{Dir: dir, ProcRoot: root}
	defer r.Close()
	recs, err := r.Read(nil)
	if err != nil || len(recs) != 1 || recs[0].Device != 3 {
		t.Fatalf("read %v %+v", err, recs)
	}
	if r.Skipped != 7 { // 0, 1, 2, 4, 5, 7 (link), 8 (directory); 6 is torn, not refused
		t.Errorf("skipped %d files, want 7", r.Skipped)
	}
	// Refused files are not opened again until Recheck.
	skipped := r.Skipped
	r.Read(recs)
	if r.Skipped != skipped {
		t.Fatalf("refused files were opened again: skipped %d then %d", skipped, r.Skipped)
	}
}

// TestReaderFileCutShort: a file truncated under the reader's mapping
// (SIGBUS on access) is refused, not a crash.
func TestReaderFileCutShort(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	w, err := Create(dir, sampleHeader(42))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := &Reader{Dir: dir, ProcRoot: root}
	defer r.Close()
	if recs, _ := r.Read(nil); len(recs) != 1 {
		t.Fatalf("read %+v", recs)
	}
	if err := os.Truncate(w.Path(), 0); err != nil {
		t.Fatal(err)
	}
	if recs, _ := r.Read(nil); len(recs) != 0 {
		t.Fatalf("after truncation: %+v", recs)
	}
}

// TestNoTornReads: a reader never sees a mix of two updates. Every update
// sets all figures to one value, so a torn copy would show two.
func TestNoTornReads(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	w, err := Create(dir, sampleHeader(42))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Publish(Figures{}, time.Unix(0, 0))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := int64(1); ; k++ { // MaxSplitSize is -1 or more
			select {
			case <-stop:
				return
			default:
			}
			w.Publish(Figures{Allocated: k, AllocatedPeak: k, Reserved: k, ReservedPeak: k, Active: k, ActivePeak: k,
				FreeCached: k, LargestFree: k, Cap: k, DeviceTotal: k, NumOOMs: k, MaxSplitSize: k}, time.Unix(0, k))
		}
	}()
	r := &Reader{Dir: dir, ProcRoot: root}
	defer r.Close()
	var recs []Record
	seen := 0
	for i := 0; i < 5000; i++ {
		recs, _ = r.Read(recs)
		for _, rec := range recs {
			k := rec.Allocated
			if rec.Reserved != k || rec.Cap != k || rec.NumOOMs != k || rec.MaxSplitSize != k || rec.Updated.UnixNano() != k {
				t.Fatalf("torn read: %+v", rec.Figures)
			}
			seen++
		}
	}
	close(stop)
	wg.Wait()
	if seen < 1000 {
		t.Fatalf("only %d of 5000 reads succeeded", seen)
	}
}

// TestReaderListsOnlyWhenTheDirectoryChanged: Read reuses its listing
// while the directory's status is the same and was old enough when
// listed, and lists again as soon as a file comes or goes.
func TestReaderListsOnlyWhenTheDirectoryChanged(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	fakeProc(t, root, 43, 123456)
	if _, err := Create(dir, sampleHeader(42)); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	r := &Reader{Dir: dir, ProcRoot: root, Now: func() time.Time { return now }}
	defer r.Close()

	// Just changed: listed, and listed again next time.
	if recs, err := r.Read(nil); err != nil || len(recs) != 1 || r.listing.reuse {
		t.Fatalf("fresh directory: %v %d records, reuse %v", err, len(recs), r.listing.reuse)
	}
	// Unchanged for an hour: the listing stands. (Emptied by hand here,
	// to see that Read does not list the directory again.)
	old := time.Now().Add(-time.Hour).Truncate(time.Second).Add(time.Millisecond)
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	if recs, err := r.Read(nil); err != nil || len(recs) != 1 || !r.listing.reuse {
		t.Fatalf("settled directory: %v %d records, reuse %v", err, len(recs), r.listing.reuse)
	}
	r.names = nil
	if recs, _ := r.Read(nil); len(recs) != 0 {
		t.Fatalf("an unchanged directory was listed again: %d records", len(recs))
	}
	// A new file changes the directory: seen at once.
	w, err := Create(dir, sampleHeader(43))
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := r.Read(nil); err != nil || len(recs) != 2 {
		t.Fatalf("after a new file: %v %+v", err, recs)
	}
	// And so does its removal, even within the same tick of the file
	// system's clock.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if recs, err := r.Read(nil); err != nil || len(recs) != 1 || recs[0].PID != 42 {
		t.Fatalf("after a removal: %v %+v", err, recs)
	}
	// The directory goes: no channel, no error; it comes back: listed.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if recs, err := r.Read(nil); err != nil || len(recs) != 0 {
		t.Fatalf("without the directory: %v %+v", err, recs)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir, sampleHeader(42)); err != nil {
		t.Fatal(err)
	}
	if recs, err := r.Read(nil); err != nil || len(recs) != 1 {
		t.Fatalf("directory made again: %v %+v", err, recs)
	}
}

// TestReaderCoarseDirectoryTimes: a directory time of whole seconds (a
// file system that keeps no fraction) is trusted only seconds later.
func TestReaderCoarseDirectoryTimes(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	fakeProc(t, root, 42, 123456)
	if _, err := Create(dir, sampleHeader(42)); err != nil {
		t.Fatal(err)
	}
	r := &Reader{Dir: dir, ProcRoot: root}
	defer r.Close()
	for _, tc := range []struct {
		ago   time.Duration
		reuse bool
	}{{time.Second, false}, {time.Hour, true}} {
		at := time.Now().Add(-tc.ago).Truncate(time.Second)
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		if recs, err := r.Read(nil); err != nil || len(recs) != 1 || r.listing.reuse != tc.reuse {
			t.Errorf("whole-second time %v ago: %v %d records, reuse %v, want %v", tc.ago, err, len(recs), r.listing.reuse, tc.reuse)
		}
	}
}
