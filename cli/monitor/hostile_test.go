package monitor_test

import (
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/gpu/gputest"
)

// hostileArgs is the command line of fixture process 8000 in
// gpu/testdata/proc: python3 -c with a multi-line program, and an argument
// that would clear the screen, set the window title and change colours.
var hostileArgs = []string{"python3", "-c", "import os, time, torch\nkeep = []\nprint(\"ready\", os.getpid())\n\ttime.sleep(60)\r\n", "--tag=\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9bK\x7f"}

// hostileEnv is the mock host with process 8000 holding 256 MiB on GPU 1,
// the only GPU shown.
func hostileEnv() func() (gpu.Host, error) {
	return func() (gpu.Host, error) {
		s := gputest.MockServer()
		dev := s.Devices[1].(*dgxa100.Device)
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 8000, UsedGpuMemory: 256 << 20}}, nvml.SUCCESS
		}
		return gpu.NewNVML(s)
	}
}

// controlFree fails on any byte of out, other than the newlines that end
// lines, that a terminal could act on: C0 controls and, for text output
// (all), DEL and the bytes of C1 controls, raw or UTF-8 encoded. JSON
// escapes only the C0 controls and invalid bytes, as encoding/json does:
// DEL and U+0080 to U+009F are valid JSON string characters.
func controlFree(t *testing.T, what, out string, all bool) {
	t.Helper()
	for i := 0; i < len(out); i++ {
		c := out[i]
		c1 := c == 0x7f || c == 0x9b || (c == 0xc2 && i+1 < len(out) && out[i+1] >= 0x80 && out[i+1] <= 0x9f)
		if (c < 0x20 && c != '\n') || (all && c1) {
			t.Errorf("%s: control byte %#x at %d: %q", what, c, i, out[max(0, i-20):min(len(out), i+20)])
			return
		}
	}
}

func TestStatusHostileCommandLine(t *testing.T) {
	e := testEnv(map[string]string{"CUDA_VISIBLE_DEVICES": "1"}, hostileEnv())

	out, errs, code := run(t, e, "status", "--wide")
	if code != 0 {
		t.Fatalf("text: exit %d: %s", code, errs)
	}
	controlFree(t, "text", out, true)
	golden(t, "status_hostile.txt", out)
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "8000 ") {
			row = l
		}
	}
	want := `python3 -c import os, time, torch\nkeep = []\nprint("ready", os.getpid())\n\ttime.sleep(60)\r\n --tag=\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9bK\x7f`
	if !strings.HasSuffix(row, want) {
		t.Errorf("process row = %q, want it to end with the escaped command line %q", row, want)
	}

	out, _, code = run(t, e, "status", "--csv")
	controlFree(t, "csv", out, true)
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if code != 0 || err != nil {
		t.Fatalf("csv: exit %d, %v", code, err)
	}
	var found bool
	for _, r := range rows {
		if r[2] == "process" && r[6] == "8000" {
			found = true
			if r[15] != want || r[7] != "alice" {
				t.Errorf("csv row = %q", r)
			}
		}
	}
	if !found {
		t.Errorf("csv has no row for pid 8000: %q", rows)
	}

	// JSON keeps the exact strings; encoding/json escapes them.
	out, _, code = run(t, e, "status", "--json")
	controlFree(t, "json", out, false)
	var v struct {
		Processes []struct {
			PID     uint32   `json:"pid"`
			Command string   `json:"command"`
			Cmdline []string `json:"cmdline"`
			Cgroup  string   `json:"cgroup"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 {
		t.Fatalf("json: exit %d, %v", code, err)
	}
	if len(v.Processes) != 1 {
		t.Fatalf("json processes = %+v", v.Processes)
	}
	p := v.Processes[0]
	// The raw 0x9b byte is not UTF-8: JSON carries it as U+FFFD, as
	// encoding/json does for every invalid byte.
	exact := strings.ReplaceAll(strings.Join(hostileArgs, " "), "\x9b", "\uFFFD")
	if p.PID != 8000 || p.Command != exact || len(p.Cmdline) != len(hostileArgs) || p.Cmdline[2] != hostileArgs[2] {
		t.Errorf("json process = %#v, want command %q", p, exact)
	}
	if p.Cgroup != "/user.slice/user-1000.slice/evil\x1b[5mblink.scope" {
		t.Errorf("json cgroup = %q", p.Cgroup)
	}
}

func TestWatchJSONHostileCommandLine(t *testing.T) {
	e := testEnv(nil, hostileEnv())
	e.Now = time.Now // watch runs on the real clock
	out, errs, code := run(t, e, "watch", "--gpu", "1", "--interval", "20ms", "--process-interval", "20ms", "--count", "1", "--json", "--processes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	controlFree(t, "watch json", out, false)
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("%d lines, want 1: %q", n, out)
	}
	var l struct {
		Processes []struct {
			PID     uint32 `json:"pid"`
			Command string `json:"command"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatal(err)
	}
	exact := strings.ReplaceAll(strings.Join(hostileArgs, " "), "\x9b", "\uFFFD")
	if len(l.Processes) != 1 || l.Processes[0].Command != exact {
		t.Errorf("processes = %#v, want command %q", l.Processes, exact)
	}
}
