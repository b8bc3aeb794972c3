package statchan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/proc"
)

// EnvDir names the variable that moves the channel's directory (tests,
// hosts without /dev/shm); "off" turns the channel off in libvram.
const EnvDir = "VRAM_CHANNEL_DIR"

// DefaultDir is where channel files live when EnvDir is unset.
const DefaultDir = "/dev/shm"

// DirFromEnv returns the channel's directory given the value of EnvDir
// ("" when the channel is off).
func DirFromEnv(v string) string {
	switch v {
	case "":
		return DefaultDir
	case "off":
		return ""
	}
	return v
}

// Writer publishes one process's figures for one device.
type Writer struct {
	path  string
	mem   []byte
	words *[numWords]uint64

	mu     sync.Mutex // one update at a time
	header Header
	closed bool
}

// Create makes the channel file of h.PID and h.Device in dir (mode 0600)
// with zero figures, replacing a file of the same name (left by an earlier
// process with the same PID, which can only be dead). The file appears
// complete: it is written under a temporary name and renamed into place.
func Create(dir string, h Header) (*Writer, error) {
	if h.PID <= 0 || h.Device < 0 || h.Device >= maxDeviceSlot {
		return nil, fmt.Errorf("statchan: PID %d, device %d: out of range", h.PID, h.Device)
	}
	name := FileName(h.PID, h.Device)
	path := filepath.Join(dir, name)
	tmp := filepath.Join(dir, "."+name+".tmp")
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("statchan: %w", err)
	}
	defer f.Close()
	fail := func(err error) (*Writer, error) {
		os.Remove(tmp)
		return nil, fmt.Errorf("statchan: %s: %w", tmp, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := f.Truncate(Size); err != nil {
		return fail(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap: %w", err))
	}
	w := &Writer{path: path, mem: mem, words: (*[numWords]uint64)(unsafe.Pointer(&mem[0])), header: h}
	w.store(Figures{MaxSplitSize: -1}, time.Now(), 0)
	if err := os.Rename(tmp, path); err != nil {
		unix.Munmap(mem)
		return fail(err)
	}
	return w, nil
}

// Path is the channel file's path.
func (w *Writer) Path() string { return w.path }

// Publish replaces the figures, stamped with now.
func (w *Writer) Publish(f Figures, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.store(sanitize(f), now, 0)
}

// SetConfig replaces the settings and the page-mapped flag the file shows,
// from the next Publish on.
func (w *Writer) SetConfig(config string, pageMapped bool) {
	w.mu.Lock()
	w.header.Config, w.header.PageMapped = config, pageMapped
	w.mu.Unlock()
}

// store writes every word under the seqlock: the sequence odd, the words,
// the sequence even and advanced by 2.
func (w *Writer) store(f Figures, now time.Time, flags uint64) {
	defer w.guard()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	seq := atomic.LoadUint64(&w.words[wSeq])
	var img [numWords]uint64
	encode(&img, w.header, f, seq+2, now, flags)
	atomic.StoreUint64(&w.words[wSeq], seq+1)
	for i := range img {
		if i != wSeq {
			atomic.StoreUint64(&w.words[i], img[i])
		}
	}
	atomic.StoreUint64(&w.words[wSeq], seq+2)
}

// guard turns a fault on the mapping (the file was cut short by its
// owner or root) into a Writer that publishes nothing more. It is
// deferred by every function that touches the mapping, which sets
// debug.SetPanicOnFault for its own duration.
func (w *Writer) guard() {
	if p := recover(); p != nil {
		w.closed = true
	}
}

func (w *Writer) markClosed() {
	defer w.guard()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	seq := atomic.LoadUint64(&w.words[wSeq])
	atomic.StoreUint64(&w.words[wSeq], seq+1)
	atomic.StoreUint64(&w.words[wFlags], atomic.LoadUint64(&w.words[wFlags])|FlagClosed)
	atomic.StoreUint64(&w.words[wSeq], seq+2)
}

// Close marks the file closed, removes it and unmaps it. Publish does
// nothing afterwards.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.markClosed()
	w.closed = true
	err := os.Remove(w.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return errors.Join(err, unix.Munmap(w.mem))
}

// sanitize makes f consistent as Decode requires, so that figures read
// from the allocator at slightly different moments never make a file
// that readers refuse: negative values become 0, each peak is at least
// its current value, active and then reserved are raised to allocated
// and active, the largest free block and the free reserve are cut to the
// free reserve and reserved.
func sanitize(f Figures) Figures {
	fs := f.fields()
	for i := range fs {
		if i == numFigures-1 {
			if fs[i] < -1 {
				fs[i] = -1
			}
			continue
		}
		fs[i] = min(max(fs[i], 0), maxFigure)
	}
	f.Active = max(f.Active, f.Allocated)
	f.Reserved = max(f.Reserved, f.Active)
	f.FreeCached = min(f.FreeCached, f.Reserved)
	f.LargestFree = min(f.LargestFree, f.FreeCached)
	f.InactiveSplit = min(f.InactiveSplit, f.Reserved)
	f.AllocatedPeak = max(f.AllocatedPeak, f.Allocated)
	f.ReservedPeak = max(f.ReservedPeak, f.Reserved)
	f.ActivePeak = max(f.ActivePeak, f.Active)
	f.InactiveSplitPeak = max(f.InactiveSplitPeak, f.InactiveSplit)
	f.RequestedPeak = max(f.RequestedPeak, f.Requested)
	return f
}

// SelfStartTicks is the calling process's start time in clock ticks after
// boot, from procRoot ("/proc").
func SelfStartTicks(procRoot string) (uint64, error) {
	st, _, err := proc.ReadStat(procRoot, os.Getpid(), nil)
	return st.StartTicks, err
}
