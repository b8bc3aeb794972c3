package job

import (
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/internal/jsondoc"
)

// growingCache is a job whose driver-side memory grows for ten minutes
// (its cache fills) while what it allocates goes up and down around a
// flat floor; with leakAlloc its allocated memory also climbs.
func growingCache(leakAlloc bool) *Result {
	r := &Result{Start: time.Unix(1700000000, 0), Memory: true, Devices: []Device{{Index: 0, Total: 80 * gib}}}
	for i := 0; i <= 600; i++ {
		t := time.Duration(i) * time.Second
		job := uint64(gib + i*12<<20)
		alloc := uint64(gib + (i%10)*50<<20)
		if leakAlloc {
			alloc += uint64(i * 10 << 20)
		}
		r.Samples = append(r.Samples, Sample{T: t, Job: job, JobDev: []uint64{job}, Used: []uint64{job},
			Allocated: alloc, Reserved: job - 500<<20, AllocKnown: i > 0})
	}
	return r
}

func TestLeakVerdictOnAllocated(t *testing.T) {
	for _, tt := range []struct {
		name      string
		leakAlloc bool
		allocator bool
		want      detect.Kind
		series    string
	}{
		{"growing cache, driver's figure", false, false, detect.Leak, "used"},
		{"growing cache, allocated memory", false, true, detect.NoLeak, "allocated"},
		{"growing allocations", true, true, detect.Leak, "allocated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := growingCache(tt.leakAlloc)
			if tt.allocator {
				r.Allocator = &AllocatorFigures{Processes: 1}
			}
			det, err := detect.New(detect.Config{})
			if err != nil {
				t.Fatal(err)
			}
			v, series := leakVerdict(r, det)
			if v.Kind != tt.want || series != tt.series {
				t.Fatalf("verdict %v (%s) on %q, want %v on %q", v.Kind, v.Reason, series, tt.want, tt.series)
			}
		})
	}
}

func TestDiagnoseWithAllocatorFigures(t *testing.T) {
	msg := Message{Text: "CUDA out of memory.", Framework: "pytorch", Tried: 2 * gib, Capacity: 80 * gib}
	for _, tt := range []struct {
		name  string
		f     statchan.Figures
		cause string
		say   string
	}{
		{"fragmented", statchan.Figures{Allocated: 30 * gib, Reserved: 40 * gib, FreeCached: 10 * gib, LargestFree: 1 * gib, Cap: 80 * gib}, CauseFragmentation, "blocks of at most 1.00 GiB"},
		{"at the cap", statchan.Figures{Allocated: 15 * gib, Reserved: 15 * gib, FreeCached: 0, Cap: 16 * gib}, CauseDemand, "cap of 16.00 GiB"},
		{"demand", statchan.Figures{Allocated: 78 * gib, Reserved: 79 * gib, FreeCached: 1 * gib, LargestFree: 1 * gib, Cap: 80 * gib}, CauseDemand, "78.00 GiB allocated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Result{ExitCode: 1, Memory: true, Devices: []Device{{Index: 0, Total: 80 * gib}},
				Samples:   []Sample{{JobDev: []uint64{40 * gib}, Job: 40 * gib, Used: []uint64{40 * gib}}},
				Peak:      Peak{Bytes: 40 * gib, Device: 0},
				Allocator: &AllocatorFigures{Processes: 1, Last: tt.f}}
			o := diagnose(r, []Message{msg})
			if !o.Detected || o.Cause != tt.cause || !strings.Contains(o.Explanation, tt.say) {
				t.Fatalf("cause %q: %s; want %q saying %q", o.Cause, o.Explanation, tt.cause, tt.say)
			}
		})
	}
}

// TestJSONDocAllocator checks the report of a job on vram's allocator
// (allocator figures and per-sample allocated and reserved memory) against
// docs/json.md.
func TestJSONDocAllocator(t *testing.T) {
	r := growingCache(false)
	r.Args, r.Devices[0].UUID = []string{"python", "train.py"}, "GPU-0"
	r.Allocator = &AllocatorFigures{Processes: 1, PeakAllocated: 2 * gib, PeakReserved: 3 * gib, PID: 4242,
		Last: statchan.Figures{Allocated: gib, Reserved: 2 * gib, FreeCached: gib, LargestFree: gib / 2, Cap: 80 * gib}}
	r.Peak = Peak{Bytes: 3 * gib, Device: 0, PID: 4242, Command: "python train.py", PIDDev: 3 * gib}
	r.Procs = []Proc{{PID: 4242, Command: "python train.py", GPUs: []int{0}, Peak: 3 * gib}}
	var b strings.Builder
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	jsondoc.Test(t, "vram run --json", []byte(b.String()))
}
