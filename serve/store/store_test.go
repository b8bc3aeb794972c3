package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/sample"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func openTest(t *testing.T, c *clock) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "sub", "history.db"), Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tickAt(at time.Time, used uint64) Tick {
	return Tick{
		Time: at,
		Devices: []DeviceSample{
			{UUID: "GPU-a", Model: "NVIDIA H200", Used: used, Reserved: 500, Free: 10000 - used - 500, Total: 10000, Util: 40},
			{UUID: "GPU-b", Model: "NVIDIA H200", Used: 1, Reserved: 500, Free: 9499, Total: 10000, Util: -1},
		},
		Processes: []sample.Process{
			{GPU: "GPU-a", PID: 42, StartTime: t0.Add(-time.Hour), User: "ana", Command: "python train.py", Bytes: used / 2, Flags: gpu.FlagIdle},
			{GPU: "GPU-a", PID: 43, StartTime: t0.Add(-time.Hour), User: "bo", Command: "python serve.py", Bytes: used / 4},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	for i := range 10 {
		if err := s.WriteTick(ctx, tickAt(t0.Add(time.Duration(i)*time.Second), uint64(1000+100*i))); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 10 {
		t.Fatalf("raw points: got %d, want 10", len(raw))
	}
	p := raw[3]
	if !p.Time.Equal(t0.Add(3*time.Second)) || p.Used.Min != 1300 || p.Used.Max != 1300 || p.Used.Mean != 1300 ||
		p.Reserved.Max != 500 || p.Free.Min != 8200 || p.Total != 10000 || !p.UtilKnown || p.Util.Mean != 40 || p.Samples != 1 {
		t.Errorf("point 3: %+v", p)
	}
	tests := []struct {
		name     string
		res      time.Duration
		points   int
		min, max uint64
		mean     float64
	}{
		{"5 s buckets", 5 * time.Second, 2, 1000, 1400, 1200},
		{"one bucket", time.Minute, 1, 1000, 1900, 1450},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Minute), tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.points {
				t.Fatalf("points: got %d, want %d", len(got), tc.points)
			}
			if got[0].Used.Min != tc.min || got[0].Used.Max != tc.max || got[0].Used.Mean != tc.mean {
				t.Errorf("first bucket used: got %+v, want %d..%d mean %v", got[0].Used, tc.min, tc.max, tc.mean)
			}
		})
	}
	b, err := s.DeviceHistory(ctx, "GPU-b", t0, t0.Add(time.Minute), time.Minute)
	if err != nil || len(b) != 1 || b[0].UtilKnown {
		t.Errorf("GPU-b: unknown utilization should stay unknown: %+v %v", b, err)
	}
	none, err := s.DeviceHistory(ctx, "GPU-zzz", t0, t0.Add(time.Minute), time.Minute)
	if err != nil || len(none) != 0 {
		t.Errorf("unknown GPU: %v %v", none, err)
	}
	if _, err := s.DeviceHistory(ctx, "GPU-a", t0, t0, time.Minute); err == nil {
		t.Error("empty range: no error")
	}

	ph, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ph) != 10 || ph[9].Bytes.Max != 950 || ph[0].User != "ana" || ph[0].Command != "python train.py" ||
		ph[0].Flags != gpu.FlagIdle || !ph[0].StartTime.Equal(t0.Add(-time.Hour)) {
		t.Errorf("process 42: %d points, %+v", len(ph), ph)
	}
}

func TestPIDReuseIsANewProcess(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	for i, start := range []time.Time{t0.Add(-time.Hour), t0} {
		tk := Tick{Time: t0.Add(time.Duration(i) * time.Second), Processes: []sample.Process{
			{GPU: "GPU-a", PID: 7, StartTime: start, Command: []string{"old", "new"}[i], Bytes: uint64(i + 1)},
		}}
		if err := s.WriteTick(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	ph, err := s.ProcessHistory(ctx, "GPU-a", 7, t0, t0.Add(time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ph) != 2 || ph[0].Command != "old" || ph[1].Command != "new" {
		t.Errorf("two lifetimes expected: %+v", ph)
	}
}

func TestRetentionAndDownsampling(t *testing.T) {
	ctx := context.Background()
	c := &clock{t0}
	s := openTest(t, c)
	// 26 h of ticks every 20 s; used rises by one byte per tick.
	const every = 20 * time.Second
	n := int(26 * time.Hour / every)
	for i := range n {
		tk := tickAt(t0.Add(time.Duration(i)*every), uint64(1000+i))
		tk.Processes[0].Flags = 0
		if i%3 == 1 {
			tk.Processes[0].Flags = gpu.FlagOrphaned
		}
		if err := s.WriteTick(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	c.t = t0.Add(26 * time.Hour)
	st, err := s.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Raw older than 24 h: the first 2 h, 360 ticks, 2 GPUs and 2 processes each.
	if st.DeviceRowsFolded != 720 || st.ProcessRowsFolded != 720 {
		t.Errorf("folded: %+v", st)
	}
	// Again: nothing left to fold.
	if st2, err := s.Compact(ctx); err != nil || st2.DeviceRowsFolded != 0 {
		t.Errorf("second compact: %+v %v", st2, err)
	}
	// The first minute: ticks 0, 1, 2 -> used 1000..1002.
	pts, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(3*time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 180 {
		t.Fatalf("minute points over 3 h: got %d, want 180", len(pts))
	}
	if p := pts[0]; p.Samples != 3 || p.Used.Min != 1000 || p.Used.Max != 1002 || p.Used.Mean != 1001 || p.Total != 10000 || p.Util.Mean != 40 {
		t.Errorf("first minute (aggregate): %+v", p)
	}
	// The hour boundary between aggregates and raw is seamless.
	if p := pts[120]; p.Samples != 3 || p.Used.Min != 1360 || p.Used.Max != 1362 {
		t.Errorf("first raw minute: %+v", p)
	}
	// A coarse bucket over aggregates keeps the extremes and weights the mean.
	hour, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Hour), time.Hour)
	if err != nil || len(hour) != 1 || hour[0].Used.Min != 1000 || hour[0].Used.Max != 1179 || hour[0].Used.Mean != 1089.5 || hour[0].Samples != 180 {
		t.Errorf("first hour: %+v %v", hour, err)
	}
	ph, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(time.Minute), time.Minute)
	if err != nil || len(ph) != 1 || ph[0].Bytes.Min != 500 || ph[0].Bytes.Max != 501 || ph[0].Flags != gpu.FlagOrphaned {
		t.Errorf("process minute: %+v %v", ph, err)
	}

	// A late raw sample for an aggregated minute merges into it.
	late := tickAt(t0.Add(30*time.Second), 5000)
	if err := s.WriteTick(ctx, late); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	pts, err = s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Minute), time.Minute)
	if err != nil || len(pts) != 1 || pts[0].Samples != 4 || pts[0].Used.Max != 5000 || pts[0].Used.Mean != (1000+1001+1002+5000)/4.0 {
		t.Errorf("merged minute: %+v %v", pts, err)
	}

	if err := s.RecordAction(ctx, Action{Time: t0, Rule: "r", Action: "alert only", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	// 32 days later every aggregate, the action and the processes are gone.
	c.t = t0.Add(32 * 24 * time.Hour)
	st, err = s.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeviceMinutesDeleted == 0 || st.ProcessesDeleted != 2 || st.OtherDeleted != 1 {
		t.Errorf("retention: %+v", st)
	}
	for _, table := range []string{"device_samples", "process_samples", "device_minutes", "process_minutes", "processes", "actions"} {
		var k int
		if err := s.db.QueryRow("SELECT count(*) FROM " + table).Scan(&k); err != nil || k != 0 {
			t.Errorf("%s: %d rows left (%v)", table, k, err)
		}
	}
	// The process caches were cleared: a new tick still writes.
	if err := s.WriteTick(ctx, tickAt(c.t, 1)); err != nil {
		t.Fatal(err)
	}
	if ph, err := s.ProcessHistory(ctx, "GPU-a", 42, c.t, c.t.Add(time.Second), 0); err != nil || len(ph) != 1 {
		t.Errorf("after retention: %+v %v", ph, err)
	}
}

func TestMigrationFromEmptyFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Errorf("version: %d %v", v, err)
	}
	if err := s.WriteTick(ctx, tickAt(t0, 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Reopening applies nothing and keeps the data.
	s, err = Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pts, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Second), 0)
	if err != nil || len(pts) != 1 {
		t.Errorf("after reopen: %+v %v", pts, err)
	}
	// A file from a newer vram is refused.
	if _, err := s.db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, path, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("newer schema: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		opts       Options
		want       string
	}{
		{"empty path", "", Options{}, "empty path"},
		{"not sqlite", garbage, Options{}, "not a usable SQLite file"},
		{"short aggregate retention", filepath.Join(dir, "a.db"), Options{RawRetention: 48 * time.Hour, AggregateRetention: time.Hour}, "shorter than raw"},
		{"tiny raw retention", filepath.Join(dir, "b.db"), Options{RawRetention: time.Second}, "under a minute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(ctx, tc.path, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	if err := s.WriteTick(ctx, Tick{}); err == nil {
		t.Error("tick without time: no error")
	}
	if err := s.WriteTick(ctx, Tick{Time: t0, Devices: []DeviceSample{{}}}); err == nil {
		t.Error("device without UUID: no error")
	}
	// The failed tick left nothing and the store still works.
	if err := s.WriteTick(ctx, tickAt(t0, 5)); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAction(ctx, Action{}); err == nil {
		t.Error("empty action: no error")
	}
	if err := s.RecordAlert(ctx, Alert{}); err == nil {
		t.Error("empty alert: no error")
	}
}

func TestActionsAndAlerts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	a := Action{Time: t0, Rule: "reclaim-orphans", PID: 42, StartTime: t0.Add(-time.Hour), Action: "signal TERM", Reason: "orphaned for 10m, 12 GiB", Result: "ok"}
	if err := s.RecordAction(ctx, a); err != nil {
		t.Fatal(err)
	}
	al := Alert{Time: t0.Add(time.Second), Name: "leak", Severity: "warning", GPU: "GPU-a", PID: 42, Message: "rising 3 MiB/s", State: "firing"}
	if err := s.RecordAlert(ctx, al); err != nil {
		t.Fatal(err)
	}
	as, err := s.Actions(ctx, t0, t0.Add(time.Minute))
	if err != nil || len(as) != 1 || !as[0].Time.Equal(a.Time) || !as[0].StartTime.Equal(a.StartTime) {
		t.Errorf("actions: %+v %v", as, err)
	}
	as[0].Time, as[0].StartTime = a.Time, a.StartTime
	if as[0] != a {
		t.Errorf("actions: %+v %v", as, err)
	}
	ls, err := s.Alerts(ctx, t0, t0.Add(time.Minute))
	if err != nil || len(ls) != 1 || !ls[0].Time.Equal(al.Time) {
		t.Fatalf("alerts: %+v %v", ls, err)
	}
	ls[0].Time = al.Time
	if ls[0] != al {
		t.Errorf("alerts: %+v %v", ls, err)
	}
	if as, _ := s.Actions(ctx, t0.Add(time.Second), t0.Add(time.Minute)); len(as) != 0 {
		t.Errorf("range excludes: %+v", as)
	}
}

func TestDefaultPath(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_STATE_HOME": "/s", "HOME": "/h"}, "/s/vram/history.db"},
		{map[string]string{"XDG_STATE_HOME": "relative", "HOME": "/h"}, "/h/.local/state/vram/history.db"},
		{map[string]string{"HOME": "/h"}, "/h/.local/state/vram/history.db"},
	}
	for _, tc := range tests {
		got, err := DefaultPath(func(k string) string { return tc.env[k] })
		if err != nil || got != tc.want {
			t.Errorf("%v: got %q %v, want %q", tc.env, got, err, tc.want)
		}
	}
}

// TestWriteSampledRecords writes the records of a simulated sample, as the
// daemon does, and reads the largest process back.
func TestWriteSampledRecords(t *testing.T) {
	c := &clock{t0}
	sim, err := gpu.NewSim(2, 1, c.now)
	if err != nil {
		t.Fatal(err)
	}
	smp, err := gpu.NewSampler(sim, gpu.SamplerOptions{Procs: sim, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := smp.Sample()
	if err != nil {
		t.Fatal(err)
	}
	tk := Tick{Time: snap.Time}
	for _, d := range snap.Devices {
		tk.Devices = append(tk.Devices, DeviceSample{UUID: d.UUID, Model: d.Name, Used: d.Memory.Used, Free: d.Memory.Free, Total: d.Memory.Total, Util: -1})
	}
	for _, p := range snap.Processes {
		tk.Processes = append(tk.Processes, sample.FromGPU(p))
	}
	if len(tk.Processes) == 0 {
		t.Fatal("the simulated sample has no processes")
	}
	s := openTest(t, c)
	ctx := context.Background()
	if err := s.WriteTick(ctx, tk); err != nil {
		t.Fatal(err)
	}
	p := snap.Processes[0]
	ph, err := s.ProcessHistory(ctx, p.DeviceUUID, p.PID, t0, t0.Add(time.Second), 0)
	if err != nil || len(ph) != 1 || ph[0].Bytes.Max != p.Memory || ph[0].Flags != p.Flags || ph[0].Command != p.Command() {
		t.Errorf("largest process %+v: %+v %v", p, ph, err)
	}
}

// integrity runs PRAGMA integrity_check.
func integrity(t *testing.T, db *sql.DB) {
	t.Helper()
	var r string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&r); err != nil || r != "ok" {
		t.Errorf("integrity_check: %q %v", r, err)
	}
}

// Reads run beside the writer (WAL) and see whole ticks only.
func TestConcurrentReadsDuringWrites(t *testing.T) {
	ctx := context.Background()
	c := &clock{t0}
	s := openTest(t, c)
	done := make(chan error, 1)
	go func() {
		for i := range 100 {
			if err := s.WriteTick(ctx, tickAt(t0.Add(time.Duration(i)*time.Second), 1000)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
		}
		pts, err := s.ProcessHistory(ctx, "GPU-a", 42, t0, t0.Add(time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := s.DeviceHistory(ctx, "GPU-a", t0, t0.Add(time.Hour), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// A reader's snapshot never has a process row without its tick's
		// device row (one transaction per tick); the process query runs
		// first, so the device count can only be larger.
		if len(pts) == 1 && (len(dev) != 1 || dev[0].Samples < pts[0].Samples) {
			t.Fatalf("process has %d samples, device %+v", pts[0].Samples, dev)
		}
	}
	if _, err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	integrity(t, s.db)
}

func TestOpenAlerts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	for _, a := range []Alert{
		{Time: at(1), Name: "leak", GPU: "GPU-a", PID: 42, State: "firing", Message: "first"},
		{Time: at(2), Name: "leak", GPU: "GPU-a", PID: 42, State: "resolved"},
		{Time: at(3), Name: "leak", GPU: "GPU-a", PID: 42, State: "firing", Message: "again"}, // open
		{Time: at(1), Name: "leak", GPU: "GPU-a", PID: 43, State: "firing"},
		{Time: at(4), Name: "leak", GPU: "GPU-a", PID: 43, State: "resolved"},      // closed
		{Time: at(2), Name: "used", GPU: "GPU-b", State: "firing", Message: "gpu"}, // open
		{Time: at(5), Name: "down", GPU: "GPU-b", State: "resolved"},
		{Time: at(5), Name: "down", GPU: "GPU-b", State: "firing", Message: "same ms, later row"}, // open
	} {
		a.Severity = "warning"
		if err := s.RecordAlert(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	open, err := s.OpenAlerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range open {
		got = append(got, fmt.Sprintf("%s/%s/%d:%s", a.Name, a.GPU, a.PID, a.Message))
	}
	want := "used/GPU-b/0:gpu leak/GPU-a/42:again down/GPU-b/0:same ms, later row"
	if strings.Join(got, " ") != want {
		t.Errorf("open alerts = %q, want %q", strings.Join(got, " "), want)
	}
}

// TestWriteTickInBatches writes ticks of 0 to 2×batchRows+1 processes (the
// rows go in batches of batchRows, the last batch takes the rest), one
// process listed twice in a batch and once across two batches, and reads
// every row back: each process has its own bytes, and a process listed
// twice has the later row's, as separate statements would leave it.
func TestWriteTickInBatches(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, &clock{t0})
	for i, n := range []int{0, 1, batchRows - 1, batchRows, batchRows + 1, 2*batchRows + 1} {
		at := t0.Add(time.Duration(i) * time.Second)
		tk := Tick{Time: at, Devices: []DeviceSample{{UUID: "GPU-a", Model: "NVIDIA H200", Used: 1, Total: 10, Util: -1}}}
		for p := range n {
			tk.Processes = append(tk.Processes, sample.Process{GPU: "GPU-a", PID: uint32(1000 + p), StartTime: t0, Bytes: uint64(1000*i + p)})
		}
		if n > 2 { // the first process again, later in the same batch, with other bytes
			tk.Processes = append(tk.Processes[:2], append([]sample.Process{{GPU: "GPU-a", PID: 1000, StartTime: t0, Bytes: 7}}, tk.Processes[2:]...)...)
		}
		if n > batchRows { // the second process again, in the next batch
			tk.Processes = append(tk.Processes, sample.Process{GPU: "GPU-a", PID: 1001, StartTime: t0, Bytes: 9})
		}
		if err := s.WriteTick(ctx, tk); err != nil {
			t.Fatalf("%d processes: %v", n, err)
		}
		for p := range n {
			ph, err := s.ProcessHistory(ctx, "GPU-a", uint32(1000+p), at, at.Add(time.Second), 0)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(1000*i + p)
			switch {
			case p == 0 && n > 2:
				want = 7
			case p == 1 && n > batchRows:
				want = 9
			}
			if len(ph) != 1 || ph[0].Bytes.Max != want {
				t.Fatalf("tick of %d processes, PID %d: %+v, want one point of %d bytes", n, 1000+p, ph, want)
			}
		}
	}
}
