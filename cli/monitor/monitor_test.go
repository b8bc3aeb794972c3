package monitor_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/cli"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/cli/monitor"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/gpu/gputest"
	"github.com/vramhq/vram/internal/units"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixtureNow is a day after the fixture proc tree's boot time.
var fixtureNow = time.Unix(1780000000, 0).Add(24 * time.Hour).UTC()

var users = map[uint32]string{0: "root", 1000: "alice", 1001: "bob", 1002: "svc-infer"}

// testEnv is a host with the go-nvml mock (8 A100s, processes on GPU 0) and
// the fake proc tree of package gpu.
func testEnv(vars map[string]string, open func() (gpu.Host, error)) *cmdutil.Factory {
	if open == nil {
		open = func() (gpu.Host, error) { return gpu.NewNVML(gputest.MockServer()) }
	}
	f := cmdutil.New()
	f.OpenNVML = open
	f.ProcRoot = "../../gpu/testdata/proc"
	f.LookupUser = func(uid uint32) (string, error) {
		if n, ok := users[uid]; ok {
			return n, nil
		}
		return "", fmt.Errorf("no user %d", uid)
	}
	f.Now = func() time.Time { return fixtureNow }
	f.Getenv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	f.Hostname = func() (string, error) { return "node-7", nil }
	f.ChannelDir = "off" // tests that read a channel name theirs
	return f
}

func run(t *testing.T, f *cmdutil.Factory, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	f.In, f.Out, f.Err = strings.NewReader(""), &out, &errb
	code = cli.Run(f, args)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestStatusGolden(t *testing.T) {
	tests := []struct {
		file string
		vars map[string]string
		args []string
	}{
		{"status.txt", map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, []string{"status"}},
		{"status.json", map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, []string{"status", "--json"}},
		{"status.csv", map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, []string{"status", "--csv"}},
		{"status_accounting.txt", nil, []string{"status", "--gpu", "0,1", "--accounting"}},
		{"status_accounting.json", nil, []string{"status", "--gpu", "0", "--accounting", "--json"}},
		{"status_simulated.txt", nil, []string{"status", "--simulate", "2", "--seed", "3"}},
		{"status_simulated.json", nil, []string{"status", "--simulate", "1", "--seed", "3", "--json"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			out, errs, code := run(t, testEnv(tt.vars, nil), tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			golden(t, tt.file, out)
		})
	}
}

func TestStatusJSONSchema(t *testing.T) {
	out, _, code := run(t, testEnv(nil, nil), "status", "--json", "--gpu", "0")
	if code != 0 {
		t.Fatal(code)
	}
	var v struct {
		Schema    string `json:"schema"`
		Time      string `json:"time"`
		Simulated bool   `json:"simulated"`
		Devices   []struct {
			Memory struct {
				Total, Used, Free, Reserved, Unattributed uint64
			} `json:"memory"`
		} `json:"devices"`
		Processes []struct {
			PID         uint32   `json:"pid"`
			MemoryBytes uint64   `json:"memory_bytes"`
			Flags       []string `json:"flags"`
			StartTime   string   `json:"start_time"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != monitor.StatusSchema || v.Simulated || len(v.Devices) != 1 || len(v.Processes) != 6 {
		t.Fatalf("decoded = %+v", v)
	}
	if _, err := time.Parse(time.RFC3339, v.Time); err != nil {
		t.Errorf("time not RFC 3339: %v", err)
	}
	if v.Processes[0].PID != 1000 || v.Processes[0].MemoryBytes != 12<<30 {
		t.Errorf("first process = %+v", v.Processes[0])
	}
	if _, err := time.Parse(time.RFC3339, v.Processes[0].StartTime); err != nil {
		t.Errorf("start time: %v", err)
	}
}

func TestStatusCSVParses(t *testing.T) {
	out, _, _ := run(t, testEnv(nil, nil), "status", "--csv", "--simulate", "2")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 5 || rows[0][2] != "record" || rows[1][1] != "true" {
		t.Errorf("rows = %q", rows[:2])
	}
}

func TestNoDriver(t *testing.T) {
	noLib := func() (gpu.Host, error) {
		s := gputest.MockServer()
		s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
		return gpu.NewNVML(s)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"watch", "--count", "1"}} {
		out, errs, code := run(t, testEnv(nil, noLib), args...)
		if code != 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q", args, code, out)
		}
		want := "vram: NVML library libnvidia-ml.so.1 not found: no NVIDIA driver on this host (nvmlInit: ERROR_LIBRARY_NOT_FOUND); `vram " + args[0] + " --simulate N` runs on a simulated host of N GPUs\n"
		if errs != want {
			t.Errorf("%v: stderr = %q", args, errs)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		// The watch cases that a bug could let run stop after one line.
		{[]string{"watch", "--interval", "5ms"}, "--interval 5ms: must be between 10ms and 1h"},
		{[]string{"watch", "--interval", "2h"}, "--interval 2h0m0s: must be between 10ms and 1h"},
		{[]string{"watch", "--format", "xml"}, `--format "xml": must be table, csv or json`},
		{[]string{"watch", "--pid", "1", "--memory-only"}, "--pid needs process sampling"},
		{[]string{"watch", "--processes", "--memory-only", "--count", "1", "--interval", "10ms"}, "--processes needs process sampling: it cannot be used with --memory-only"},
		{[]string{"watch", "--memory-only", "--process-interval", "10ms", "--count", "1", "--interval", "10ms"}, "--process-interval sets how often processes are sampled: it cannot be used with --memory-only"},
		{[]string{"watch", "--format", "table", "--json", "--count", "1", "--interval", "10ms"}, "--format table and --json cannot be used together"},
		{[]string{"watch", "--format", "json", "--csv", "--count", "1", "--interval", "10ms"}, "--format json and --csv cannot be used together"},
		{[]string{"watch", "--json", "--csv"}, "--json and --csv cannot be used together"},
		{[]string{"watch", "--pid", "-5", "--count", "1", "--interval", "10ms"}, "--pid -5: not a process ID (PIDs are 1 to 4194304)"},
		{[]string{"watch", "--pid", "1000,0", "--count", "1", "--interval", "10ms"}, "--pid 0: not a process ID"},
		{[]string{"watch", "--pid", "5000000000", "--count", "1", "--interval", "10ms"}, "--pid 5000000000: not a process ID"},
		{[]string{"watch", "--sample-interval", "2s"}, "--sample-interval 2s: must be between 1ms and the interval (1s)"},
		{[]string{"status", "--json", "--csv"}, "--json and --csv cannot be used together"},
		{[]string{"status", "--gpu", "9"}, "--gpu 9: this host has 8 GPUs (0-7)"},
		{[]string{"status", "--simulate", "-1"}, "--simulate -1: must be between 1 and 64 GPUs"},
		{[]string{"status", "--gpu", "0", "--all-gpus"}, "--gpu and --all-gpus: choose one"},
		{[]string{"watch", "--gpu", "0", "--all-gpus"}, "--gpu and --all-gpus: choose one"},
		{[]string{"status", "--idle-window", "0s"}, "--idle-window 0s: must be positive"},
		{[]string{"watch", "--interval", "fast"}, `invalid value "fast" for --interval: want a duration`},
	}
	for _, tt := range tests {
		_, errs, code := run(t, testEnv(nil, nil), tt.args...)
		if code != 2 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tt.args, code, errs, tt.want)
		}
	}
}

// A short format flag that agrees with --format is not a conflict.
func TestWatchFormatAgreeing(t *testing.T) {
	e := testEnv(nil, nil)
	e.Now = time.Now
	out, errs, code := run(t, e, "watch", "--gpu", "0", "--interval", "10ms", "--count", "1", "--memory-only", "--format", "json", "--json")
	if code != 0 || !strings.HasPrefix(out, `{"schema":"`+monitor.WatchSchema) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestVisibleDevicesNote(t *testing.T) {
	out, errs, _ := run(t, testEnv(map[string]string{"CUDA_VISIBLE_DEVICES": "3,MIG-abc"}, nil), "status")
	if !strings.Contains(out, "showing GPUs 3 of 8 (CUDA_VISIBLE_DEVICES=3,MIG-abc); --all-gpus shows all") {
		t.Errorf("no selection note in:\n%s", out)
	}
	if !strings.Contains(errs, "MIG instance") {
		t.Errorf("no MIG warning: %q", errs)
	}
	out, _, _ = run(t, testEnv(map[string]string{"CUDA_VISIBLE_DEVICES": "3"}, nil), "status", "--all-gpus")
	if strings.Contains(out, "showing GPUs") || !strings.Contains(out, "\n7  ") {
		t.Errorf("--all-gpus did not show all:\n%s", out)
	}
}

func TestWatchFormats(t *testing.T) {
	e := testEnv(nil, nil)
	e.Now = time.Now // watch runs on the real clock
	out, errs, code := run(t, e, "watch", "--simulate", "2", "--interval", "20ms", "--count", "3", "--processes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "# SIMULATED HOST") || !strings.HasPrefix(lines[1], "TIME") {
		t.Errorf("table header = %q", lines[:2])
	}
	out, _, code = run(t, e, "watch", "--gpu", "0", "--interval", "20ms", "--process-interval", "20ms", "--count", "2", "--csv", "--pid", "1000")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil || len(rows) != 5 { // header + (device + pid 1000) x 2
		t.Fatalf("csv: exit %d err %v rows %q", code, err, rows)
	}
	if rows[2][3] != "1000" || rows[2][6] != fmt.Sprint(12<<30) || rows[1][1] != "false" {
		t.Errorf("csv rows = %q", rows)
	}
	out, _, code = run(t, e, "watch", "--gpu", "0", "--interval", "10ms", "--count", "3", "--json", "--memory-only")
	dec := json.NewDecoder(strings.NewReader(out))
	n := 0
	for dec.More() {
		var l struct {
			Schema        string `json:"schema"`
			MemorySamples int    `json:"memory_samples"`
			Devices       []struct {
				MaxBytes uint64 `json:"max_bytes"`
			} `json:"devices"`
		}
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if l.Schema != monitor.WatchSchema || len(l.Devices) != 1 || l.Devices[0].MaxBytes != 30<<30 || l.MemorySamples != 2 {
			t.Errorf("line %d = %+v", n, l)
		}
		n++
	}
	if code != 0 || n != 3 {
		t.Errorf("json lines: exit %d, %d lines", code, n)
	}
}

// Sizes in status and watch tables are units.FormatBytes's, as in every
// other vram command (reclaim, run, replay): one amount reads the same
// everywhere.
func TestTablesUseUnitsFormat(t *testing.T) {
	jsonOut, errs, code := run(t, testEnv(nil, nil), "status", "--json", "--gpu", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Devices []struct {
			Memory struct {
				Total uint64 `json:"total_bytes"`
				Used  uint64 `json:"used_bytes"`
				Free  uint64 `json:"free_bytes"`
			} `json:"memory"`
		} `json:"devices"`
		Processes []struct {
			PID         uint32 `json:"pid"`
			MemoryBytes uint64 `json:"memory_bytes"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(jsonOut), &v); err != nil {
		t.Fatal(err)
	}
	text, _, _ := run(t, testEnv(nil, nil), "status", "--gpu", "0")
	rows := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = l
		}
	}
	d := v.Devices[0].Memory
	for _, b := range []uint64{d.Used, d.Free, d.Total} {
		if want := units.FormatBytes(b); !strings.Contains(rows["0"], want) {
			t.Errorf("GPU 0 row %q does not show %q", rows["0"], want)
		}
	}
	for _, p := range v.Processes {
		row := rows[fmt.Sprint(p.PID)]
		if want := units.FormatBytes(p.MemoryBytes); !strings.Contains(row, "  "+want+"  ") {
			t.Errorf("PID %d row %q does not show %q", p.PID, row, want)
		}
	}

	e := testEnv(nil, nil)
	e.Now = time.Now
	out, errs, code := run(t, e, "watch", "--gpu", "0", "--interval", "10ms", "--count", "1", "--memory-only")
	if code != 0 {
		t.Fatalf("watch: exit %d: %s", code, errs)
	}
	if want := units.FormatBytes(30 << 30); !strings.Contains(out, want) {
		t.Errorf("watch table does not show %q:\n%s", want, out)
	}
}

// channelFixture is a statistics channel where PID 1000 of the fixture
// (start time 60000 in gpu/testdata/proc) runs vram's allocator on the
// mock's GPU 0, and PID 2000 published a file of another PID's start time
// (a stale file: ignored).
func channelFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	uuid := [16]byte{0, 0, 0xa1, 0, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x66, 0x66}
	for _, h := range []statchan.Header{
		{PID: 1000, Device: 0, StartTicks: 60000, UUID: uuid, UUIDKnown: true, Backend: "cuda", Version: "test", Config: "page_mapped:true", Interval: 100 * time.Millisecond},
		{PID: 2000, Device: 0, StartTicks: 1, UUID: uuid, UUIDKnown: true, Backend: "cuda"},
	} {
		w, err := statchan.Create(dir, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		w.Publish(statchan.Figures{Allocated: 7 << 30, AllocatedPeak: 9 << 30, Reserved: 10 << 30, ReservedPeak: 11 << 30,
			Active: 7 << 30, ActivePeak: 9 << 30, InactiveSplit: 1 << 30, InactiveSplitPeak: 1 << 30, Requested: 7 << 30, RequestedPeak: 9 << 30,
			FreeCached: 3 << 30, LargestFree: 2 << 30, Allocations: 120, Segments: 4, NumOOMs: 1, NumAllocRetries: 2,
			Cap: 40 << 30, DeviceTotal: 80 << 30, MaxSplitSize: -1}, fixtureNow)
	}
	return dir
}

func TestStatusAllocatorGolden(t *testing.T) {
	dir := channelFixture(t)
	for _, tt := range []struct {
		file string
		args []string
	}{
		{"status_allocator.txt", []string{"status", "--gpu", "0"}},
		{"status_allocator.json", []string{"status", "--gpu", "0", "--json"}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			f := testEnv(nil, nil)
			f.ChannelDir = dir
			out, errs, code := run(t, f, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			golden(t, tt.file, out)
		})
	}
}
