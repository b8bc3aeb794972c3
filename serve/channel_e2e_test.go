package serve

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
)

// TestDaemonReadsARealAllocator runs a real process on libvram's simulated
// device (plain python3 and ctypes, as cli/channel_e2e_test.go) and a
// daemon on a simulated GPU reading the statistics channel: its State,
// over HTTP, and its history carry the process's allocated and reserved
// bytes.
func TestDaemonReadsARealAllocator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the shared library")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed: the test runs a process on libvram through ctypes")
	}
	lib := filepath.Join(t.TempDir(), "libvram.so")
	if out, err := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, "../cmd/libvram").CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	dir := t.TempDir()
	job := exec.Command(py, "../cli/testdata/channel_job.py", "hold")
	job.Env = append(os.Environ(), "VRAM_DEVICE=sim", "VRAM_CHANNEL_DIR="+dir, "VRAM_LIBRARY="+lib)
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

	op, err := gpu.Open(gpu.OpenOptions{Simulate: 1, Seed: 3, ChannelDir: dir, RemoveStaleChannel: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig()
	d, err := New(context.Background(), Options{Config: cfg, Opened: op, DB: filepath.Join(t.TempDir(), "h.db"), Logger: slog.New(slog.DiscardHandler), NoXid: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		d.Close()
	}()
	srv := httptest.NewServer(api.Handler(d, api.Options{}))
	defer srv.Close()
	e := &runEnv{srv: srv}

	// The library publishes every 100 ms: ask until the figures show the
	// job's allocations (192 MiB allocated, 256 MiB reserved).
	const mib = 1 << 20
	pid := uint32(job.Process.Pid)
	var mine *api.Process
	waitFor(t, "the job's figures in the State", func() bool {
		var s api.State
		if e.get(t, "/api/v1/state", &s).StatusCode != 200 {
			return false
		}
		for i, p := range s.Processes {
			if p.PID == pid && p.AllocatedBytes != nil && *p.AllocatedBytes == 192*mib {
				mine = &s.Processes[i]
			}
		}
		return mine != nil
	})
	if a := mine.Allocator; mine.ReservedBytes == nil || *mine.ReservedBytes != 256*mib || a == nil || a.Backend != "sim" ||
		a.ReservedBytes != 256*mib || a.NumOOMs != 0 || a.Updated.IsZero() || mine.UsedBytes <= 256*mib {
		t.Errorf("the job in the State: %+v, allocator %+v", mine, mine.Allocator)
	}
	waitFor(t, "the job's figures in the history", func() bool {
		var doc struct {
			Points []api.ProcessPoint `json:"points"`
		}
		path := fmt.Sprintf("/api/v1/history/processes/%s/%d?from=-1m", mine.GPU, pid)
		if e.get(t, path, &doc).StatusCode != 200 {
			return false
		}
		for _, p := range doc.Points {
			if p.Allocated != nil && p.Allocated.Max == 192*mib && p.Reserved != nil && p.Reserved.Max == 256*mib {
				return true
			}
		}
		return false
	})
}
