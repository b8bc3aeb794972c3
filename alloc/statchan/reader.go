package statchan

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/proc"
)

// DefaultRecheck is how often a Reader checks again that a file's process
// is the one that wrote it.
const DefaultRecheck = time.Second

// copyTries bounds the attempts at a consistent copy of one file.
const copyTries = 64

// Reader reads every channel file of a directory. It keeps each file
// mapped between reads; Close unmaps them. A Reader is used by one
// goroutine at a time.
type Reader struct {
	Dir      string        // the channel's directory; "" is DefaultDir
	ProcRoot string        // where /proc is mounted; "" is "/proc"
	Recheck  time.Duration // how often a file's process identity is checked; 0 is DefaultRecheck
	// RemoveStale removes the files of processes that are gone (or whose
	// PID now names another process), where the reader may.
	RemoveStale bool
	Now         func() time.Time // the clock; nil is time.Now

	files map[string]*mapping
	gen   uint64
	stat  []byte // scratch for /proc/PID/stat
	// The directory's last listing, and what the directory was then
	// (listing): Read lists it again only when it may have changed.
	names   []string
	listing dirState

	// Skipped counts, over the Reader's life, the files it refused
	// (invalid, hostile, torn beyond copyTries) and Stale those whose
	// process was gone.
	Skipped, Stale int
}

// mapping is one file as the Reader keeps it.
type mapping struct {
	mem     []byte // nil: refused; looked at again after Recheck
	words   *[numWords]uint64
	ino     uint64
	owner   uint32
	checked time.Time // the last identity check (or refusal)
	gen     uint64
	path    string
	strs    stringCache
}

func (r *Reader) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reader) dir() string {
	if r.Dir == "" {
		return DefaultDir
	}
	return r.Dir
}

func (r *Reader) procRoot() string {
	if r.ProcRoot == "" {
		return "/proc"
	}
	return r.ProcRoot
}

func (r *Reader) recheck() time.Duration {
	if r.Recheck <= 0 {
		return DefaultRecheck
	}
	return r.Recheck
}

// Read returns the records of every valid channel file of live processes,
// appended to out[:0], sorted by PID and device. A directory that does not
// exist holds no channel (no error); an error means the directory could
// not be listed.
func (r *Reader) Read(out []Record) ([]Record, error) {
	out = out[:0]
	names, err := r.list()
	if errors.Is(err, fs.ErrNotExist) {
		r.drop(func(*mapping) bool { return true })
		return out, nil
	}
	if err != nil {
		return out, err
	}
	if r.files == nil {
		r.files = map[string]*mapping{}
	}
	r.gen++
	now := r.now()
	for _, name := range names {
		pid, dev, ok := ParseFileName(name)
		if !ok {
			continue
		}
		rec, ok := r.readOne(name, pid, dev, now)
		if ok {
			out = append(out, rec)
		}
	}
	r.drop(func(m *mapping) bool { return m.gen != r.gen })
	sort.Slice(out, func(i, j int) bool {
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].Device < out[j].Device
	})
	return out, nil
}

// dirState is what a directory's status says of its entries: a file
// created, removed or renamed in it changes its modification time (and on
// tmpfs its size); reuse says whether a listing taken with this status
// stays valid while the status stays the same.
type dirState struct {
	dev, ino    uint64
	mtime, size int64
	reuse       bool
}

// listSettle is how long after the directory last changed a listing must
// be taken to be reused: file systems stamp directory changes with a
// coarse clock (tmpfs: one scheduler tick, 1-10 ms), so a change made just
// after a listing can carry the time of a change made just before it. A
// listing taken later than this after the last change is followed by a
// change with a later time.
const listSettle = 100 * time.Millisecond

// listSettleCoarse replaces listSettle for a directory whose modification
// time has no fraction of a second: its file system may keep whole
// seconds (or two, as FAT does), so changes a second apart can carry the
// same time.
const listSettleCoarse = 3 * time.Second

// list returns the names in the channel's directory. It lists the
// directory only when its status changed since the last listing (or when
// that listing was taken too soon after a change to be trusted): one stat
// instead of an open, a read of the entries and a close, at every sample
// of a daemon, on a directory (/dev/shm) that other programs use too.
func (r *Reader) list() ([]string, error) {
	dir := r.dir()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		r.names, r.listing = nil, dirState{}
		if errors.Is(err, unix.ENOENT) {
			return nil, fs.ErrNotExist
		}
		return nil, fmt.Errorf("statistics channel: %w", &fs.PathError{Op: "stat", Path: dir, Err: err})
	}
	now := time.Now() // the file system's clock, not r.Now
	cur := dirState{dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim.Nano(), size: st.Size}
	if last := r.listing; last.reuse && last.dev == cur.dev && last.ino == cur.ino && last.mtime == cur.mtime && last.size == cur.size {
		return r.names, nil
	}
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		r.names, r.listing = nil, dirState{}
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("statistics channel: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		r.names, r.listing = nil, dirState{}
		return nil, fmt.Errorf("statistics channel: list %s: %w", dir, err)
	}
	settle := listSettle
	if cur.mtime%int64(time.Second) == 0 {
		settle = listSettleCoarse
	}
	cur.reuse = now.UnixNano()-cur.mtime >= int64(settle)
	r.names, r.listing = names, cur
	return names, nil
}

// drop unmaps and forgets the files for which f is true.
func (r *Reader) drop(f func(*mapping) bool) {
	for name, m := range r.files {
		if f(m) {
			m.unmap()
			delete(r.files, name)
		}
	}
}

func (m *mapping) unmap() {
	if m.mem != nil {
		unix.Munmap(m.mem)
		m.mem, m.words = nil, nil
	}
}

// Close unmaps every file.
func (r *Reader) Close() error {
	r.drop(func(*mapping) bool { return true })
	return nil
}

func (r *Reader) readOne(name string, pid, dev int, now time.Time) (Record, bool) {
	m := r.files[name]
	if m != nil && m.mem == nil && now.Sub(m.checked) >= r.recheck() {
		delete(r.files, name) // refused a while ago: look again
		m = nil
	}
	if m == nil {
		path := filepath.Join(r.dir(), name)
		var err error
		if m, err = openMapping(path); err != nil {
			m = &mapping{checked: now}
			r.Skipped++
		}
		m.path = path
		r.files[name] = m
	}
	m.gen = r.gen
	if m.mem == nil {
		return Record{}, false
	}
	refuse := func() (Record, bool) {
		m.unmap()
		m.checked = now
		r.Skipped++
		return Record{}, false
	}
	rec, err := m.snapshot()
	switch {
	case errors.Is(err, ErrTorn):
		return Record{}, false // being written without end: next time
	case err != nil:
		return refuse()
	case rec.PID != pid || rec.Device != dev:
		return refuse()
	case rec.Closed:
		return Record{}, false
	}
	if m.checked.IsZero() || now.Sub(m.checked) >= r.recheck() {
		switch r.identify(rec, m.owner) {
		case identityStale:
			r.Stale++
			if r.RemoveStale {
				removeIfSame(m.path, m.ino)
			}
			m.unmap()
			delete(r.files, name)
			return Record{}, false
		case identityHostile:
			return refuse()
		}
		m.checked = now
	}
	rec.Path, rec.Owner = m.path, m.owner
	return rec, true
}

type identity int

const (
	identityOK identity = iota
	identityStale
	identityHostile
)

// identify checks that rec's process is alive, is the one that wrote it
// (start time) and is owned by the file's owner (or the file by root).
func (r *Reader) identify(rec Record, owner uint32) identity {
	st, buf, err := proc.ReadStat(r.procRoot(), rec.PID, r.stat)
	r.stat = buf
	if err != nil {
		if errors.Is(err, proc.ErrNoProcess) {
			return identityStale
		}
		return identityHostile
	}
	if st.StartTicks != rec.StartTicks {
		return identityStale
	}
	var pst unix.Stat_t
	if err := unix.Stat(r.procRoot()+"/"+strconv.Itoa(rec.PID), &pst); err != nil {
		return identityStale
	}
	if owner != 0 && pst.Uid != owner {
		return identityHostile
	}
	return identityOK
}

// removeIfSame removes path when it is still the file with inode ino (a
// new process with the same PID may have replaced it).
func removeIfSame(path string, ino uint64) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil && st.Ino == ino {
		os.Remove(path)
	}
}

// openMapping opens and maps path read-only after checking that it is a
// regular file of Size bytes that no one but its owner may write.
func openMapping(path string) (*mapping, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return nil, invalid("%s is not a regular file", path)
	case st.Size != Size:
		return nil, invalid("%s has %d bytes, want %d", path, st.Size, Size)
	case st.Mode&0o022 != 0:
		return nil, invalid("%s may be written by others (mode %o)", path, st.Mode&0o777)
	}
	mem, err := unix.Mmap(fd, 0, Size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &mapping{mem: mem, words: (*[numWords]uint64)(unsafe.Pointer(&mem[0])), ino: st.Ino, owner: st.Uid}, nil
}

// snapshot copies the file under the seqlock and decodes it. A file cut
// short under the mapping (SIGBUS) is an error, not a crash.
func (m *mapping) snapshot() (rec Record, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			rec, err = Record{}, invalid("the file changed under its mapping: %v", p)
		}
	}()
	var img [numWords]uint64
	for try := 0; try < copyTries; try++ {
		s1 := atomic.LoadUint64(&m.words[wSeq])
		if s1%2 != 0 {
			runtime.Gosched()
			continue
		}
		for i := range img {
			img[i] = atomic.LoadUint64(&m.words[i])
		}
		if atomic.LoadUint64(&m.words[wSeq]) == s1 {
			img[wSeq] = s1
			return decodeWords(&img, &m.strs)
		}
	}
	return Record{}, ErrTorn
}
