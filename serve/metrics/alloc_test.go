package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vramhq/vram/alloc/statchan"
)

// TestAllocatorSeries: processes on vram's allocator get its series, the
// others none, and only among the top processes of a GPU.
func TestAllocatorSeries(t *testing.T) {
	snap := handSnapshot(20)
	rec := func(alloc, res int64) *statchan.Record {
		return &statchan.Record{Figures: statchan.Figures{Allocated: alloc, Reserved: res, FreeCached: res - alloc, LargestFree: (res - alloc) / 2, NumOOMs: 2}}
	}
	// processes are 1..20 MiB: index 19 is the largest, index 0 the smallest
	snap.Processes[19].Alloc = rec(10<<20, 18<<20)
	snap.Processes[0].Alloc = rec(1<<20, 1<<20) // below the top 10: no series
	c := New(Options{Hostname: "node-1", TopN: 10, Now: fixed(snap.Time)})
	c.Update(snap, time.Millisecond, nil)
	// The exposition text of each series, as the comparison with nothing
	// prints it.
	for _, tt := range []struct{ name, want string }{
		{"vram_process_allocator_allocated_bytes", "1.048576e+07"},
		{"vram_process_allocator_reserved_bytes", "1.8874368e+07"},
		{"vram_process_allocator_fragmentation_ratio", "0.2222"},
		{"vram_process_allocator_ooms_total", " 2"},
	} {
		if n := testutil.CollectAndCount(c, tt.name); n != 1 {
			t.Errorf("%s: %d series, want 1", tt.name, n)
		}
		err := testutil.CollectAndCompare(c, strings.NewReader(""), tt.name)
		if err == nil || !strings.Contains(err.Error(), `pid="119"`) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s is not the largest process's %s:\n%v", tt.name, tt.want, err)
		}
	}
}
