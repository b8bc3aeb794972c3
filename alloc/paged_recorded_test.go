package alloc_test

import (
	"path/filepath"
	"testing"

	"github.com/vramhq/vram/replay"
)

// expandableCalls are the driver calls that PyTorch's expandable segments
// made replaying the example logs natively on an H200, counted exactly
// with CUPTI (bench/torchreplay --driver-calls, 2026-12-02,
// docs/gpu-runs/2026-12-02/lib/cupti.log): creates, maps, set-access and
// address reservations.
var expandableCalls = map[string]uint64{
	"leak_retained_graph": 117,
	"lstm_varlen":         586,
}

// The page-mapped mode on real traces it was not tuned on (replay/testdata/
// recorded) and on the example logs, on the simulated device, in its two
// regimes (doc.go):
//   - fine (under memory pressure; forced here without a cap): reserved at
//     most 1.03 × live at the peak;
//   - coarse (no cap, the default): reserved at most 1.04 × live, and on
//     the example logs no more driver calls than expandable segments.
func TestPagedRecordedTraces(t *testing.T) {
	var files []string
	for _, pat := range []string{"../replay/testdata/recorded/*.pickle.gz", "../examples/traces/*.csv.gz"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found %d recorded traces, want the 8 recorded histories and the 2 example logs", len(files))
	}
	var traces []*replay.Trace
	for _, f := range files {
		ts, err := replay.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, ts...)
	}
	for _, regime := range []struct {
		name     string
		conf     string
		maxRatio float64
	}{
		{"fine", "page_mapped:true,page_regime:fine", 1.03},
		{"coarse", "page_mapped:true", 1.04},
	} {
		t.Run(regime.name, func(t *testing.T) {
			for _, tr := range traces {
				rep, err := replay.Measure(tr, replay.Policy{Name: "paged", Conf: regime.conf},
					replay.MeasureOptions{Device: replay.SimDevice(141 << 30)})
				if err != nil {
					t.Fatalf("%s: %v", tr.Name, err)
				}
				if rep.OOM != nil {
					t.Fatalf("%s: out of memory at record %d", tr.Name, rep.OOM.Record)
				}
				r, calls := rep.ReservedOverLive(), rep.DeviceCalls.Total()
				if r > regime.maxRatio {
					t.Errorf("%s: reserved/live %.3f, want at most %.2f", tr.Name, r, regime.maxRatio)
				}
				if want, ok := expandableCalls[tr.Name]; ok && regime.name == "coarse" && calls > want {
					t.Errorf("%s: %d driver calls, want at most expandable segments' %d", tr.Name, calls, want)
				}
				t.Logf("%s: reserved/live %.3f, %d driver calls", tr.Name, r, calls)
			}
		})
	}
}
