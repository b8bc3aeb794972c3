package torchsnap

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/vramhq/vram/trace/rmm"
)

// torchFigures are what scripts/gpu/snapshot.py computed with PyTorch from
// the pickle torch.cuda.memory._dump_snapshot wrote (testdata/real/*.json).
type torchFigures struct {
	Torch              string         `json:"torch"`
	TraceEntries       int            `json:"trace_entries"`
	Actions            map[string]int `json:"actions"`
	Segments           int            `json:"segments"`
	Blocks             int            `json:"blocks"`
	TotalSize          uint64         `json:"total_size"`
	AllocatedSize      uint64         `json:"allocated_size"`
	ActiveBlocks       int            `json:"active_blocks"`
	ExpandableSegments int            `json:"expandable_segments"`
	TracePeakLive      uint64         `json:"trace_peak_live"`
	TraceLiveAtEnd     uint64         `json:"trace_live_at_end"`
	MemoryReserved     uint64         `json:"memory_reserved"`
}

// TestRealSnapshots reads snapshots written by PyTorch 2.11 itself on an H200
// (default allocator and expandable segments) and checks every figure
// against the one PyTorch computed from the same file.
func TestRealSnapshots(t *testing.T) {
	for _, name := range []string{"torch_default", "torch_expandable"} {
		t.Run(name, func(t *testing.T) {
			var want torchFigures
			js, err := os.ReadFile(filepath.Join("testdata", "real", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(js, &want); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(filepath.Join("testdata", "real", name+".pickle"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, err := Decode(f)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}

			var segs, blocks, active, expandable int
			var total, allocated uint64
			for _, sg := range s.Segments {
				if sg.Device != 0 {
					continue
				}
				segs++
				blocks += len(sg.Blocks)
				total += sg.TotalSize
				allocated += sg.AllocatedSize
				if sg.IsExpandable {
					expandable++
				}
				for _, b := range sg.Blocks {
					if b.State == StateActiveAllocated {
						active++
					}
				}
			}
			check := func(what string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, PyTorch says %v", what, got, want)
				}
			}
			check("segments", segs, want.Segments)
			check("blocks", blocks, want.Blocks)
			check("active blocks", active, want.ActiveBlocks)
			check("expandable segments", expandable, want.ExpandableSegments)
			check("total_size", total, want.TotalSize)
			check("total_size vs memory_reserved", total, want.MemoryReserved)
			check("allocated_size", allocated, want.AllocatedSize)
			check("max_split_size", s.AllocatorSettings.MaxSplitSize, uint64(NoMaxSplitSize))
			check("expandable setting", s.AllocatorSettings.ExpandableSegments, want.ExpandableSegments > 0)

			if len(s.DeviceTraces) == 0 {
				t.Fatal("no device traces")
			}
			tr := s.DeviceTraces[0]
			check("trace entries", len(tr), want.TraceEntries)
			got := map[string]int{}
			for _, e := range tr {
				got[e.Action]++
			}
			for a, n := range want.Actions {
				check("action "+a, got[a], n)
			}
			check("kinds of action", len(got), len(want.Actions))

			// The records replay to the live bytes PyTorch's trace implies.
			recs, st, err := s.Records(0)
			if err != nil {
				t.Fatal(err)
			}
			check("records", st.Records, want.Actions[ActionAlloc]+want.Actions["free_completed"])
			var live, peak uint64
			for _, r := range recs {
				switch r.Action {
				case rmm.Allocate:
					live += r.Size
					peak = max(peak, live)
				case rmm.Free:
					live -= r.Size
				}
			}
			check("peak live", peak, want.TracePeakLive)
			check("live at end", live, want.TraceLiveAtEnd)
		})
	}
}
