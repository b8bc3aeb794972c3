package alloc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vramhq/vram/internal/units"
)

// Errors returned by the allocator; test for them with errors.Is.
var (
	// ErrOutOfMemory is wrapped by every *OutOfMemoryError.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrDoubleFree: the pointer lies in memory that is not allocated
	// (already freed, or never the start of an allocation).
	ErrDoubleFree = errors.New("double free: the memory is not allocated")
	// ErrInteriorPointer: the pointer lies inside an allocation but is not
	// its start.
	ErrInteriorPointer = errors.New("pointer is inside an allocation, not at its start")
	// ErrUnknownPointer: the pointer is not in memory this allocator holds.
	ErrUnknownPointer = errors.New("pointer was not allocated by this allocator")
	// ErrFreed: a Buffer (or a view of it) was used after it was freed.
	ErrFreed = errors.New("buffer used after free")
	// ErrClosed: the allocator or scope was closed.
	ErrClosed = errors.New("allocator is closed")
	// ErrOutOfRange: an offset or length passes the end of a buffer.
	ErrOutOfRange = errors.New("out of range")
)

// OutOfMemoryError reports an allocation that could not be served even
// after the allocator released its whole cache and searched again. All
// sizes are in bytes.
type OutOfMemoryError struct {
	Requested           uint64 // size the caller asked for
	Rounded             uint64 // the block size it was rounded to
	SegmentSize         uint64 // what the allocator asked the device for
	Stream              Stream
	DeviceTotal         uint64
	DeviceFree          uint64 // as the device reported it after the failure
	Allocated           uint64 // in live allocations
	Reserved            uint64 // held by the allocator
	ReservedUnallocated uint64 // Reserved - Allocated
	FreeReserve         uint64 // in free cached blocks (all pools and streams)
	LargestFreeBlock    uint64 // largest free cached block
	Cap                 uint64 // most the allocator may reserve
	// PageMapped: the request was for the page-mapped pool, where free
	// physical memory cannot be fragmented (idle pages are remapped).
	PageMapped bool
	Cause      error // why the last growth failed
}

// Unwrap makes errors.Is(err, ErrOutOfMemory) true and exposes the cause.
func (e *OutOfMemoryError) Unwrap() []error { return []error{ErrOutOfMemory, e.Cause} }

// Fragmentation is the share of the free reserve outside its largest
// block, in [0, 1]: 0 when the free reserve is one block (or empty).
func (e *OutOfMemoryError) Fragmentation() float64 {
	if e.FreeReserve == 0 {
		return 0
	}
	return float64(e.FreeReserve-e.LargestFreeBlock) / float64(e.FreeReserve)
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device out of memory: tried to allocate %s", formatBytes(e.Rounded))
	if e.Requested != e.Rounded {
		fmt.Fprintf(&b, " (%s requested)", formatBytes(e.Requested))
	}
	fmt.Fprintf(&b, " on stream %#x. The device has a total capacity of %s of which %s is free. ",
		uint64(e.Stream), formatBytes(e.DeviceTotal), formatBytes(e.DeviceFree))
	if e.Cap < e.DeviceTotal {
		fmt.Fprintf(&b, "%s allowed (cap). ", formatBytes(e.Cap))
	}
	fmt.Fprintf(&b, "Of the memory reserved by this allocator (%s), %s is allocated and %s is reserved but unallocated",
		formatBytes(e.Reserved), formatBytes(e.Allocated), formatBytes(e.ReservedUnallocated))
	if e.FreeReserve > 0 {
		fmt.Fprintf(&b, "; the largest free block is %s, so %.0f%% of the %s free reserve is fragmented",
			formatBytes(e.LargestFreeBlock), 100*e.Fragmentation(), formatBytes(e.FreeReserve))
	}
	b.WriteString(". ")
	if e.Cause != nil {
		fmt.Fprintf(&b, "Last attempt: %v. ", e.Cause)
	}
	if e.PageMapped {
		b.WriteString("Page-mapped mode: physical memory cannot be fragmented here, every cached page that no live block touches was remapped to serve this request before failing; what stays reserved but unallocated lies in pages shared with live blocks or in the small pool. ")
	}
	b.WriteString("Cached segments with no live block were already released. To fix: ")
	var tips []string
	if !e.PageMapped && e.FreeReserve >= e.Rounded && e.LargestFreeBlock < e.Rounded {
		tips = append(tips, "the free reserve is large enough but split between live blocks: set max_split_size_mb in VRAM_ALLOC_CONF (oversize blocks are then kept whole) or roundup_power2_divisions (fewer distinct sizes), or free long-lived allocations made between short-lived ones")
	}
	tips = append(tips, "free allocations you no longer need (LiveBySite lists live memory by call site)",
		"reduce the batch size or the largest tensor")
	if e.Cap < e.DeviceTotal && e.DeviceFree >= e.SegmentSize {
		tips = append(tips, "raise the cap (max_bytes, max_fraction): the device has room")
	} else if e.DeviceFree < e.SegmentSize {
		tips = append(tips, "check other processes on the device (vram status)")
	}
	b.WriteString(strings.Join(tips, "; "))
	b.WriteString(".")
	return b.String()
}

// oomErrorLocked builds the out-of-memory report for a request.
func (a *Allocator) oomErrorLocked(req, size, want uint64, s Stream, cause error) *OutOfMemoryError {
	e := &OutOfMemoryError{
		Requested:   req,
		Rounded:     size,
		SegmentSize: want,
		Stream:      s,
		DeviceTotal: a.total,
		Cap:         a.capBytes,
		PageMapped:  a.pg != nil && poolOf(size) == poolLarge,
		Cause:       cause,
	}
	if free, total, err := a.dev.MemInfo(); err == nil {
		e.DeviceFree, e.DeviceTotal = free, total
	}
	e.Allocated = uint64(a.st.all[statAllocatedBytes].Current)
	e.Reserved = uint64(a.st.all[statReservedBytes].Current)
	e.ReservedUnallocated = e.Reserved - e.Allocated
	for p := range a.pools {
		a.pools[p].walk(func(b *block) {
			e.FreeReserve += b.size
			e.LargestFreeBlock = max(e.LargestFreeBlock, b.size)
		})
	}
	return e
}

// formatBytes prints n like PyTorch's format_size: bytes up to 1 KiB, then
// KiB, MiB or GiB with two decimals (units.Torch).
var formatBytes = units.Torch.Format
