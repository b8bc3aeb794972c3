package api

// The figures of vram's allocator inside a process, in a State and in the
// history. The keys are those of vram status --json: both are
// statchan.JSON.

import "github.com/vramhq/vram/alloc/statchan"

// Allocator is what vram's allocator inside a process (libvram) publishes
// about one GPU through its statistics channel (docs/channel.md), in the
// shape every tool writes (statchan.JSON).
type Allocator = statchan.JSON

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
	e.kvInts([]intKV{
		{`,"allocator":{"allocated_bytes":`, a.AllocatedBytes}, {`,"allocated_peak_bytes":`, a.AllocatedPeak},
		{`,"reserved_bytes":`, a.ReservedBytes}, {`,"reserved_peak_bytes":`, a.ReservedPeak},
		{`,"active_bytes":`, a.ActiveBytes}, {`,"inactive_split_bytes":`, a.InactiveSplitBytes},
		{`,"requested_bytes":`, a.RequestedBytes}, {`,"free_cached_bytes":`, a.FreeCachedBytes},
		{`,"largest_free_block_bytes":`, a.LargestFreeBlock},
	})
	e.kvFloat(`,"fragmentation":`, a.Fragmentation)
	e.kvInts([]intKV{
		{`,"num_ooms":`, a.NumOOMs}, {`,"num_alloc_retries":`, a.NumAllocRetries},
		{`,"cap_bytes":`, a.CapBytes}, {`,"cuda_device":`, int64(a.CUDADevice)},
	})
	e.kvStr(`,"backend":`, a.Backend)
	e.kvStr(`,"config":`, a.Config)
	e.kvStr(`,"version":`, a.Version)
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
