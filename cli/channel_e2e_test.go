package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/cli/cmdutil"
)

// buildLibvram builds libvram.so into a temporary folder.
func buildLibvram(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the shared library")
	}
	lib := filepath.Join(t.TempDir(), "libvram.so")
	out, err := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "../cmd/libvram").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return lib
}

func python(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed: the test runs a process on libvram through ctypes")
	}
	return py
}

// channelFactory is the real world's factory with the channel in dir and
// the job's output captured.
func channelFactory(dir string) (*cmdutil.Factory, *bytes.Buffer, *bytes.Buffer) {
	f := cmdutil.New()
	f.ChannelDir = dir
	var out, errb bytes.Buffer
	f.In, f.Out, f.Err = strings.NewReader(""), &out, &errb
	return f, &out, &errb
}

const miB = 1 << 20

// TestChannelEndToEnd runs a real process on libvram's simulated device
// and reads its figures from outside: vram status --simulate and vram run
// --simulate.
func TestChannelEndToEnd(t *testing.T) {
	lib, py := buildLibvram(t), python(t)
	dir := t.TempDir()
	t.Setenv("VRAM_CHANNEL_DIR", dir) // for the processes started here
	t.Setenv("VRAM_LIBRARY", lib)

	t.Run("status", func(t *testing.T) {
		job := exec.Command(py, "testdata/channel_job.py", "hold")
		job.Env = append(os.Environ(), "VRAM_DEVICE=sim")
		stdin, _ := job.StdinPipe()
		stdout, _ := job.StdoutPipe()
		job.Stderr = os.Stderr
		if err := job.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stdin.Close(); job.Wait() }()
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("the job said %q: %v", line, err)
		}
		// The figures follow within the library's period (100 ms): ask
		// until they show the job's allocations.
		type proc struct {
			PID       int    `json:"pid"`
			GPU       int    `json:"gpu"`
			Memory    uint64 `json:"memory_bytes"`
			Allocated *int64 `json:"allocated_bytes"`
			Reserved  *int64 `json:"reserved_bytes"`
		}
		var st struct {
			Processes []proc `json:"processes"`
		}
		var out *bytes.Buffer
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			f, o, errb := channelFactory(dir)
			if code := Run(f, []string{"status", "--simulate", "1", "--json"}); code != 0 {
				t.Fatalf("status: exit %d: %s", code, errb)
			}
			out = o
			if err := json.Unmarshal(out.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
			done := false
			for _, p := range st.Processes {
				done = done || p.PID == job.Process.Pid && p.Allocated != nil && *p.Allocated > 0
			}
			if done || time.Now().After(deadline) {
				break
			}
		}
		found, marked := false, 0
		for _, p := range st.Processes {
			switch {
			case p.PID == job.Process.Pid:
				found = true
				if p.Allocated == nil || *p.Allocated != 192*miB || p.Reserved == nil || *p.Reserved != 256*miB || p.Memory <= 256*miB {
					t.Errorf("the job in vram status: %+v", p)
				}
			case p.Allocated == nil && p.Reserved == nil:
				marked++
			}
		}
		if !found || marked == 0 {
			t.Fatalf("job found %v, %d synthetic processes with null figures: %s", found, marked, out)
		}
		f, out, errb := channelFactory(dir)
		if code := Run(f, []string{"status", "--simulate", "1"}); code != 0 || !strings.Contains(out.String(), "192.00 MiB") {
			t.Fatalf("status table: exit %d: %s%s", code, out, errb)
		}
	})

	t.Run("run", func(t *testing.T) {
		f, out, errb := channelFactory(dir)
		code := Run(f, []string{"run", "--simulate", "1", "--interval", "20ms", "--json", "--", py, "testdata/channel_job.py", "sleep"})
		if code != 0 {
			t.Fatalf("run: exit %d: %s", code, errb)
		}
		// The job's own "ready" comes first on stdout, then the JSON.
		js := out.String()[strings.Index(out.String(), "{"):]
		var rep struct {
			Allocator *struct {
				Processes     int    `json:"processes"`
				PeakAllocated uint64 `json:"peak_allocated_bytes"`
				PeakReserved  uint64 `json:"peak_reserved_bytes"`
			} `json:"allocator"`
			Leak struct {
				Series string `json:"series"`
			} `json:"leak"`
			Samples []struct {
				Bytes     uint64  `json:"bytes"`
				Allocated *uint64 `json:"allocated_bytes"`
				Reserved  *uint64 `json:"reserved_bytes"`
			} `json:"samples"`
		}
		if err := json.Unmarshal([]byte(js), &rep); err != nil {
			t.Fatalf("%v: %s", err, js)
		}
		if a := rep.Allocator; a == nil || a.Processes != 1 || a.PeakAllocated < 192*miB || a.PeakReserved != 256*miB {
			t.Fatalf("allocator figures %+v\n%s", rep.Allocator, errb)
		}
		if rep.Leak.Series != "allocated" {
			t.Errorf("leak verdict on %q, want allocated", rep.Leak.Series)
		}
		held := 0
		for _, s := range rep.Samples {
			if s.Allocated != nil && *s.Allocated == 192*miB && *s.Reserved == 256*miB && s.Bytes > 256*miB {
				held++
			}
		}
		if held < 10 {
			t.Fatalf("%d samples show the held figures beside the driver's; report on stderr:\n%s", held, errb)
		}
		if !strings.Contains(errb.String(), "vram's allocator in 1 process") {
			t.Errorf("the text report does not mention the allocator:\n%s", errb)
		}
	})
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("channel files outlived their processes: %v", left)
	}
}
