// Package torchsnap reads the memory snapshots that PyTorch writes with
// torch.cuda.memory._dump_snapshot (the pickles that pytorch.org/memory_viz
// opens) and turns their allocation history into RMM log records, so that
// a PyTorch job's memory can be replayed and analysed like any other trace.
//
// A snapshot is a pickled dict:
//
//	segments            the allocator's segments at the time of the snapshot,
//	                    each with its blocks (size, requested size, state)
//	device_traces       per device, the recorded history: alloc,
//	                    free_requested, free_completed, segment_alloc,
//	                    segment_free, segment_map, segment_unmap, oom, snapshot
//	allocator_settings  the PYTORCH_CUDA_ALLOC_CONF settings in force
//
// Decode unpickles with github.com/nlpodyssey/gopickle and maps the generic
// values onto typed structs, checking every key it needs: malformed input
// gives an error that names the path of the offending value
// (segments[1].blocks[2].size: want an integer, got string). Keys it does not
// know are ignored, so newer PyTorch versions that add keys still decode. A
// pickle whose top level is the bare list of segments (what
// torch.cuda.memory_snapshot() returns) decodes as a snapshot without history.
//
// Before unpickling, the input is scanned opcode by opcode to check that no
// length prefix claims more bytes than the input has: gopickle allocates a
// claimed length before reading it, and a corrupt file must not make us
// allocate gigabytes. The whole pickle is held in memory, as it is by
// PyTorch; snapshots with long histories can be large (PyTorch's
// documentation expects several KB per trace entry with stacks).
//
// ToRecords converts a device's history to rmm.Records: alloc becomes
// Allocate, free_completed becomes Free (free_requested is when the program
// let go of the block; free_completed is when its stream work finished and
// the memory could be reused), oom becomes AllocateFailure, and the other
// actions describe segments, not the program's requests, and are dropped.
// Times become durations since the first entry.
package torchsnap

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/nlpodyssey/gopickle/pickle"

	"github.com/vramhq/vram/trace/rmm"
)

// Snapshot is a decoded memory snapshot.
type Snapshot struct {
	Segments          []Segment
	DeviceTraces      [][]TraceEntry // indexed by device
	AllocatorSettings AllocatorSettings
}

// Segment is memory the allocator obtained from the device (one cudaMalloc,
// or one contiguous mapped range of an expandable segment).
type Segment struct {
	Device        int
	Address       uint64
	TotalSize     uint64
	AllocatedSize uint64
	ActiveSize    uint64
	RequestedSize uint64
	Stream        uint64
	SegmentType   string // "large" or "small"
	IsExpandable  bool
	Frames        []Frame
	Blocks        []Block
}

// Block states.
const (
	StateActiveAllocated   = "active_allocated"
	StateActivePendingFree = "active_pending_free" // freed, its stream work not yet done
	StateInactive          = "inactive"
)

// Block is a piece of a segment.
type Block struct {
	Address       uint64
	Size          uint64
	RequestedSize uint64
	State         string
	Frames        []Frame
}

// Trace actions.
const (
	ActionAlloc         = "alloc"
	ActionFreeRequested = "free_requested"
	ActionFreeCompleted = "free_completed"
	ActionSegmentAlloc  = "segment_alloc"
	ActionSegmentFree   = "segment_free"
	ActionSegmentMap    = "segment_map"
	ActionSegmentUnmap  = "segment_unmap"
	ActionOOM           = "oom"
	ActionSnapshot      = "snapshot"
)

// TraceEntry is one event of a device's recorded history.
type TraceEntry struct {
	Action     string
	Addr       uint64 // the block or segment; 0 for oom
	Size       uint64
	Stream     uint64
	TimeUS     int64  // microseconds since the Unix epoch
	DeviceFree uint64 // oom only: the free bytes the driver reported
	Frames     []Frame
}

// Frame is one frame of a recorded stack.
type Frame struct {
	Filename string
	Line     int
	Name     string
}

// NoMaxSplitSize is AllocatorSettings.MaxSplitSize when there is no limit.
const NoMaxSplitSize = math.MaxUint64

// AllocatorSettings are the allocator's settings at the time of the snapshot.
type AllocatorSettings struct {
	Conf string // PYTORCH_CUDA_ALLOC_CONF
	// MaxSplitSize is the largest block the allocator splits, in bytes;
	// NoMaxSplitSize when there is no limit (PyTorch's default).
	MaxSplitSize               uint64
	GarbageCollectionThreshold float64
	ExpandableSegments         bool
	// Raw holds every setting as unpickled (strings, ints, floats, bools,
	// maps), including those without a field above.
	Raw map[string]any
}

// maxInput bounds the size of a snapshot Decode reads (16 GiB).
const maxInput = 16 << 30

// Decode reads a snapshot pickle.
func Decode(r io.Reader) (*Snapshot, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("torchsnap: read: %w", err)
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("torchsnap: snapshot larger than %d bytes", int64(maxInput))
	}
	return DecodeBytes(data)
}

// DecodeBytes decodes a snapshot pickle held in memory.
func DecodeBytes(data []byte) (*Snapshot, error) {
	v, err := unpickle(data)
	if err != nil {
		return nil, err
	}
	s, err := fromValue(v)
	if err != nil {
		return nil, fmt.Errorf("torchsnap: %w", err)
	}
	return s, nil
}

// unpickle checks the input's length prefixes and unpickles it; a panic in
// the unpickler becomes an error.
func unpickle(data []byte) (v any, err error) {
	if err := checkPickle(data); err != nil {
		return nil, fmt.Errorf("torchsnap: not a valid pickle: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("torchsnap: not a valid pickle: %v", p)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	v, err = u.Load()
	if err != nil {
		return nil, fmt.Errorf("torchsnap: not a valid pickle: %w", err)
	}
	return v, nil
}

// ConvertStats says what ToRecords left out.
type ConvertStats struct {
	Entries        int // trace entries read
	Records        int // records produced
	Skipped        int // entries of other actions (segments, free_requested, snapshot...)
	UnmatchedFrees int // free_completed of blocks allocated before the history starts
}

// ToRecords converts one device's history into RMM records, in order. A
// free_completed whose alloc is not in the history (recording started
// later, or the ring buffer dropped it) is left out, so that the records
// form a valid trace; ConvertStats counts them.
func ToRecords(entries []TraceEntry) ([]rmm.Record, ConvertStats) {
	st := ConvertStats{Entries: len(entries)}
	recs := make([]rmm.Record, 0, len(entries))
	live := make(map[uint64]bool)
	var t0 int64
	for i, e := range entries {
		if i == 0 {
			t0 = e.TimeUS
		}
		t := time.Duration(max(e.TimeUS-t0, 0)) * time.Microsecond
		rec := rmm.Record{Time: t, Pointer: e.Addr, Size: e.Size, Stream: e.Stream}
		switch e.Action {
		case ActionAlloc:
			rec.Action = rmm.Allocate
			live[e.Addr] = true
		case ActionFreeCompleted:
			if !live[e.Addr] {
				st.UnmatchedFrees++
				continue
			}
			delete(live, e.Addr)
			rec.Action = rmm.Free
		case ActionOOM:
			rec.Action, rec.Pointer = rmm.AllocateFailure, 0
		default:
			st.Skipped++
			continue
		}
		recs = append(recs, rec)
	}
	// Keep the times monotone, as RMM logs are, even where a history's
	// clock readings are not.
	for i := 1; i < len(recs); i++ {
		recs[i].Time = max(recs[i].Time, recs[i-1].Time)
	}
	st.Records = len(recs)
	return recs, st
}

// Records converts the history of device dev; see ToRecords.
func (s *Snapshot) Records(dev int) ([]rmm.Record, ConvertStats, error) {
	if dev < 0 || dev >= len(s.DeviceTraces) {
		return nil, ConvertStats{}, fmt.Errorf("torchsnap: no history for device %d (the snapshot has %d)", dev, len(s.DeviceTraces))
	}
	recs, st := ToRecords(s.DeviceTraces[dev])
	return recs, st, nil
}
