package serve_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
)

// TestServeRemovesStaleChannelFiles: vram serve removes the statistics
// channel file of a process that is gone (here: a file naming this test's
// PID with another start time, as a PID reused after a kill -9 leaves it)
// and keeps, and shows, the file of a live process.
func TestServeRemovesStaleChannelFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve")
	}
	dir := t.TempDir()
	t.Setenv(statchan.EnvDir, dir) // for the daemon started below
	start, err := statchan.SelfStartTicks("/proc")
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	live, err := statchan.Create(dir, statchan.Header{PID: pid, Device: 0, StartTicks: start, Backend: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	live.Publish(statchan.Figures{Allocated: 3 << 20, AllocatedPeak: 3 << 20, Active: 3 << 20, ActivePeak: 3 << 20,
		Reserved: 4 << 20, ReservedPeak: 4 << 20, MaxSplitSize: -1}, time.Now())
	stale, err := statchan.Create(dir, statchan.Header{PID: pid, Device: 1, StartTicks: start + 1, Backend: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	stalePath := stale.Path()

	cfg := write(t, dir, "c.yaml", "version: 1\ninterval: 20ms\nhistory_interval: 20ms\n", 0o600)
	d := startDaemon(t, "--simulate", "2", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "h.db"), "--config", cfg)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(stalePath); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stale file %s is still there:\n%s", stalePath, d.stderr.String())
		}
	}
	if _, err := os.Stat(live.Path()); err != nil {
		t.Fatalf("the live process's file: %v", err)
	}
	type proc struct {
		PID       int    `json:"pid"`
		GPUIndex  int    `json:"gpu_index"`
		Allocated *int64 `json:"allocated_bytes"`
		Reserved  *int64 `json:"reserved_bytes"`
	}
	// The State that follows the sample that removed the file may not be
	// published yet: ask until it lists this process.
	var mine []proc
	for deadline := time.Now().Add(20 * time.Second); len(mine) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("this process is not in the API:\n%s", d.stderr.String())
		}
		res, err := http.Get("http://" + d.addr + "/api/v1/processes")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Processes []proc `json:"processes"`
		}
		err = json.NewDecoder(res.Body).Decode(&doc)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			continue // 503 before the first sample
		}
		for _, p := range doc.Processes {
			if p.PID == pid {
				mine = append(mine, p)
			}
		}
	}
	if p := mine[0]; len(mine) != 1 || p.GPUIndex != 0 || p.Allocated == nil || *p.Allocated != 3<<20 || p.Reserved == nil || *p.Reserved != 4<<20 {
		t.Errorf("this process in the API: %+v; want once, on GPU 0, 3 MiB allocated and 4 MiB reserved", mine)
	}
}
