package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
)

// writeTicks writes a history file with one tick at each offset from t0.
func writeTicks(t *testing.T, path string, t0 time.Time, at ...time.Duration) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, d := range at {
		tk := store.Tick{Time: t0.Add(d),
			Devices:   []store.DeviceSample{{UUID: "GPU-0", Model: "Test", Used: 1 << 30, Total: 80 << 30, Util: -1}},
			Processes: []sample.Process{{GPU: "GPU-0", PID: 42, StartTime: t0.Add(-time.Hour), User: "u", Command: "python", Bytes: 1 << 30}},
		}
		if err := st.WriteTick(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckLife(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	t0 := time.Unix(1_800_000_000, 0)
	// Ticks every second for 10 s, then one after a 13 s hole.
	var at []time.Duration
	for i := range 10 {
		at = append(at, time.Duration(i)*time.Second+100*time.Millisecond)
	}
	at = append(at, 23*time.Second)
	writeTicks(t, path, t0, at...)
	o := crashOptions{Spec: daemonSpec{DB: path}, HistoryInterval: time.Second}
	tests := []struct {
		name    string
		l       life
		inDB    int64
		missing int64
		err     string
	}{
		{"all there", life{Start: t0, KillAt: t0.Add(9500 * time.Millisecond), Reported: 10, APITicks: 9}, 10, 0, ""},
		{"reported more than the file has", life{Start: t0, KillAt: t0.Add(9500 * time.Millisecond), Reported: 12, APITicks: 9}, 10, 2, "2 ticks reported committed are not in the file"},
		{"the API showed more", life{Start: t0, KillAt: t0.Add(9500 * time.Millisecond), Reported: 10, APITicks: 11}, 10, 2, "API showed 11"},
		{"a hole", life{Start: t0, KillAt: t0.Add(25 * time.Second), Reported: 11, APITicks: 10}, 11, 0, "gaps longer than two history intervals"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.l
			checkLife(context.Background(), o, &l)
			if l.InDB != tt.inDB || l.Missing != tt.missing || l.Integrity != "ok" {
				t.Errorf("in the file %d, missing %d, integrity %q; want %d, %d, ok", l.InDB, l.Missing, l.Integrity, tt.inDB, tt.missing)
			}
			if (tt.err == "") != (l.Err == "") || !strings.Contains(l.Err, tt.err) {
				t.Errorf("error %q, want %q", l.Err, tt.err)
			}
		})
	}
}

func TestTableBytesAndAggregates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "h.db")
	t0 := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
	var at []time.Duration
	for i := range 180 { // three minutes at 1 s
		at = append(at, time.Duration(i)*time.Second)
	}
	writeTicks(t, path, t0, at...)
	ctx := context.Background()
	tb, _, err := tableBytes(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if tb["device_samples"] == 0 || tb["process_samples"] == 0 {
		t.Errorf("tables %v", tb)
	}
	per, minutes, err := aggregates(ctx, path, dir)
	if err != nil {
		t.Fatal(err)
	}
	if minutes != 3 || per <= 0 {
		t.Errorf("%.0f B per minute over %d minutes", per, minutes)
	}
	// The original is untouched.
	if n, err := count(ctx, path, "SELECT COUNT(*) FROM device_samples"); err != nil || n != 180 {
		t.Errorf("original has %d raw samples (%v)", n, err)
	}
	if s, err := integrity(ctx, path); err != nil || s != "ok" {
		t.Errorf("integrity %q, %v", s, err)
	}
	if _, err := integrity(ctx, filepath.Join(dir, "none.db")); err == nil {
		t.Error("a missing file checked")
	}
}
