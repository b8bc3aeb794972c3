package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramhq/vram/serve/sample"
)

// benchTick is one tick of a large node: 8 GPUs, 200 processes on each.
func benchTick(i int, every time.Duration) Tick {
	tk := Tick{Time: t0.Add(time.Duration(i) * every)}
	for g := range 8 {
		uuid := fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", g)
		tk.Devices = append(tk.Devices, DeviceSample{UUID: uuid, Model: "NVIDIA H200", Used: 80<<30 + uint64(i%1000)<<20, Reserved: 600 << 20, Free: 60 << 30, Total: 143771 << 20, Util: 50 + i%50})
		for p := range 200 {
			tk.Processes = append(tk.Processes, sample.Process{
				GPU: uuid, PID: uint32(10000 + g*1000 + p), StartTime: t0.Add(-time.Duration(p) * time.Minute),
				User: "researcher", Command: "python -m torch.distributed.run --nproc_per_node 8 train.py --config configs/large.yaml",
				Bytes: 300<<20 + uint64((i*7+p)%512)<<20,
			})
		}
	}
	return tk
}

// BenchmarkWriteTick measures one tick of 8 GPUs × 200 processes, and the
// file's growth per tick, from which bytes per day are extrapolated at a
// tick every second and every 10 seconds (raw retention is 24 h, so this is
// the raw part of the file at steady state). "full" is Options.Durable:
// an fsync per commit.
func BenchmarkWriteTick(b *testing.B) {
	for _, durable := range []bool{false, true} {
		b.Run(map[bool]string{false: "normal", true: "full"}[durable], func(b *testing.B) { benchWriteTick(b, durable) })
	}
}

func benchWriteTick(b *testing.B, durable bool) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "history.db")
	s, err := Open(ctx, path, Options{Durable: durable})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ticks := make([]Tick, 64)
	for i := range ticks {
		ticks[i] = benchTick(i, time.Second)
	}
	// Warm: the GPU and process rows exist, as in steady state.
	if err := s.WriteTick(ctx, ticks[0]); err != nil {
		b.Fatal(err)
	}
	size0 := fileSize(b, s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk := ticks[i%len(ticks)]
		tk.Time = t0.Add(time.Duration(i+1) * time.Second)
		if err := s.WriteTick(ctx, tk); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perTick := float64(fileSize(b, s)-size0) / float64(b.N)
	b.ReportMetric(perTick, "file-B/tick")
	b.ReportMetric(perTick*86400/1e9, "GB/day@1s")
	b.ReportMetric(perTick*8640/1e9, "GB/day@10s")
}

// BenchmarkCompactHour folds an hour of 8 GPUs × 200 processes sampled
// every 10 s into minute aggregates, and reports the aggregates' size per
// day (extrapolated from the hour).
func BenchmarkCompactHour(b *testing.B) {
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := &clock{t0}
		path := filepath.Join(b.TempDir(), fmt.Sprintf("history%d.db", i))
		s, err := Open(ctx, path, Options{Now: c.now})
		if err != nil {
			b.Fatal(err)
		}
		for k := range 360 {
			if err := s.WriteTick(ctx, benchTick(k, 10*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
		before := fileSize(b, s)
		var raw int64
		s.db.QueryRow("SELECT (SELECT count(*) FROM process_samples)").Scan(&raw)
		c.t = t0.Add(25 * time.Hour)
		b.StartTimer()
		if _, err := s.Compact(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.db.Exec("VACUUM")
		after := fileSize(b, s)
		b.ReportMetric(float64(before)/1e6, "raw-MB/h@10s")
		b.ReportMetric(float64(after)*24/1e6, "agg-MB/day")
		s.Close()
	}
}

// fileSize checkpoints the WAL into the main file and returns its size.
func fileSize(b *testing.B, s *Store) int64 {
	b.Helper()
	if _, err := s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(s.path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}
