package statchan

import "time"

// JSON is a Record as vram's tools write it in JSON: vram status and
// watch, vram run and the daemon's API all use this one shape, so that a
// process's allocator figures have the same names everywhere
// (docs/json.md, "object: allocator"). Sizes are bytes; peaks are the
// allocator's own, since its last reset.
type JSON struct {
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
	// outside the largest free block, 0 to 1 (Record.Fragmentation).
	Fragmentation   float64   `json:"fragmentation"`
	NumOOMs         int64     `json:"num_ooms"`
	NumAllocRetries int64     `json:"num_alloc_retries"`
	CapBytes        int64     `json:"cap_bytes"`
	CUDADevice      int       `json:"cuda_device"` // the ordinal inside the process
	Backend         string    `json:"backend"`
	Config          string    `json:"config"`
	Version         string    `json:"version"`
	Updated         time.Time `json:"updated"` // when the allocator published them, UTC
}

// JSONOf returns r's figures; nil for nil.
func JSONOf(r *Record) *JSON {
	if r == nil {
		return nil
	}
	return &JSON{AllocatedBytes: r.Allocated, AllocatedPeak: r.AllocatedPeak, ReservedBytes: r.Reserved, ReservedPeak: r.ReservedPeak,
		ActiveBytes: r.Active, InactiveSplitBytes: r.InactiveSplit, RequestedBytes: r.Requested, FreeCachedBytes: r.FreeCached,
		LargestFreeBlock: r.LargestFree, Fragmentation: r.Fragmentation(), NumOOMs: r.NumOOMs, NumAllocRetries: r.NumAllocRetries,
		CapBytes: r.Cap, CUDADevice: r.Device, Backend: r.Backend, Config: r.Config, Version: r.Version, Updated: r.Updated.UTC()}
}
