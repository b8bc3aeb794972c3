package alloc_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/trace/rmm"
)

func TestSummaryLayout(t *testing.T) {
	a, _ := newAlloc(t, 2*giB, alloc.Config{})
	p := mustMalloc(t, a, giB, 0)
	q := mustMalloc(t, a, 1000, 0)
	r := mustMalloc(t, a, 1000, 0)
	mustFree(t, a, q)
	s := a.Summary()
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		if len(l) != 77 || l[0] != '|' || l[76] != '|' {
			t.Fatalf("line %d is not 75 columns between bars: %q", i, l)
		}
	}
	for _, want := range []string{
		"CUDA OOMs: 0", "cudaMalloc retries: 0",
		// PyTorch's unit rule: the unit goes up while the "all" value is at
		// least 768 of it, and the pool rows use the "all" row's unit.
		"| Allocated memory      |   1024 MiB |   1024 MiB |   1024 MiB |   1024 B   |",
		"|       from small pool |      0 MiB |      0 MiB |      0 MiB |   1024 B   |",
		"| GPU reserved segments |       2    |       2    |       2    |       0    |",
		"| Non-releasable allocs |       2    |       2    |       3    |       1    |",
		"largest free block",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	mustFree(t, a, p)
	mustFree(t, a, r)
}

func TestStatsMapKeys(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{})
	p := mustMalloc(t, a, 5000, 0)
	m := a.StatsMap()
	// 9 pool statistics × 3 pools × 4 fields, 2 oversize × 4, 12 scalars.
	if len(m) != 9*3*4+2*4+12 {
		t.Fatalf("%d keys", len(m))
	}
	for key, want := range map[string]int64{
		"allocated_bytes.all.current":        5120,
		"allocated_bytes.small_pool.current": 5120,
		"allocated_bytes.large_pool.current": 0,
		"requested_bytes.all.current":        5000,
		"reserved_bytes.all.current":         2 * miB,
		"segment.small_pool.peak":            1,
		"allocation.all.allocated":           1,
		"inactive_split_bytes.all.current":   2*miB - 5120,
		"num_device_alloc":                   1,
		"num_ooms":                           0,
		"max_split_size":                     -1,
		"oversize_allocations.current":       0,
	} {
		if got, ok := m[key]; !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", key, got, ok, want)
		}
	}
	mustFree(t, a, p)
}

func TestSnapshot(t *testing.T) {
	a, _ := newAlloc(t, giB, alloc.Config{RecordCallSites: alloc.CallSitesAll})
	p := mustMalloc(t, a, 1000, 0)
	q := mustMalloc(t, a, 3000, 0)
	mustFree(t, a, p)
	var buf bytes.Buffer
	if err := a.WriteSnapshotJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var snap alloc.Snapshot
	if err := json.Unmarshal(buf.Bytes(), &snap); err != nil {
		t.Fatal(err)
	}
	if len(snap.Segments) != 1 {
		t.Fatalf("%d segments", len(snap.Segments))
	}
	seg := snap.Segments[0]
	if seg.SegmentType != "small" || seg.TotalSize != 2*miB || seg.AllocatedSize != 3072 || seg.RequestedSize != 3000 {
		t.Fatalf("segment %+v", seg)
	}
	var states []string
	for _, b := range seg.Blocks {
		states = append(states, b.State)
	}
	if strings.Join(states, ",") != "inactive,active_allocated,inactive" {
		t.Fatalf("block states %v", states)
	}
	if fr := seg.Blocks[1].Frames; len(fr) < 2 || !strings.Contains(fr[0].Function, "mustMalloc") || !strings.Contains(fr[1].Function, "TestSnapshot") {
		t.Fatalf("frames of the live block: %+v", fr)
	}
	if !strings.Contains(buf.String(), `"filename"`) || !strings.Contains(buf.String(), `"allocated_bytes"`) {
		t.Fatal("snapshot JSON lacks PyTorch-style keys")
	}
	mustFree(t, a, q)
}

func TestTraceCSV(t *testing.T) {
	a, _ := newAlloc(t, 64*miB, alloc.Config{TraceEvents: 4})
	p := mustMalloc(t, a, 100, 0)
	q := mustMalloc(t, a, 200, 5)
	mustFree(t, a, p)
	_, _ = a.Malloc(100*miB, 0) // fails
	mustFree(t, a, q)           // 5 events; the ring keeps the last 4
	var buf bytes.Buffer
	if err := a.WriteTraceCSV(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 || lines[0] != "Thread,Time,Action,Pointer,Size,Stream" {
		t.Fatalf("trace:\n%s", buf.String())
	}
	wantActions := []string{"allocate", "free", "allocate failure", "free"}
	for i, l := range lines[1:] {
		f := strings.Split(l, ",")
		if f[2] != wantActions[i] {
			t.Fatalf("line %d action %q, want %q:\n%s", i+1, f[2], wantActions[i], buf.String())
		}
	}
	if !strings.Contains(lines[3], ",(nil),104857600,0") || !strings.HasPrefix(lines[1], "0,00:00:00.000000,allocate,0x") || !strings.HasSuffix(lines[1], ",200,5") {
		t.Fatalf("trace lines:\n%s", buf.String())
	}
	// It reads back with the project's RMM reader.
	recs, err := rmm.ReadAll(strings.NewReader(buf.String()))
	if err != nil || len(recs) != 4 || recs[2].Action != rmm.AllocateFailure || recs[0].Stream != 5 {
		t.Fatalf("read back: %+v, %v", recs, err)
	}

	b, _ := newAlloc(t, giB, alloc.Config{})
	if err := b.WriteTraceCSV(&buf); err == nil || !strings.Contains(err.Error(), "trace_events") {
		t.Fatalf("trace without trace_events: %v", err)
	}
}
