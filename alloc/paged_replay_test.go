package alloc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/trace/replay"
)

// TestPagedReplayTraces replays the RMM logs in $VRAM_TRACE_DIR under the
// default and the page-mapped configurations on a simulated H200 (141 GiB)
// and logs, per trace and mode: peak live and reserved, their ratio, the
// smallest capacity that completes over live, the allocation-related device
// calls and the host time per operation. It is skipped without the variable;
// docs/alloc.md gives the command and the figures. VRAM_GROW_CHUNK_MIB sets
// the least memory one page-mapped growth creates and VRAM_MAX_CHUNK_MIB
// the most one physical allocation holds (both 20 MiB by default).
func TestPagedReplayTraces(t *testing.T) {
	dir := os.Getenv("VRAM_TRACE_DIR")
	if dir == "" {
		t.Skip("set VRAM_TRACE_DIR to a directory of *.csv.gz RMM logs")
	}
	if v := os.Getenv("VRAM_GROW_CHUNK_MIB"); v != "" {
		mib, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VRAM_GROW_CHUNK_MIB=%q: %v", v, err)
		}
		defer alloc.SetGrowChunkBytes(mib << 20)()
	}
	if v := os.Getenv("VRAM_MAX_CHUNK_MIB"); v != "" {
		mib, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("VRAM_MAX_CHUNK_MIB=%q: %v", v, err)
		}
		defer alloc.SetMaxChunkBytes(mib << 20)()
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.csv.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.csv.gz in %s: %v", dir, err)
	}
	policies := []replay.Policy{
		{Name: "default", Conf: ""},
		{Name: "paged", Conf: "page_mapped:true"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| trace | mode | live MiB | reserved MiB | reserved/live | min capacity/live | MemCreate+Malloc | MemRelease+Free | MemMap | MemUnmap | VMM calls | all calls | ns/op p50 | p99 |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".csv.gz")
		tr := replay.FromFile(name, f)
		for _, p := range policies {
			rep, err := replay.Measure(tr, p, replay.MeasureOptions{
				Device:      replay.SimDevice(141 << 30),
				MinCapacity: true,
				Time:        true,
			})
			if err != nil {
				t.Fatalf("%s %s: %v", name, p.Name, err)
			}
			if rep.OOM != nil {
				t.Fatalf("%s %s: out of memory at record %d", name, p.Name, rep.OOM.Record)
			}
			s := rep.Stats
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.3f | %.3f | %d | %d | %d | %d | %d | %d | %d | %d |\n",
				name, p.Name, float64(rep.PeakLiveBytes)/(1<<20), float64(rep.PeakReservedBytes)/(1<<20),
				rep.ReservedOverLive(), rep.MinCapacityOverLive(),
				s.NumDeviceAlloc, s.NumDeviceFree, s.NumMemMap, s.NumMemUnmap, rep.DeviceCalls.VMM, rep.DeviceCalls.Total(),
				rep.Latency.P50, rep.Latency.P99)
		}
	}
	t.Log(b.String())
}
