package libvram

import (
	"github.com/vramhq/vram/alloc"
)

// The shapes of torch.cuda.memory._snapshot(), as JSON. Only the keys that
// PyTorch's memory_viz and trace/torchsnap read are written.

// TorchSnapshot is torch.cuda.memory._snapshot()'s dict.
type TorchSnapshot struct {
	Segments          []TorchSegment      `json:"segments"`
	DeviceTraces      [][]TorchTraceEntry `json:"device_traces"`
	AllocatorSettings map[string]any      `json:"allocator_settings"`
}

// TorchSegment is one segment of a snapshot.
type TorchSegment struct {
	Device        int          `json:"device"`
	Address       uint64       `json:"address"`
	TotalSize     uint64       `json:"total_size"`
	AllocatedSize uint64       `json:"allocated_size"`
	ActiveSize    uint64       `json:"active_size"`
	RequestedSize uint64       `json:"requested_size"`
	Stream        uint64       `json:"stream"`
	SegmentType   string       `json:"segment_type"`
	SegmentPoolID [2]int       `json:"segment_pool_id"`
	IsExpandable  bool         `json:"is_expandable"`
	Frames        []TorchFrame `json:"frames"`
	Blocks        []TorchBlock `json:"blocks"`
}

// TorchBlock is one block of a segment.
type TorchBlock struct {
	Address       uint64       `json:"address"`
	Size          uint64       `json:"size"`
	RequestedSize uint64       `json:"requested_size"`
	State         string       `json:"state"`
	Frames        []TorchFrame `json:"frames"`
}

// TorchTraceEntry is one event of a device's history.
type TorchTraceEntry struct {
	Action     string       `json:"action"`
	Addr       uint64       `json:"addr"`
	Size       uint64       `json:"size"`
	Stream     uint64       `json:"stream"`
	TimeUS     int64        `json:"time_us"`
	DeviceFree *uint64      `json:"device_free,omitempty"` // oom only
	Frames     []TorchFrame `json:"frames"`
}

// TorchFrame is one frame of a recorded stack.
type TorchFrame struct {
	Filename string `json:"filename"`
	Line     int    `json:"line"`
	Name     string `json:"name"`
}

// TorchSnapshot returns every device's segments and kept history (the
// last trace_events allocations and frees, when that setting is on). A
// free becomes free_requested followed by free_completed at the same time:
// vram's Free returns the block at once, or holds it for other streams
// without a separate event.
func (h *Host) TorchSnapshot() TorchSnapshot {
	out := TorchSnapshot{Segments: []TorchSegment{}, DeviceTraces: [][]TorchTraceEntry{}}
	devs := h.Devices()
	last := -1
	if len(devs) > 0 {
		last = devs[len(devs)-1]
	}
	out.DeviceTraces = make([][]TorchTraceEntry, last+1)
	for d := range out.DeviceTraces {
		out.DeviceTraces[d] = []TorchTraceEntry{}
	}
	var conf alloc.Config
	for _, d := range devs {
		a := h.devs[d].Load()
		snap := a.Snapshot()
		conf = a.Config()
		for _, s := range snap.Segments {
			ts := TorchSegment{
				Device: d, Address: s.Address, TotalSize: s.TotalSize,
				AllocatedSize: s.AllocatedSize, ActiveSize: s.ActiveSize, RequestedSize: s.RequestedSize,
				Stream: uint64(s.Stream), SegmentType: s.SegmentType, IsExpandable: s.PageMapped,
				Frames: []TorchFrame{}, Blocks: make([]TorchBlock, 0, len(s.Blocks)),
			}
			for _, b := range s.Blocks {
				tb := TorchBlock{Address: b.Address, Size: b.Size, RequestedSize: b.RequestedSize, State: b.State, Frames: frames(b.Frames)}
				ts.Blocks = append(ts.Blocks, tb)
			}
			out.Segments = append(out.Segments, ts)
		}
		events, err := a.TraceEvents()
		if err != nil {
			continue // no history kept
		}
		tr := make([]TorchTraceEntry, 0, len(events)+len(events)/2)
		for _, e := range events {
			t := TorchTraceEntry{Addr: e.Ptr, Size: e.Size, Stream: uint64(e.Stream), TimeUS: e.Time.UnixMicro(), Frames: []TorchFrame{}}
			switch e.Action {
			case "alloc":
				t.Action = "alloc"
			case "free":
				t.Action = "free_requested"
				tr = append(tr, t)
				t.Action = "free_completed"
			case "alloc_failure":
				t.Action = "oom"
				var free uint64
				t.DeviceFree = &free
			}
			tr = append(tr, t)
		}
		out.DeviceTraces[d] = tr
	}
	if len(devs) == 0 {
		h.mu.Lock()
		conf = h.conf
		h.mu.Unlock()
	}
	out.AllocatorSettings = settings(conf)
	return out
}

// settings maps vram's settings onto PyTorch's allocator_settings keys,
// with vram's own string under VRAM_ALLOC_CONF.
func settings(c alloc.Config) map[string]any {
	split := int64(-1)
	if c.MaxSplitSize != 0 {
		split = int64(c.MaxSplitSize)
	}
	return map[string]any{
		"PYTORCH_CUDA_ALLOC_CONF":      "",
		"VRAM_ALLOC_CONF":              c.String(),
		"max_split_size":               split,
		"garbage_collection_threshold": c.GarbageCollectionThreshold,
		"expandable_segments":          c.PageMapped,
		"allocator":                    "vram",
	}
}

func frames(fs []alloc.Frame) []TorchFrame {
	out := make([]TorchFrame, 0, len(fs))
	for _, f := range fs {
		out = append(out, TorchFrame{Filename: f.File, Line: f.Line, Name: f.Function})
	}
	return out
}
