package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vramhq/vram/serve/store"
)

func ExampleStore_DeviceHistory() {
	dir, _ := os.MkdirTemp("", "vram-history")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(dir, "history.db"), store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for i := range 6 {
		s.WriteTick(ctx, store.Tick{
			Time:    t0.Add(time.Duration(i) * 10 * time.Second),
			Devices: []store.DeviceSample{{UUID: "GPU-0", Used: uint64(i+1) << 30, Total: 140 << 30, Util: -1}},
		})
	}
	pts, err := s.DeviceHistory(ctx, "GPU-0", t0, t0.Add(time.Minute), 30*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range pts {
		fmt.Printf("%s: %d samples, used %d..%d GiB, mean %.0f GiB\n", p.Time.UTC().Format("15:04:05"), p.Samples, p.Used.Min>>30, p.Used.Max>>30, p.Used.Mean/(1<<30))
	}
	// Output:
	// 12:00:00: 3 samples, used 1..3 GiB, mean 2 GiB
	// 12:00:30: 3 samples, used 4..6 GiB, mean 5 GiB
}
