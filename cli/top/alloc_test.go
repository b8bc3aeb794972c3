package top

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
)

// fakeChannel is a statistics channel holding fixed records.
type fakeChannel []statchan.Record

func (f fakeChannel) Read(dst []statchan.Record) ([]statchan.Record, error) {
	return append(dst[:0], f...), nil
}

// TestAllocatorColumns: a process on vram's allocator shows its allocated
// and reserved memory and fragmentation; the others show "-".
func TestAllocatorColumns(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	snap, err := r.sampler.Sample()
	if err != nil {
		t.Fatal(err)
	}
	pid := int(snap.Processes[0].PID)
	// A record of the simulated backend names its device by ordinal.
	ch := fakeChannel{{Header: statchan.Header{PID: pid, Device: 0, Backend: "sim"},
		Figures: statchan.Figures{Allocated: 3 << 30, Reserved: 5 << 30, FreeCached: 2 << 30, LargestFree: 1 << 30, MaxSplitSize: -1}}}
	if r.sampler, err = gpu.NewSampler(r.sim, gpu.SamplerOptions{Procs: r.sim, Now: func() time.Time { return r.now }, Channel: ch}); err != nil {
		t.Fatal(err)
	}
	r.samples(2)
	f := r.frame()
	if !strings.Contains(f, "ALLOC") || !strings.Contains(f, "RSVD") || !strings.Contains(f, "FRAG") {
		t.Fatalf("no allocator columns:\n%s", f)
	}
	var line string
	for _, l := range strings.Split(f, "\n") {
		if strings.Contains(l, " "+strconv.Itoa(pid)+" ") {
			line = l
		}
	}
	if !strings.Contains(line, "3.0 GiB") || !strings.Contains(line, "5.0 GiB") || !strings.Contains(line, "20%") {
		t.Fatalf("the process's row lacks its allocator figures: %q", line)
	}
	if strings.Count(f, " - ") < 2 {
		t.Fatalf("processes not on the allocator are not marked:\n%s", f)
	}
}
