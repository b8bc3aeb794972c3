package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/serve/sample"
)

// allocTick is a tick of one process, PID 42 on GPU-a, holding bytes; on
// vram's allocator with these figures when alloc is set.
func allocTick(at time.Time, bytes uint64, alloc *statchan.Figures) Tick {
	p := sample.Process{GPU: "GPU-a", PID: 42, StartTime: t0.Add(-time.Hour), Command: "python train.py", Bytes: bytes}
	if alloc != nil {
		p.Alloc = &statchan.Record{Figures: *alloc}
	}
	return Tick{Time: at, Processes: []sample.Process{p}}
}

func figures(allocated, reserved int64) *statchan.Figures {
	return &statchan.Figures{Allocated: allocated, Reserved: reserved}
}

func TestAllocatorFigures(t *testing.T) {
	ctx := context.Background()
	c := &clock{t0}
	s, err := Open(ctx, filepath.Join(t.TempDir(), "h.db"), Options{Now: c.now, RawRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Two minutes of ticks every 10 s. The first minute: figures on every
	// other tick (allocated 100, 120, 140; reserved 1000, 1020, 1040). The
	// second: none.
	for i := range 12 {
		var f *statchan.Figures
		if i < 6 && i%2 == 0 {
			f = figures(int64(100+10*i), int64(1000+10*i))
		}
		if err := s.WriteTick(ctx, allocTick(t0.Add(time.Duration(i)*10*time.Second), uint64(2000+i), f)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, what string, p ProcessPoint, n int, amin, amax uint64, amean float64, rmin, rmax uint64, rmean float64) {
		t.Helper()
		if p.AllocSamples != n || p.Allocated != (Range{amin, amax, amean}) || p.Reserved != (Range{rmin, rmax, rmean}) {
			t.Errorf("%s: %d samples with figures, allocated %+v, reserved %+v; want %d, %d..%d mean %v, %d..%d mean %v",
				what, p.AllocSamples, p.Allocated, p.Reserved, n, amin, amax, amean, rmin, rmax, rmean)
		}
	}
	raw, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(2*time.Minute), 0)
	if err != nil || len(raw) != 12 {
		t.Fatalf("raw: %d points, %v", len(raw), err)
	}
	check(t, "raw tick 2", raw[2], 1, 120, 120, 120, 1020, 1020, 1020)
	check(t, "raw tick 3", raw[3], 0, 0, 0, 0, 0, 0, 0)
	minutes := func(t *testing.T) []ProcessPoint {
		t.Helper()
		pts, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(2*time.Minute), time.Minute)
		if err != nil || len(pts) != 2 {
			t.Fatalf("minutes: %+v, %v", pts, err)
		}
		return pts
	}
	pts := minutes(t)
	check(t, "first minute (raw)", pts[0], 3, 100, 140, 120, 1000, 1040, 1020)
	check(t, "second minute (raw)", pts[1], 0, 0, 0, 0, 0, 0, 0)
	if pts[0].Samples != 6 || pts[0].Bytes.Max != 2005 {
		t.Errorf("first minute's bytes: %+v", pts[0])
	}

	// Folded into minute aggregates, the same answers.
	c.t = t0.Add(2 * time.Hour)
	if st, err := s.Compact(ctx); err != nil || st.ProcessRowsFolded != 12 {
		t.Fatalf("compact: %+v %v", st, err)
	}
	pts = minutes(t)
	check(t, "first minute (aggregate)", pts[0], 3, 100, 140, 120, 1000, 1040, 1020)
	check(t, "second minute (aggregate)", pts[1], 0, 0, 0, 0, 0, 0, 0)

	// Late samples merge into the aggregates: one with figures into each
	// minute (the second had none), one without into the first.
	for _, tk := range []Tick{
		allocTick(t0.Add(55*time.Second), 1, figures(400, 1400)),
		allocTick(t0.Add(56*time.Second), 1, nil),
		allocTick(t0.Add(65*time.Second), 1, figures(10, 50)),
	} {
		if err := s.WriteTick(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	pts = minutes(t)
	check(t, "first minute (merged)", pts[0], 4, 100, 400, 190, 1000, 1400, 1115)
	check(t, "second minute (merged)", pts[1], 1, 10, 10, 10, 50, 50, 50)
	if pts[0].Samples != 8 {
		t.Errorf("first minute merged: %d samples, want 8", pts[0].Samples)
	}
}

// TestMigrationFromVersion1 opens a history file written by a vram whose
// schema had no allocator figures: it is migrated in place, its rows read
// back with none, and new rows carry them.
func TestMigrationFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		migrations[0],
		"PRAGMA user_version = 1",
		"INSERT INTO gpus (id, uuid, model) VALUES (1, 'GPU-a', 'NVIDIA H200')",
		"INSERT INTO processes (id, gpu, pid, start, user, command, last) VALUES (1, 1, 42, ?1, 'ana', 'python train.py', ?2)",
		"INSERT INTO process_samples (t, proc, bytes, flags) VALUES (?2, 1, 700, 0)",
		"INSERT INTO process_minutes (t, proc, n, bytes_min, bytes_max, bytes_mean, flags) VALUES (?3, 1, 2, 500, 600, 550, 0)",
	} {
		if _, err := old.Exec(q, ms(t0.Add(-time.Hour)), ms(t0.Add(time.Minute)), ms(t0)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	c := &clock{t0.Add(2 * time.Minute)}
	s, err := Open(ctx, path, Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion || v < 2 {
		t.Fatalf("version after migration: %d %v", v, err)
	}
	integrity(t, s.db)
	if err := s.WriteTick(ctx, allocTick(t0.Add(90*time.Second), 800, figures(300, 512))); err != nil {
		t.Fatal(err)
	}
	pts, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(2*time.Minute), 30*time.Second)
	if err != nil || len(pts) != 3 {
		t.Fatalf("history: %+v %v", pts, err)
	}
	if p := pts[0]; p.Samples != 2 || p.Bytes.Mean != 550 || p.AllocSamples != 0 {
		t.Errorf("old minute aggregate: %+v", p)
	}
	if p := pts[1]; p.Samples != 1 || p.Bytes.Max != 700 || p.AllocSamples != 0 {
		t.Errorf("old raw sample: %+v", p)
	}
	if p := pts[2]; p.Bytes.Max != 800 || p.AllocSamples != 1 || p.Allocated.Max != 300 || p.Reserved.Mean != 512 {
		t.Errorf("new sample: %+v", p)
	}
	// The old raw row (NULL figures) folds beside the new one.
	c.t = t0.Add(26 * time.Hour)
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	pts, err = s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(2*time.Minute), time.Minute)
	if err != nil || len(pts) != 2 {
		t.Fatalf("after compaction: %+v %v", pts, err)
	}
	if p := pts[1]; p.Samples != 2 || p.AllocSamples != 1 || p.Allocated.Mean != 300 || p.Bytes.Min != 700 {
		t.Errorf("folded minute: %+v", p)
	}
}
