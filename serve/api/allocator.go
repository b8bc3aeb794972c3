package api

// The figures of vram's allocator inside a process, in a State and in the
// history. The keys are those of vram status --json (cli/monitor's
// AllocatorJSON), so that the daemon and the commands speak one vocabulary;
// TestAllocatorKeysMatchStatus holds them together.

import "time"

// Allocator is what vram's allocator inside a process (libvram) publishes
// about one GPU through its statistics channel (docs/channel.md). Sizes are
// bytes; peaks are the allocator's own (since its last reset).
type Allocator struct {
	AllocatedBytes     int64 `json:"allocated_bytes"`
	AllocatedPeak      int64 `json:"allocated_peak_bytes"`
	ReservedBytes      int64 `json:"reserved_bytes"`
	ReservedPeak       int64 `json:"reserved_peak_bytes"`
	ActiveBytes        int64 `json:"active_bytes"`
	InactiveSplitBytes int64 `json:"inactive_split_bytes"`
	RequestedBytes     int64 `json:"requested_bytes"`
	FreeCachedBytes    int64 `json:"free_cached_bytes"`
	LargestFreeBlock   int64 `json:"largest_free_block_bytes"`
	// Fragmentation is the share of the reserved memory cached free
	// outside the largest free block, 0 to 1.
	Fragmentation   float64 `json:"fragmentation"`
	NumOOMs         int64   `json:"num_ooms"`
	NumAllocRetries int64   `json:"num_alloc_retries"`
	CapBytes        int64   `json:"cap_bytes"`
	Device          int     `json:"device"` // the CUDA ordinal inside the process
	Backend         string  `json:"backend"`
	Config          string  `json:"config"`
	Version         string  `json:"version"`
	// Updated is when the allocator published these figures (RFC 3339).
	Updated time.Time `json:"updated"`
}

// AllocatorFields are the allocator's figures on a Process. AllocatedBytes
// and ReservedBytes are null (nil) for a process not on vram's allocator,
// and Allocator is then absent.
type AllocatorFields struct {
	AllocatedBytes *int64     `json:"allocated_bytes"`
	ReservedBytes  *int64     `json:"reserved_bytes"`
	Allocator      *Allocator `json:"allocator,omitempty"`
}

// SetAllocator sets f from a (nil: the process is not on the allocator).
func (f *AllocatorFields) SetAllocator(a *Allocator) {
	if a == nil {
		*f = AllocatorFields{}
		return
	}
	al, res := a.AllocatedBytes, a.ReservedBytes
	*f = AllocatorFields{AllocatedBytes: &al, ReservedBytes: &res, Allocator: a}
}

// AllocatorRanges are the allocator's figures over one bucket of a
// process's history: what it had allocated and reserved, each {min, max,
// mean} over the samples of the bucket that carried them; null when none
// did (the process was not on vram's allocator then).
type AllocatorRanges struct {
	Allocated *Range `json:"allocated_bytes"`
	Reserved  *Range `json:"reserved_bytes"`
}

// allocatorFields writes f's keys, each after a comma, as encoding/json
// writes them (encode.go).
func (e *encoder) allocatorFields(f *AllocatorFields) {
	e.raw(`,"allocated_bytes":`)
	e.intOrNull(f.AllocatedBytes)
	e.raw(`,"reserved_bytes":`)
	e.intOrNull(f.ReservedBytes)
	a := f.Allocator
	if a == nil {
		return
	}
	e.raw(`,"allocator":{"allocated_bytes":`)
	e.int(a.AllocatedBytes)
	e.raw(`,"allocated_peak_bytes":`)
	e.int(a.AllocatedPeak)
	e.raw(`,"reserved_bytes":`)
	e.int(a.ReservedBytes)
	e.raw(`,"reserved_peak_bytes":`)
	e.int(a.ReservedPeak)
	e.raw(`,"active_bytes":`)
	e.int(a.ActiveBytes)
	e.raw(`,"inactive_split_bytes":`)
	e.int(a.InactiveSplitBytes)
	e.raw(`,"requested_bytes":`)
	e.int(a.RequestedBytes)
	e.raw(`,"free_cached_bytes":`)
	e.int(a.FreeCachedBytes)
	e.raw(`,"largest_free_block_bytes":`)
	e.int(a.LargestFreeBlock)
	e.raw(`,"fragmentation":`)
	e.float(a.Fragmentation)
	e.raw(`,"num_ooms":`)
	e.int(a.NumOOMs)
	e.raw(`,"num_alloc_retries":`)
	e.int(a.NumAllocRetries)
	e.raw(`,"cap_bytes":`)
	e.int(a.CapBytes)
	e.raw(`,"device":`)
	e.int(int64(a.Device))
	e.raw(`,"backend":`)
	e.str(a.Backend)
	e.raw(`,"config":`)
	e.str(a.Config)
	e.raw(`,"version":`)
	e.str(a.Version)
	e.raw(`,"updated":`)
	e.time(a.Updated)
	e.raw("}")
}

func (e *encoder) intOrNull(v *int64) {
	if v == nil {
		e.raw("null")
		return
	}
	e.int(*v)
}
