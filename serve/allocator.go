package serve

// The figures of vram's allocator inside a process (libvram's statistics
// channel, docs/channel.md) in the State, the history and the history
// endpoints. The Prometheus series are serve/metrics'; the alert rules on
// them are serve/alert's.

import (
	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
)

// allocatorOf is r in the API's terms (the keys of vram status --json);
// nil for nil.
func allocatorOf(r *statchan.Record) *api.Allocator {
	if r == nil {
		return nil
	}
	return &api.Allocator{
		AllocatedBytes: r.Allocated, AllocatedPeak: r.AllocatedPeak, ReservedBytes: r.Reserved, ReservedPeak: r.ReservedPeak,
		ActiveBytes: r.Active, InactiveSplitBytes: r.InactiveSplit, RequestedBytes: r.Requested, FreeCachedBytes: r.FreeCached,
		LargestFreeBlock: r.LargestFree, Fragmentation: r.Fragmentation(), NumOOMs: r.NumOOMs, NumAllocRetries: r.NumAllocRetries,
		CapBytes: r.Cap, Device: r.Device, Backend: r.Backend, Config: r.Config, Version: r.Version, Updated: r.Updated.UTC(),
	}
}

// allocatorRanges is a history point's allocator figures in the API's
// terms: null when no sample of the bucket had them.
func allocatorRanges(p store.ProcessPoint) api.AllocatorRanges {
	if p.AllocSamples == 0 {
		return api.AllocatorRanges{}
	}
	a, r := apiRange(p.Allocated), apiRange(p.Reserved)
	return api.AllocatorRanges{Allocated: &a, Reserved: &r}
}

// ownAlloc gives the history interval's record s its own copy of its
// allocator figures (the sample's record is shared with the State), so
// that foldAlloc may raise them.
func ownAlloc(s *sample.Process) {
	if s.Alloc != nil {
		c := *s.Alloc
		s.Alloc = &c
	}
}

// foldAlloc folds the allocator figures of one more sample of a process
// into the history interval's record s (made by ownAlloc), which keeps
// their peaks as it keeps the peak of Bytes.
func foldAlloc(s *sample.Process, r *statchan.Record) {
	switch {
	case r == nil:
	case s.Alloc == nil:
		s.Alloc = r
		ownAlloc(s)
	default:
		s.Alloc.Allocated = max(s.Alloc.Allocated, r.Allocated)
		s.Alloc.Reserved = max(s.Alloc.Reserved, r.Reserved)
	}
}
