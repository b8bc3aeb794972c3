package monitor

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
)

var updatePrint = flag.Bool("update-print", false, "rewrite the watch_*.golden files in testdata/")

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

func stat(vals ...uint64) gpu.Stat {
	var s gpu.Stat
	for _, v := range vals {
		s.Add(v)
	}
	return s
}

// printIntervals are two hand-made intervals: sizes in every unit, a
// device without samples (not printed), processes with and without /proc
// details, flags, and command lines that JSON must escape.
func printIntervals() []*gpu.Interval {
	t0 := time.Date(2026, 11, 30, 9, 15, 2, 123456789, time.UTC)
	proc := func(pid uint32, dev int, user string, cmd []string, comm string, flags gpu.Flags) gpu.Process {
		return gpu.Process{PID: pid, Device: dev, User: user, Cmdline: cmd, Comm: comm, Flags: flags}
	}
	a := &gpu.Interval{
		Start: t0, End: t0.Add(10 * time.Millisecond), MemorySamples: 2, ProcessSamples: 1,
		Devices: []gpu.DeviceStat{
			{Identity: gpu.Identity{Index: 0, UUID: "GPU-5fd0a1f5-d82c-0617-47f6-12940d49e9fb"}, Total: 150754820096, Used: stat(40315846656, 48905781248)},
			{Identity: gpu.Identity{Index: 3, UUID: "GPU-00000000-0000-0000-0000-000000000003"}, Total: 150754820096},
			{Identity: gpu.Identity{Index: 5, UUID: "GPU-<odd>&\"uuid\""}, Total: 2 << 40, Used: stat(1<<40+512*gib, 900, 3*kib+1)},
		},
		Processes: []gpu.ProcessStat{
			{Process: proc(446, 0, "root", []string{"python3", "hold.py", "--gib", "4"}, "python3", 0), Memory: stat(5070913536)},
			{Process: proc(8123, 5, "alice", []string{"python", "-c", "print(\"a<b>&c\\\\\")\t\u2028\x01"}, "python", gpu.FlagJupyter|gpu.FlagIdle), Memory: stat(12 * mib)},
			{Process: proc(99, 0, "", nil, "kworker", gpu.FlagZombie), Memory: stat(0)},
			{Process: proc(77777, 5, "", nil, "", gpu.FlagNoSuchProcess), Memory: stat(1023)},
			{Process: proc(4000000000, 0, "bob\xff", []string{"caf\xc3\xa9", "\xe2\x28\xa1"}, "x", gpu.FlagOrphaned|gpu.FlagNoPermission|gpu.FlagZombie), Memory: stat(3*gib, gib, 2*gib)},
		},
	}
	// PID 446 runs vram's allocator.
	a.Processes[0].Process.Alloc = &statchan.Record{Figures: statchan.Figures{Allocated: 3 * gib, Reserved: 4*gib + 512*mib}}
	b := &gpu.Interval{
		Start: a.End, End: a.End.Add(10*time.Millisecond + 999*time.Microsecond), MemorySamples: 2,
		Devices: []gpu.DeviceStat{
			{Identity: a.Devices[0].Identity, Total: 150754820096, Used: stat(48905781248, 40315846656)},
			{Identity: a.Devices[1].Identity, Total: 150754820096, Used: stat(7)},
			{Identity: a.Devices[2].Identity, Total: 2 << 40},
		},
	}
	return []*gpu.Interval{a, b}
}

func TestWatchPrinterGolden(t *testing.T) {
	sim := gpu.HostInfo{Simulated: true, SimSeed: 42}
	tests := []struct {
		file      string
		format    string
		processes bool
		pids      []uint32
		info      gpu.HostInfo
		interval  time.Duration
	}{
		{"watch_table.golden", "table", false, nil, gpu.HostInfo{}, 10 * time.Millisecond},
		{"watch_table_processes.golden", "table", true, nil, sim, 10 * time.Millisecond},
		{"watch_table_pid.golden", "table", true, []uint32{8123, 99}, gpu.HostInfo{}, 10 * time.Millisecond},
		{"watch_csv.golden", "csv", true, nil, sim, 250 * time.Millisecond},
		{"watch_csv_memory.golden", "csv", false, nil, gpu.HostInfo{}, time.Hour},
		{"watch_json.golden", "json", true, nil, gpu.HostInfo{}, 10 * time.Millisecond},
		{"watch_json_pid.golden", "json", true, []uint32{446}, sim, 1500 * time.Millisecond},
		{"watch_json_memory.golden", "json", false, nil, gpu.HostInfo{}, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var out bytes.Buffer
			p := newWatchPrinter(&out, tt.format, tt.processes, tt.pids, tt.info, tt.interval)
			if err := p.header(); err != nil {
				t.Fatal(err)
			}
			for _, iv := range printIntervals() {
				iv.Simulated = tt.info.Simulated
				if err := p.print(iv); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join("testdata", tt.file)
			if *updatePrint {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -update-print writes it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s differs\n--- got\n%s\n--- want\n%s", tt.file, out.Bytes(), want)
			}
		})
	}
}
