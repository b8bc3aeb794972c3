package alloc

// Statistics with PyTorch's names and semantics. See doc.go for an overview.

import "time"

// Stat is one statistic: its current value, the highest value since the
// last ResetPeakStats, and the sums of increases (Allocated) and decreases
// (Freed) since the last ResetAccumulatedStats.
type Stat struct {
	Current   int64 `json:"current"`
	Peak      int64 `json:"peak"`
	Allocated int64 `json:"allocated"`
	Freed     int64 `json:"freed"`
}

func (s *Stat) increase(n int64) {
	s.Current += n
	s.Allocated += n
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

func (s *Stat) decrease(n int64) {
	s.Current -= n
	s.Freed += n
}

// StatSet is a statistic for both pools together and for each pool.
type StatSet struct {
	All       Stat `json:"all"`
	SmallPool Stat `json:"small_pool"`
	LargePool Stat `json:"large_pool"`
}

// Stats is a copy of the allocator's statistics. The field comments give
// the key prefix of StatsMap (and of torch.cuda.memory_stats).
type Stats struct {
	Allocation         StatSet `json:"allocation"`           // allocation: live allocations
	Segment            StatSet `json:"segment"`              // segment: device allocations held
	Active             StatSet `json:"active"`               // active: allocated or pending blocks
	InactiveSplit      StatSet `json:"inactive_split"`       // inactive_split: free blocks in split segments
	AllocatedBytes     StatSet `json:"allocated_bytes"`      // allocated_bytes: bytes in allocated blocks
	ReservedBytes      StatSet `json:"reserved_bytes"`       // reserved_bytes: bytes in segments
	ActiveBytes        StatSet `json:"active_bytes"`         // active_bytes
	InactiveSplitBytes StatSet `json:"inactive_split_bytes"` // inactive_split_bytes: non-releasable free bytes
	RequestedBytes     StatSet `json:"requested_bytes"`      // requested_bytes: sizes asked for, before rounding

	NumAllocRetries     int64 `json:"num_alloc_retries"`    // growths retried after releasing the cache
	NumOOMs             int64 `json:"num_ooms"`             // out-of-memory errors returned
	NumDeviceAlloc      int64 `json:"num_device_alloc"`     // Device.Malloc and MemCreate calls that succeeded
	NumDeviceFree       int64 `json:"num_device_free"`      // Device.Free and MemRelease calls that succeeded
	NumMemMap           int64 `json:"num_mem_map"`          // pages mapped (page-mapped mode)
	NumMemUnmap         int64 `json:"num_mem_unmap"`        // pages unmapped (page-mapped mode)
	NumStreamSyncs      int64 `json:"num_stream_syncs"`     // streams waited for before unmapping
	StreamSyncNanos     int64 `json:"stream_sync_ns"`       // time spent in those waits
	DeviceCallNanos     int64 `json:"device_call_ns"`       // time spent in the device's memory calls (waits excluded)
	NumPageReleases     int64 `json:"num_page_releases"`    // batches of idle pages released
	NumSyncAllStreams   int64 `json:"num_sync_all_streams"` // waits for all outstanding events
	OversizeAllocations Stat  `json:"oversize_allocations"` // allocations of max_split_size or more
	OversizeSegments    Stat  `json:"oversize_segments"`    // segments of max_split_size or more
	// MaxSplitSize is max_split_size in bytes, or -1 when unlimited (as
	// PyTorch reports SIZE_MAX).
	MaxSplitSize int64 `json:"max_split_size"`
}

// Indexes of the pool statistics in statsState. The seven that the cached
// path updates come first, so that they share as few cache lines as they
// can; segments and reserved bytes change only with the device calls.
const (
	statAllocation = iota
	statActive
	statInactiveSplit
	statAllocatedBytes
	statActiveBytes
	statInactiveSplitBytes
	statRequestedBytes
	statSegment
	statReservedBytes
	numStatKinds
)

var statNames = [numStatKinds]string{
	"allocation", "active", "inactive_split", "allocated_bytes", "active_bytes",
	"inactive_split_bytes", "requested_bytes", "segment", "reserved_bytes",
}

// runStat is a Stat as the allocator keeps it: the fields written on every
// operation only. An increase updates Current, Allocated and Peak (one
// conditional move, no branch); a decrease updates only Current. Freed is
// derived when read: since the last ResetAccumulatedStats, Current has
// moved from base by Allocated minus Freed, so Freed = Allocated + base -
// Current.
type runStat struct {
	Current   int64
	Peak      int64
	Allocated int64 // sum of increases since the last ResetAccumulatedStats
	base      int64 // Current at the last ResetAccumulatedStats
}

func (s *runStat) increase(n int64) {
	s.Current += n
	s.Allocated += n
	s.Peak = max(s.Peak, s.Current)
}

func (s *runStat) decrease(n int64) { s.Current -= n }

func (s *runStat) stat() Stat {
	return Stat{Current: s.Current, Peak: s.Peak, Allocated: s.Allocated, Freed: s.Allocated + s.base - s.Current}
}

// statsState is the allocator's running statistics, guarded by its mutex.
//
// The pool statistics pool[p][kind] are complete runStats. The "all"
// statistics all[kind] keep only Current and Peak (the peak of the sum is
// not the sum of the peaks); their Allocated and Freed are the sums of the
// pools', computed when read. So an increase writes five words and a
// decrease two, where a Stat for all and one for the pool updated
// separately would write eight and four. The layout is by pool first: an
// allocation or a free in one pool updates seven statistics of that pool
// (224 contiguous bytes) and seven of all (112), some six cache lines,
// where a layout by statistic first ([kind][all, small, large], 96 bytes
// a kind) touched ten or more; after the framework's own work has evicted
// them, each is a miss on the caller's thread.
type statsState struct {
	pool                [2][numStatKinds]runStat // [small, large][kind]
	all                 [numStatKinds]sumStat
	oversizeAllocations Stat
	oversizeSegments    Stat
	numAllocRetries     int64
	numOOMs             int64
	numDeviceAlloc      int64
	numDeviceFree       int64
	numSyncAllStreams   int64
	numMemMap           int64
	numMemUnmap         int64
	numStreamSyncs      int64
	streamSyncNanos     int64
	deviceCallNanos     int64
	numPageTrims        int64
}

// deviceTime adds the time since t0, when a device call began, to the time
// spent in the device's memory calls. Only the paths that call the device
// read the clock; the cached path does not.
func (st *statsState) deviceTime(t0 time.Time) {
	st.deviceCallNanos += time.Since(t0).Nanoseconds()
}

// sumStat is an "all" statistic as the allocator keeps it (statsState).
type sumStat struct {
	Current int64
	Peak    int64
}

func (st *statsState) inc(kind, pool int, n int64) {
	st.pool[pool][kind].increase(n)
	a := &st.all[kind]
	a.Current += n
	a.Peak = max(a.Peak, a.Current)
}

func (st *statsState) dec(kind, pool int, n int64) {
	st.pool[pool][kind].Current -= n
	st.all[kind].Current -= n
}

// allocated records a new allocation of size bytes, req of them requested,
// in pool p: the five statistics of an allocation in one pass.
func (st *statsState) allocated(p int, size, req int64) {
	st.inc(statAllocation, p, 1)
	st.inc(statAllocatedBytes, p, size)
	st.inc(statActive, p, 1)
	st.inc(statActiveBytes, p, size)
	st.inc(statRequestedBytes, p, req)
}

// get returns statistic kind for index i (0 all, 1 small pool, 2 large).
func (st *statsState) get(kind, i int) Stat {
	if i > 0 {
		return st.pool[i-1][kind].stat()
	}
	small, large := st.pool[poolSmall][kind].stat(), st.pool[poolLarge][kind].stat()
	return Stat{Current: st.all[kind].Current, Peak: st.all[kind].Peak,
		Allocated: small.Allocated + large.Allocated, Freed: small.Freed + large.Freed}
}

func (st *statsState) export(maxSplit uint64) Stats {
	set := func(k int) StatSet { return StatSet{st.get(k, 0), st.get(k, 1), st.get(k, 2)} }
	out := Stats{
		Allocation:          set(statAllocation),
		Segment:             set(statSegment),
		Active:              set(statActive),
		InactiveSplit:       set(statInactiveSplit),
		AllocatedBytes:      set(statAllocatedBytes),
		ReservedBytes:       set(statReservedBytes),
		ActiveBytes:         set(statActiveBytes),
		InactiveSplitBytes:  set(statInactiveSplitBytes),
		RequestedBytes:      set(statRequestedBytes),
		NumAllocRetries:     st.numAllocRetries,
		NumOOMs:             st.numOOMs,
		NumDeviceAlloc:      st.numDeviceAlloc,
		NumDeviceFree:       st.numDeviceFree,
		NumSyncAllStreams:   st.numSyncAllStreams,
		NumMemMap:           st.numMemMap,
		NumMemUnmap:         st.numMemUnmap,
		NumStreamSyncs:      st.numStreamSyncs,
		StreamSyncNanos:     st.streamSyncNanos,
		DeviceCallNanos:     st.deviceCallNanos,
		NumPageReleases:     st.numPageTrims,
		OversizeAllocations: st.oversizeAllocations,
		OversizeSegments:    st.oversizeSegments,
		MaxSplitSize:        -1,
	}
	if maxSplit != ^uint64(0) {
		out.MaxSplitSize = int64(maxSplit)
	}
	return out
}

// Stats returns a copy of the statistics.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.export(a.maxSplit)
}

// StatsMap returns the statistics as a flat map with the key strings of
// torch.cuda.memory_stats(), for example "allocated_bytes.all.current" and
// "num_ooms".
func (a *Allocator) StatsMap() map[string]int64 {
	s := a.Stats()
	return s.Map()
}

// Map flattens s with the key strings of torch.cuda.memory_stats().
func (s Stats) Map() map[string]int64 {
	m := make(map[string]int64, numStatKinds*12+16)
	putStat := func(prefix string, st Stat) {
		m[prefix+".current"] = st.Current
		m[prefix+".peak"] = st.Peak
		m[prefix+".allocated"] = st.Allocated
		m[prefix+".freed"] = st.Freed
	}
	var sets [numStatKinds]StatSet
	sets[statAllocation], sets[statSegment], sets[statActive] = s.Allocation, s.Segment, s.Active
	sets[statInactiveSplit], sets[statAllocatedBytes] = s.InactiveSplit, s.AllocatedBytes
	sets[statReservedBytes], sets[statActiveBytes] = s.ReservedBytes, s.ActiveBytes
	sets[statInactiveSplitBytes], sets[statRequestedBytes] = s.InactiveSplitBytes, s.RequestedBytes
	for k, set := range sets {
		putStat(statNames[k]+".all", set.All)
		putStat(statNames[k]+".small_pool", set.SmallPool)
		putStat(statNames[k]+".large_pool", set.LargePool)
	}
	putStat("oversize_allocations", s.OversizeAllocations)
	putStat("oversize_segments", s.OversizeSegments)
	m["num_alloc_retries"] = s.NumAllocRetries
	m["num_ooms"] = s.NumOOMs
	m["num_device_alloc"] = s.NumDeviceAlloc
	m["num_device_free"] = s.NumDeviceFree
	m["num_sync_all_streams"] = s.NumSyncAllStreams
	m["num_mem_map"] = s.NumMemMap
	m["num_mem_unmap"] = s.NumMemUnmap
	m["num_stream_syncs"] = s.NumStreamSyncs
	m["stream_sync_ns"] = s.StreamSyncNanos
	m["device_call_ns"] = s.DeviceCallNanos
	m["num_page_releases"] = s.NumPageReleases
	m["max_split_size"] = s.MaxSplitSize
	return m
}

// ResetPeakStats sets every peak to its current value.
func (a *Allocator) ResetPeakStats() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.st.pool {
		for k := range a.st.pool[p] {
			a.st.pool[p][k].Peak = a.st.pool[p][k].Current
		}
	}
	for k := range a.st.all {
		a.st.all[k].Peak = a.st.all[k].Current
	}
	a.st.oversizeAllocations.Peak = a.st.oversizeAllocations.Current
	a.st.oversizeSegments.Peak = a.st.oversizeSegments.Current
}

// ResetAccumulatedStats zeroes the Allocated and Freed sums and the
// counters (retries, OOMs, device calls, syncs).
func (a *Allocator) ResetAccumulatedStats() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for p := range a.st.pool {
		for k := range a.st.pool[p] {
			a.st.pool[p][k].Allocated, a.st.pool[p][k].base = 0, a.st.pool[p][k].Current
		}
	}
	a.st.oversizeAllocations.Allocated, a.st.oversizeAllocations.Freed = 0, 0
	a.st.oversizeSegments.Allocated, a.st.oversizeSegments.Freed = 0, 0
	a.st.numAllocRetries, a.st.numOOMs = 0, 0
	a.st.numDeviceAlloc, a.st.numDeviceFree, a.st.numSyncAllStreams = 0, 0, 0
	a.st.numMemMap, a.st.numMemUnmap, a.st.numStreamSyncs, a.st.numPageTrims = 0, 0, 0, 0
	a.st.streamSyncNanos, a.st.deviceCallNanos = 0, 0
}
