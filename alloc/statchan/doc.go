// Package statchan is the statistics channel of vram's allocator: how a
// process running the allocator (libvram inside PyTorch or CuPy) publishes
// its live figures (allocated, reserved, active, inactive split, the free
// reserve and its largest block, peaks, out-of-memory errors and retries,
// the cap and the settings) so that vram status, top, watch, run and serve
// read them from outside, without attaching to the process.
//
// # The channel
//
// One file per process and device, in shared memory: Dir (VRAM_CHANNEL_DIR,
// default /dev/shm) holds vram-stats.PID.DEVICE, Size bytes, mode 0600, so
// that only its owner and root can read it. docs/channel.md gives the
// layout word by word for tools in other languages; in short, 64
// little-endian 64-bit words: a magic, the version and size, a sequence
// counter, the identity of the writer (PID, process start time in clock
// ticks, device ordinal and UUID, backend), the figures, and three
// NUL-padded strings (backend, library version, settings).
//
// # Writing (Writer)
//
// Create writes the whole file under a temporary name and renames it into
// place, so a reader never sees a half-made file, then keeps it mapped
// (MAP_SHARED). Publish is a seqlock: it makes the sequence counter odd,
// stores every word, and makes it even again, each with an atomic store.
// A Writer has one writer at a time (Publish holds a mutex); it makes no
// system call. libvram publishes from one background goroutine every
// 100 ms (and at once after an out-of-memory error and an empty_cache), so
// the allocation path itself is untouched: no lock, no system call, no
// counter of its own. This costs a reading up to one period old, which
// the file states (the time of the update and the period), against
// counters updated in place on every allocation, which would put stores to
// shared memory (and a second copy of the statistics) on the hot path.
//
// Close marks the file closed and removes it. libvram also removes its
// files at exit from C (an atexit handler that checks it runs in the
// process that created them, not in a forked child), since a Go library
// inside Python sees no exit. A process killed by a signal leaves its
// file: readers recognise it (below) and remove it when they may.
//
// # Reading (Reader, Decode)
//
// Decode checks a byte image and returns its Record, refusing anything
// not made by a Writer of this version: wrong magic, version or size, an
// odd sequence (a torn copy), a PID or device out of range, strings that
// are not NUL-padded UTF-8, an unused word that is not zero, figures that
// contradict each other (allocated above reserved, a peak below its
// current value, a largest free block above the free reserve). It never
// trusts a field it has not checked and never panics (it is fuzzed).
//
// Reader lists Dir, maps each channel file read-only once and keeps the
// mapping: a steady-state read of N files costs one stat of the directory
// plus N seqlock copies (reads of shared memory), and an identity check
// per file at most every Recheck (default 1 s). A copy is retried while
// the sequence is odd or changes under it.
//
// The directory is listed again only when its status (modification time,
// size, inode) changed, which every file created, removed or renamed in
// it does, or when the last listing was taken less than listSettle (100
// ms) after the last change: a file system stamps a directory's changes
// with a coarse clock, so only a listing taken well after the last change
// is sure to be followed by a change with a later time (3 s when the time
// has no fraction of a second, as on file systems that keep whole
// seconds).
//
// A file is used only when:
//   - it is a regular file (not a link), of the declared size, owned by the
//     process's owner (or root) and writable by no one else;
//   - its name, PID and device agree with its contents;
//   - /proc/PID exists and has the start time the file records (a PID reused
//     by another process does not inherit a dead process's figures).
//
// A file that fails the identity check is stale: it is skipped, and
// removed when RemoveStale is set (no tool sets it yet; /dev/shm is sticky,
// so only the owner or root can remove it).
package statchan
