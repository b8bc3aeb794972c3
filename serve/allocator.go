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

// allocatorOf is r in the API's terms; nil for nil.
func allocatorOf(r *statchan.Record) *api.Allocator { return statchan.JSONOf(r) }

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
