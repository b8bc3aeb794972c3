package torchsnap

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/trace/rmm"
	"github.com/vramhq/vram/trace/synth"
)

const (
	mib   = 1 << 20
	base  = 0x7F5A40000000
	small = 0x7F5A3FE00000
	strm  = 0x55D0C0A0B0C0
	t0    = 1_700_000_000_000_000
)

func load(t *testing.T, name string) (*Snapshot, error) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Decode(f)
}

func TestDecodeFixture(t *testing.T) {
	for _, name := range []string{"snapshot.pickle", "snapshot_proto2.pickle"} {
		t.Run(name, func(t *testing.T) {
			s, err := load(t, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Segments) != 2 || len(s.DeviceTraces) != 2 || len(s.DeviceTraces[1]) != 0 {
				t.Fatalf("%d segments, %d device traces", len(s.Segments), len(s.DeviceTraces))
			}
			sg := s.Segments[1]
			if sg.Address != base || sg.TotalSize != 20*mib || sg.Stream != strm || sg.SegmentType != "large" ||
				!sg.IsExpandable || sg.ActiveSize != 12*mib || sg.RequestedSize != 12*mib-100 || len(sg.Blocks) != 3 {
				t.Errorf("segment 1 = %+v", sg)
			}
			if b := sg.Blocks[1]; b.Address != base+8*mib || b.Size != 4*mib || b.State != StateActivePendingFree {
				t.Errorf("block 1 = %+v", b)
			}
			if b := s.Segments[0].Blocks[0]; b.RequestedSize != 1000 || len(b.Frames) != 2 ||
				b.Frames[0] != (Frame{Filename: "train.py", Line: 42, Name: "forward"}) {
				t.Errorf("small block = %+v", b)
			}
			tr := s.DeviceTraces[0]
			if len(tr) != 9 {
				t.Fatalf("%d trace entries, want 9", len(tr))
			}
			if e := tr[1]; e.Action != ActionAlloc || e.Addr != base || e.Size != 8*mib-100 || e.Stream != strm || e.TimeUS != t0+5 {
				t.Errorf("entry 1 = %+v", e)
			}
			if e := tr[6]; e.Action != ActionOOM || e.DeviceFree != 3*mib || e.Size != 64*mib {
				t.Errorf("oom entry = %+v", e)
			}
			a := s.AllocatorSettings
			if !a.ExpandableSegments || a.MaxSplitSize != 512*mib || !strings.HasPrefix(a.Conf, "expandable_segments:True") {
				t.Errorf("settings = %+v", a)
			}
			if div, ok := a.Raw["roundup_power2_divisions"].(map[string]any); !ok || div["4"] != int64(4) {
				t.Errorf("raw roundup_power2_divisions = %#v", a.Raw["roundup_power2_divisions"])
			}
		})
	}
}

func TestRecords(t *testing.T) {
	s, err := load(t, "snapshot.pickle")
	if err != nil {
		t.Fatal(err)
	}
	recs, st, err := s.Records(0)
	if err != nil {
		t.Fatal(err)
	}
	want := []rmm.Record{
		{Time: 5 * time.Microsecond, Action: rmm.Allocate, Pointer: base, Size: 8*mib - 100, Stream: strm},
		{Time: 9 * time.Microsecond, Action: rmm.Allocate, Pointer: base + 8*mib, Size: 4 * mib, Stream: strm},
		{Time: 11 * time.Microsecond, Action: rmm.Allocate, Pointer: small, Size: 1000},
		{Time: 30 * time.Microsecond, Action: rmm.AllocateFailure, Size: 64 * mib, Stream: strm},
	}
	if len(recs) != len(want) {
		t.Fatalf("records %+v\nwant %+v", recs, want)
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, recs[i], want[i])
		}
	}
	if st != (ConvertStats{Entries: 9, Records: 4, Skipped: 4, UnmatchedFrees: 1}) {
		t.Errorf("stats = %+v", st)
	}
	if _, _, err := s.Records(2); err == nil || !strings.Contains(err.Error(), "device 2") {
		t.Errorf("Records(2): err = %v", err)
	}
	// The records make a valid trace (allocations still live at the end).
	sum, err := synth.Validate(recs)
	if err != nil || sum.EndLive != 3 {
		t.Errorf("Validate: %+v, %v", sum, err)
	}
}

func TestToRecordsPairsFrees(t *testing.T) {
	entries := []TraceEntry{
		{Action: ActionAlloc, Addr: 1, Size: 10, TimeUS: 100},
		{Action: ActionFreeRequested, Addr: 1, Size: 10, TimeUS: 101},
		{Action: ActionFreeCompleted, Addr: 1, Size: 10, TimeUS: 99},  // clock went back
		{Action: ActionFreeCompleted, Addr: 1, Size: 10, TimeUS: 102}, // not live any more
	}
	recs, st := ToRecords(entries)
	if len(recs) != 2 || recs[1].Action != rmm.Free || recs[1].Time != 0 || st.UnmatchedFrees != 1 || st.Skipped != 1 {
		t.Errorf("records %+v, stats %+v", recs, st)
	}
}

func TestDecodeSegmentsOnly(t *testing.T) {
	s, err := load(t, "segments_only.pickle")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Segments) != 2 || s.DeviceTraces != nil {
		t.Errorf("segments-only snapshot = %+v", s)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"bad block size", mustRead(t, "bad_block_size.pickle"), "segments[1].blocks[2].size: want an integer, got string"},
		{"missing action", mustRead(t, "missing_action.pickle"), `device_traces[0][4]: missing key "action"`},
		{"empty input", nil, "truncated"},
		{"text", []byte("{hello}"), "unknown opcode"},
		{"truncated", mustRead(t, "snapshot.pickle")[:700], "not a valid pickle"},
		{"huge claimed length", []byte{0x80, 4, 0x8e, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '.'}, "more than the input"},
		{"huge frame", []byte{0x80, 4, 0x95, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, '.'}, "needs"},
		{"an integer", []byte{0x80, 4, 'K', 7, '.'}, "snapshot: want a dict, got integer"},
		{"dict without segments", []byte{0x80, 4, '}', '.'}, `missing key "segments"`},
		{"segments not a list", []byte{0x80, 4, '}', 0x8c, 8, 's', 'e', 'g', 'm', 'e', 'n', 't', 's', 'K', 1, 's', '.'}, "segments: want a list, got integer"},
		{"stack underflow", []byte{0x80, 4, 's', '.'}, "not a valid pickle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeBytes(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecode(f *testing.F) {
	for _, name := range []string{"snapshot.pickle", "snapshot_proto2.pickle", "segments_only.pickle", "missing_action.pickle"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeBytes(in)
		if err != nil {
			if s != nil {
				t.Fatal("a snapshot and an error")
			}
			return
		}
		for d := range s.DeviceTraces {
			recs, _, err := s.Records(d)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			w := rmm.NewWriter(&buf)
			for _, r := range recs {
				if err := w.Write(r); err != nil {
					t.Fatalf("converted record %+v does not write: %v", r, err)
				}
			}
		}
	})
}
