package replay_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc/cudadev"
	"github.com/vramhq/vram/cli"
	"github.com/vramhq/vram/cli/cmdutil"
	replaycmd "github.com/vramhq/vram/cli/replay"
	"github.com/vramhq/vram/cuda"
	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/internal/units"
)

func vram(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = cli.Main(append([]string{"replay"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTable(t *testing.T) {
	code, out, errs := vram("testdata/small.csv")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	lines := strings.Split(out, "\n")
	head := strings.Fields(lines[0])
	want := []string{"TRACE", "POLICY", "OPS", "PEAK", "LIVE", "PEAK", "RESERVED", "RES/LIVE", "MIN", "CAPACITY", "MIN/LIVE", "DRIVER", "CALLS", "NS/OP", "P50", "P99", "TOTAL", "S", "LEAKED"}
	if !slices.Equal(head, want) {
		t.Errorf("header %q", lines[0])
	}
	row := strings.Fields(lines[1])
	// small default 5 ops, 6 MiB live, 22 MiB reserved, 3.667, min capacity
	// 22-23 MiB, 2 driver calls, p50, p99, total seconds, 2 MiB leaked.
	if len(row) != 17 || row[0] != "small" || row[1] != "default" || row[2] != "5" || row[3]+row[4] != "6.00MiB" ||
		row[5]+row[6] != "22.00MiB" || row[7] != "3.667" || row[11] != "2" || row[15]+row[16] != "2.00MiB" {
		t.Errorf("row %q", lines[1])
	}
	if !strings.Contains(out, "on the simulated device of 141.00 GiB") {
		t.Errorf("no device line in\n%s", out)
	}
	// The notes go to stderr: one skipped failure, one unknown free.
	if !strings.Contains(errs, "skipped 1 allocate failure records") || !strings.Contains(errs, "1 frees of pointers not allocated") {
		t.Errorf("stderr %q", errs)
	}
}

var jsonKeys = []string{"schema", "trace", "policy", "ops", "peak_live_bytes", "peak_reserved_bytes", "reserved_over_live",
	"min_capacity_bytes", "min_capacity_over_live", "device_calls", "device_calls_vmm", "device_calls_by_kind", "ns_per_op_p50", "ns_per_op_p99", "total_seconds", "leaked_bytes",
	"device_leaked_bytes", "device_delta_bytes", "device_check", "verify", "verified_allocations", "verify_mismatches", "out_of_memory", "oom_record", "oom_request_bytes"}

func TestJSONLines(t *testing.T) {
	code, out, errs := vram("--json", "--policy", "all", "testdata/small.csv", "synth:batchwalk:end=2")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	jsondoc.TestLines(t, "vram replay --json", []byte(out))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines, want 2 traces × 5 policies:\n%s", len(lines), out)
	}
	var policies []string
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		want := slices.Sorted(slices.Values(jsonKeys))
		if !slices.Equal(keys, want) {
			t.Errorf("keys %v, want %v", keys, want)
		}
		policies = append(policies, m["policy"].(string))
		if m["min_capacity_bytes"] == nil {
			t.Errorf("no min capacity in %s", l)
		}
	}
	if !slices.Equal(policies[:5], []string{"default", "roundup4", "maxsplit", "gc", "paged"}) {
		t.Errorf("policies in order %v", policies)
	}
	var first map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	const mib = 1 << 20
	for k, v := range map[string]float64{"ops": 5, "peak_live_bytes": 6 * mib, "peak_reserved_bytes": 22 * mib, "device_calls": 2, "leaked_bytes": 2 * mib, "device_leaked_bytes": 0} {
		if first[k] != v {
			t.Errorf("%s = %v, want %v", k, first[k], v)
		}
	}
	if first["out_of_memory"] != false || first["oom_record"] != nil || first["oom_request_bytes"] != nil {
		t.Errorf("a trace that fit: out_of_memory %v, oom_record %v, oom_request_bytes %v", first["out_of_memory"], first["oom_record"], first["oom_request_bytes"])
	}
	if mc := first["min_capacity_bytes"].(float64); mc < 22*mib || mc >= 24*mib {
		t.Errorf("min_capacity_bytes %v, want in [22, 24) MiB", mc)
	}
}

func TestJSONWithoutMinCapacity(t *testing.T) {
	code, out, errs := vram("--json", "--no-min-capacity", "testdata/small.csv")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(out, `"min_capacity_bytes":null,"min_capacity_over_live":null`) {
		t.Errorf("output %s", out)
	}
}

func TestProgress(t *testing.T) {
	code, _, errs := vram("--progress", "testdata/small.csv")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"vram replay: small default: replaying", "bisection pass 1: cap 22.00 MiB completes"} {
		if !strings.Contains(errs, want) {
			t.Errorf("no %q in stderr:\n%s", want, errs)
		}
	}
}

func TestOutOfMemory(t *testing.T) {
	code, out, errs := vram("--capacity", "256MiB", "synth:batchwalk")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(out, "did not fit") || !strings.Contains(errs, "ran out of memory at record") ||
		!strings.Contains(errs, "vram: 1 of 1 replays ran out of memory on the simulated device of 256.00 MiB") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out, errs)
	}
}

// Sizes are printed by units.FormatBytes, in every unit a uint64 reaches.
func TestSizesInTheTable(t *testing.T) {
	for _, tc := range []struct{ capacity, want string }{
		{"9223372036854775808", "on the simulated device of 8.00 EiB"},
		{"3PiB", "on the simulated device of 3.00 PiB"},
		{"40GiB", "on the simulated device of 40.00 GiB"},
	} {
		code, out, errs := vram("--no-min-capacity", "--capacity", tc.capacity, "testdata/small.csv")
		if code != 0 {
			t.Fatalf("--capacity %s: exit %d, stderr %q", tc.capacity, code, errs)
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("--capacity %s: no %q in\n%s", tc.capacity, tc.want, out)
		}
		if !strings.Contains(out, units.FormatBytes(22<<20)) {
			t.Errorf("--capacity %s: the reserved peak is not printed as %q:\n%s", tc.capacity, units.FormatBytes(22<<20), out)
		}
	}
}

// --json says that a trace ran out of memory, and where: the record and
// the size the stderr note names.
func TestOutOfMemoryJSON(t *testing.T) {
	code, out, errs := vram("--json", "--capacity", "256MiB", "synth:batchwalk")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var rec struct {
		OutOfMemory     bool    `json:"out_of_memory"`
		OOMRecord       *int64  `json:"oom_record"`
		OOMRequestBytes *uint64 `json:"oom_request_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if !rec.OutOfMemory || rec.OOMRecord == nil || rec.OOMRequestBytes == nil || *rec.OOMRecord < 1 || *rec.OOMRequestBytes == 0 {
		t.Fatalf("out_of_memory %v, oom_record %v, oom_request_bytes %v in %s", rec.OutOfMemory, rec.OOMRecord, rec.OOMRequestBytes, out)
	}
	note := fmt.Sprintf("ran out of memory at record %d (%s)", *rec.OOMRecord, units.FormatBytes(*rec.OOMRequestBytes))
	if !strings.Contains(errs, note) {
		t.Errorf("stderr does not say %q:\n%s", note, errs)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "name at least one trace"},
		{[]string{"--policy", "fast", "x"}, 2, `--policy: unknown policy "fast" (known: default, roundup4, maxsplit, gc, paged, or all)`},
		{[]string{"--capacity", "lots", "x"}, 2, "--capacity:"},
		{[]string{"--capacity", "0", "x"}, 2, "--capacity: must be more than 0"},
		{[]string{"--device", "tpu", "x"}, 2, `--device: unknown device "tpu"`},
		{[]string{"--device", "cuda", "--capacity", "1GiB", "x"}, 2, "--capacity applies to --device sim only"},
		{[]string{"--nope", "x"}, 2, "unknown flag: --nope"},
		{[]string{"synth:nope"}, 2, `unknown generator "nope"`},
		{[]string{"synth:random:allocations=0"}, 2, "synth:random:allocations=0: allocations=0: must be at least 1"},
		{[]string{"synth:batchwalk:steps=0"}, 2, "steps=0: must be at least 1"},
		{[]string{"synth:kvcache:block=0"}, 2, "block=0: must be at least 1 B"},
		{[]string{"synth:random:p=2"}, 2, "p=2: must be in (0, 1]"},
		{[]string{"synth:random:seed=1,seed=2"}, 2, "seed is given twice (seed=1 and seed=2)"},
		{[]string{"testdata/missing.csv.gz"}, 1, "open testdata/missing.csv.gz: no such file or directory"},
		{[]string{"testdata/bad.csv"}, 1, "testdata/bad.csv: rmm: line 3: column Size: bad size"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := vram(tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if !strings.HasPrefix(errs, "vram: ") || !strings.Contains(errs, tt.msg) {
				t.Errorf("stderr %q, want a line containing %q", errs, tt.msg)
			}
			if strings.Count(errs, "\n") != 1 || strings.Contains(errs, "goroutine") {
				t.Errorf("stderr is not one line: %q", errs)
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
		})
	}
}

func TestCUDAWithoutDriver(t *testing.T) {
	if d, err := cudadev.Open(0); err == nil {
		d.Close()
		t.Skip("a CUDA device is present")
	} else if !errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("the driver is present but no device opens: %v", err)
	}
	code, _, errs := vram("--device", "cuda", "testdata/small.csv")
	if code != 1 || !strings.Contains(errs, "--device cuda: no CUDA driver on this machine") || strings.Count(errs, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

func TestVerifyFlag(t *testing.T) {
	code, out, errs := vram("--json", "--no-min-capacity", "--verify", "--policy", "default,paged", "synth:random:seed=3,allocations=500")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if m["verify"] != true || m["verified_allocations"].(float64) == 0 || m["verify_mismatches"] != 0.0 || m["device_leaked_bytes"] != 0.0 {
			t.Errorf("verified run: %s", l)
		}
		if m["policy"] == "paged" && m["device_calls_vmm"].(float64) == 0 {
			t.Errorf("paged policy counted no virtual-memory calls: %s", l)
		}
	}
}

// device_calls_by_kind splits device_calls by driver function, under the
// PyTorch harness's key names.
func TestJSONCallsByKind(t *testing.T) {
	code, out, errs := vram("--json", "--no-min-capacity", "--policy", "default,paged", "testdata/small.csv", "synth:random:seed=3,allocations=500")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	kinds := []string{"malloc", "free", "reserve", "address_free", "create", "release", "map", "set_access", "unmap"}
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct {
			Policy string             `json:"policy"`
			Calls  float64            `json:"device_calls"`
			VMM    float64            `json:"device_calls_vmm"`
			ByKind map[string]float64 `json:"device_calls_by_kind"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if got := slices.Sorted(maps.Keys(m.ByKind)); !slices.Equal(got, slices.Sorted(slices.Values(kinds))) {
			t.Fatalf("device_calls_by_kind keys %v, want %v", got, kinds)
		}
		var sum float64
		for _, k := range kinds {
			sum += m.ByKind[k]
		}
		if sum != m.Calls || m.Calls-m.ByKind["malloc"]-m.ByKind["free"] != m.VMM {
			t.Errorf("by kind %v does not add up to device_calls %v, device_calls_vmm %v", m.ByKind, m.Calls, m.VMM)
		}
		switch {
		case i == 0 && !maps.Equal(m.ByKind, map[string]float64{"malloc": 2, "free": 0, "reserve": 0, "address_free": 0, "create": 0, "release": 0, "map": 0, "set_access": 0, "unmap": 0}):
			// small.csv under the default policy: two segments, a small and a large one.
			t.Errorf("small default: by kind %v, want 2 mallocs and nothing else", m.ByKind)
		case m.Policy == "paged" && (m.ByKind["create"] == 0 || m.ByKind["map"] == 0 || m.ByKind["reserve"] == 0):
			t.Errorf("%s paged: by kind %v, want address reservations, creates and maps", l, m.ByKind)
		}
	}
}

// --stream changes where the timed pass reads the trace, not what it finds.
func TestStreamFlag(t *testing.T) {
	var figures [2]map[string]any
	for i, args := range [][]string{
		{"--json", "--no-min-capacity", "testdata/small.csv"},
		{"--json", "--no-min-capacity", "--stream", "testdata/small.csv"},
	} {
		code, out, errs := vram(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errs)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &m); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := slices.Sorted(slices.Values(jsonKeys)); !slices.Equal(keys, want) {
			t.Errorf("%q: keys %v, want %v", args, keys, want)
		}
		for _, k := range []string{"ns_per_op_p50", "ns_per_op_p99", "total_seconds"} {
			delete(m, k)
		}
		figures[i] = m
	}
	if !reflect.DeepEqual(figures[0], figures[1]) {
		t.Errorf("in memory %v\nstreamed  %v", figures[0], figures[1])
	}
}

// Every trace file that replay's --help and docs/replay.md use in their
// examples is in the repository, so that the examples run in a fresh
// clone (from its root).
func TestExamplePathsExist(t *testing.T) {
	cmd := replaycmd.NewCmd(cmdutil.New())
	doc, err := os.ReadFile("../../docs/replay.md")
	if err != nil {
		t.Fatal(err)
	}
	// The docs' first block of commands is the one to copy.
	_, usage, _ := strings.Cut(string(doc), "```sh\n")
	usage, _, _ = strings.Cut(usage, "```")
	for _, src := range []struct{ name, text string }{{"--help", cmd.Example}, {"docs/replay.md", usage}} {
		n := 0
		for _, line := range strings.Split(src.text, "\n") {
			if !strings.Contains(line, "vram replay") {
				continue
			}
			line, _, _ = strings.Cut(line, "#")
			for _, arg := range strings.Fields(line) {
				arg = strings.Trim(arg, `'"`)
				if strings.HasPrefix(arg, "-") || strings.HasPrefix(arg, "synth:") || !strings.Contains(arg, "/") && !strings.Contains(arg, ".") {
					continue
				}
				if strings.HasSuffix(arg, "/vram") || arg == "vram" || strings.Contains(arg, "GiB") || strings.Contains(arg, ",") {
					continue // the binary, a size, a policy list
				}
				n++
				if filepath.IsAbs(arg) || strings.HasPrefix(filepath.Clean(arg), "..") {
					t.Errorf("%s: the example's trace %s is outside the repository", src.name, arg)
					continue
				}
				matches, err := filepath.Glob(filepath.Join("../..", arg))
				if err != nil || len(matches) == 0 {
					t.Errorf("%s: the example's trace %s is not in the repository", src.name, arg)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no example names a trace file", src.name)
		}
	}
}

// The example traces replay.
func TestExampleTracesReplay(t *testing.T) {
	files, _ := filepath.Glob("../../examples/traces/*")
	var traces []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".md") {
			traces = append(traces, f)
		}
	}
	if len(traces) == 0 {
		t.Fatal("no example traces")
	}
	code, out, errs := vram(append([]string{"--json", "--no-min-capacity"}, traces...)...)
	if code != 0 || strings.Count(out, "\n") != len(traces) {
		t.Errorf("exit %d, %d lines for %d traces; stderr %q", code, strings.Count(out, "\n"), len(traces), errs)
	}
}
