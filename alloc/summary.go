package alloc

// Reports: the summary table and the snapshot. See doc.go for an overview.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Summary renders the statistics in the layout of PyTorch's
// torch.cuda.memory_summary(), followed by a fragmentation line: the
// largest free cached block against the whole free reserve.
func (a *Allocator) Summary() string {
	a.mu.Lock()
	s := a.st.export(a.maxSplit)
	var free, largest uint64
	for p := range a.pools {
		a.pools[p].walk(func(b *block) {
			free += b.size
			largest = max(largest, b.size)
		})
	}
	a.mu.Unlock()
	return formatSummary(s, free, largest)
}

// Summary renders s as Allocator.Summary does, for statistics without an
// allocator at hand (a device that has allocated nothing): the
// fragmentation line then reports no free cached block.
func (s Stats) Summary() string { return formatSummary(s, 0, 0) }

const summaryWidth = 75

func formatSummary(s Stats, free, largest uint64) string {
	var lines []string
	rule := func(c string) { lines = append(lines, strings.Repeat(c, summaryWidth)) }
	center := func(t string) string {
		pad := summaryWidth - len(t)
		return strings.Repeat(" ", pad/2) + t + strings.Repeat(" ", pad-pad/2)
	}
	rule("=")
	lines = append(lines, center("vram caching allocator memory summary"))
	rule("-")
	lines = append(lines, fmt.Sprintf("  %9s CUDA OOMs: %-12d | %6s cudaMalloc retries: %-8d  ", "", s.NumOOMs, "", s.NumAllocRetries))
	rule("=")
	lines = append(lines, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")
	type metric struct {
		set   StatSet
		name  string
		bytes bool
	}
	metrics := []metric{
		{s.AllocatedBytes, "Allocated memory", true},
		{s.ActiveBytes, "Active memory", true},
		{s.RequestedBytes, "Requested memory", true},
		{s.ReservedBytes, "GPU reserved memory", true},
		{s.InactiveSplitBytes, "Non-releasable memory", true},
		{s.Allocation, "Allocations", false},
		{s.Active, "Active allocs", false},
		{s.Segment, "GPU reserved segments", false},
		{s.InactiveSplit, "Non-releasable allocs", false},
	}
	row := func(name string, st, pref Stat, bytes bool) string {
		f := formatCount
		if bytes {
			f = formatSize
		}
		return fmt.Sprintf(" %-21s | %s | %s | %s | %s ", name,
			f(st.Current, pref.Current), f(st.Peak, pref.Peak), f(st.Allocated, pref.Allocated), f(st.Freed, pref.Freed))
	}
	for _, m := range metrics {
		rule("-")
		lines = append(lines, row(m.name, m.set.All, m.set.All, m.bytes))
		lines = append(lines, row("      from large pool", m.set.LargePool, m.set.All, m.bytes))
		lines = append(lines, row("      from small pool", m.set.SmallPool, m.set.All, m.bytes))
	}
	rule("-")
	lines = append(lines, row("Oversize allocations", s.OversizeAllocations, s.OversizeAllocations, false))
	rule("-")
	lines = append(lines, row("Oversize GPU segments", s.OversizeSegments, s.OversizeSegments, false))
	rule("-")
	frag := "none"
	if free > 0 {
		frag = fmt.Sprintf("%.1f%%", 100*float64(free-largest)/float64(free))
	}
	lines = append(lines, fmt.Sprintf(" %-*s", summaryWidth-1,
		fmt.Sprintf("Free reserve %s, largest free block %s, fragmented %s", formatBytes(free), formatBytes(largest), frag)))
	rule("=")
	return "|" + strings.Join(lines, "|\n|") + "|\n"
}

// formatSize is PyTorch's _format_size: the unit goes up while the
// reference value (the row's "all" value) is at least 768 KiB.
func formatSize(n, pref int64) string {
	prefixes := []string{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}
	p := prefixes[0]
	fpref := float64(pref)
	for _, np := range prefixes[1:] {
		if fpref < 768*1024 {
			break
		}
		p = np
		n /= 1024
		fpref /= 1024
	}
	return fmt.Sprintf("%6d %s", n, p)
}

// formatCount is PyTorch's _format_count: K or M from 750 000 on.
func formatCount(n, pref int64) string {
	prefixes := []string{" ", "K", "M"}
	p := prefixes[0]
	fpref := float64(pref)
	for _, np := range prefixes[1:] {
		if fpref < 750*1000 {
			break
		}
		p = np
		n /= 1000
		fpref /= 1000
	}
	return fmt.Sprintf("%7d %s ", n, p)
}

// Snapshot is the allocator's memory layout at one moment. Its JSON keys
// follow PyTorch's torch.cuda.memory._snapshot() segments.
type Snapshot struct {
	Time     time.Time     `json:"time"`
	Segments []SegmentInfo `json:"segments"` // by address
	Stats    Stats         `json:"stats"`
	Config   string        `json:"allocator_settings"`
}

// SegmentInfo is one segment and its blocks.
type SegmentInfo struct {
	Address       uint64 `json:"address"`
	TotalSize     uint64 `json:"total_size"`
	AllocatedSize uint64 `json:"allocated_size"`
	ActiveSize    uint64 `json:"active_size"`
	RequestedSize uint64 `json:"requested_size"`
	Stream        Stream `json:"stream"`
	SegmentType   string `json:"segment_type"` // "small" or "large"
	Preallocated  bool   `json:"preallocated,omitempty"`
	// PageMapped marks an arena of the page-mapped mode: TotalSize is then
	// the bytes of mapped pages, and Blocks leaves out the free ranges
	// that have no page mapped (so the blocks do not tile the arena).
	PageMapped bool        `json:"page_mapped,omitempty"`
	Blocks     []BlockInfo `json:"blocks"` // by address
}

// BlockInfo is one block. State is "active_allocated", "active_pending_free"
// (freed, waiting on other streams) or "inactive" (free, cached).
type BlockInfo struct {
	Address       uint64  `json:"address"`
	Size          uint64  `json:"size"`
	RequestedSize uint64  `json:"requested_size"`
	State         string  `json:"state"`
	Stream        Stream  `json:"stream"`
	Frames        []Frame `json:"frames,omitempty"` // call stack, when recorded
}

// Snapshot copies the current layout.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	snap := Snapshot{Time: time.Now(), Stats: a.st.export(a.maxSplit), Config: a.cfg.String()}
	snap.Segments = make([]SegmentInfo, 0, len(a.segs))
	for _, seg := range a.segs {
		si := SegmentInfo{Address: seg.addr, TotalSize: seg.size, Stream: seg.stream, SegmentType: "large", Preallocated: seg.prealloc}
		if seg.pool == poolSmall {
			si.SegmentType = "small"
		}
		if seg.arena != nil {
			si.PageMapped, si.TotalSize = true, seg.arena.mapped
		}
		for b := seg.head; b != nil; b = b.next {
			if b.unmapped || b.state == stateRetiring {
				continue // address space without memory of its own
			}
			bi := BlockInfo{Address: b.addr, Size: b.size, RequestedSize: b.requested, State: b.state.String(), Stream: b.stream}
			if b.state == stateAllocated {
				si.AllocatedSize += b.size
				bi.Frames = b.stack.frames()
			}
			if b.state != stateFree {
				si.ActiveSize += b.size
				si.RequestedSize += b.requested
			}
			si.Blocks = append(si.Blocks, bi)
		}
		snap.Segments = append(snap.Segments, si)
	}
	return snap
}

// WriteSnapshotJSON writes Snapshot() as indented JSON.
func (a *Allocator) WriteSnapshotJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a.Snapshot()); err != nil {
		return fmt.Errorf("alloc: writing snapshot: %w", err)
	}
	return nil
}
