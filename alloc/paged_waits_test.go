package alloc_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
	"github.com/vramhq/vram/replay"
	"github.com/vramhq/vram/trace/rmm"
)

// laggingSim is the simulated device with a GPU that runs lag operations
// behind the host: an event recorded at operation n reports complete from
// operation n+lag on, and a stream wait completes every event recorded so
// far. The replay loop advances op. It counts the waits.
type laggingSim struct {
	*sim.Device
	op, lag int64
	rec     map[alloc.Event]int64
	waits   int
}

func (d *laggingSim) EventRecord(ev alloc.Event, s alloc.Stream) error {
	d.rec[ev] = d.op
	return d.Device.EventRecord(ev, s)
}

func (d *laggingSim) EventQuery(ev alloc.Event) (bool, error) {
	at, ok := d.rec[ev]
	return !ok || d.op-at >= d.lag, nil
}

func (d *laggingSim) SynchronizeStream(alloc.Stream) error {
	d.waits++
	for ev := range d.rec {
		d.rec[ev] = -d.lag
	}
	return nil
}

// TestPagedReplayWaits replays the traces in $VRAM_TRACE_DIR (RMM logs and
// PyTorch snapshots) in the page-mapped mode on a simulated H200 whose GPU
// runs $VRAM_WAIT_LAG operations (0 unless set) behind the host, and logs
// per trace and regime the stream waits, reserved/live at the peak and the
// driver calls, over the whole trace and its first fifth (where a job
// first grows); $VRAM_WAIT_CONF adds a configuration to the two regimes.
// It is skipped without the variable; docs/alloc.md
// ("Where the fine regime's waits come from") gives the figures.
func TestPagedReplayWaits(t *testing.T) {
	dir := os.Getenv("VRAM_TRACE_DIR")
	if dir == "" {
		t.Skip("set VRAM_TRACE_DIR to a directory of *.csv.gz RMM logs and *.pickle.gz PyTorch snapshots")
	}
	var lag int64
	if v := os.Getenv("VRAM_WAIT_LAG"); v != "" {
		var err error
		if lag, err = strconv.ParseInt(v, 10, 64); err != nil || lag < 0 {
			t.Fatalf("VRAM_WAIT_LAG=%q: want a number of operations >= 0", v)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.gz"))
	if len(files) == 0 {
		t.Fatalf("no *.gz traces in %s", dir)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nGPU %d operations behind the host\n\n", lag)
	fmt.Fprintf(&b, "| trace | regime | waits | reserved/live | creates | maps | unmaps | calls in the first fifth of the records |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range files {
		ts, err := replay.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range ts {
			recs := readRecords(t, tr)
			modes := []struct{ name, conf string }{
				{"coarse", "page_mapped:true"},
				{"fine", "page_mapped:true,page_regime:fine"},
			}
			if c := os.Getenv("VRAM_WAIT_CONF"); c != "" {
				modes = append(modes, struct{ name, conf string }{c, c})
			}
			for _, m := range modes {
				cfg, err := alloc.ParseConfig(m.conf)
				if err != nil {
					t.Fatal(err)
				}
				fifth := replayLagging(t, recs[:len(recs)/5], cfg, lag)
				all := replayLagging(t, recs, cfg, lag)
				fmt.Fprintf(&b, "| %s | %s | %d | %.4f | %d | %d | %d | %d of %d |\n", tr.Name, m.name, all.waits, all.ratio,
					all.st.NumDeviceAlloc, all.st.NumMemMap, all.st.NumMemUnmap, fifth.calls(), all.calls())
			}
		}
	}
	t.Log(b.String())
}

func readRecords(t *testing.T, tr *replay.Trace) []rmm.Record {
	t.Helper()
	src, done, err := tr.Records()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var recs []rmm.Record
	for {
		r, err := src.Next()
		if err == io.EOF {
			return recs
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
}

type lagResult struct {
	st    alloc.Stats
	waits int
	ratio float64 // peak reserved over peak live
}

func (r lagResult) calls() int64 { return r.st.NumDeviceAlloc + r.st.NumMemMap + r.st.NumMemUnmap }

func replayLagging(t *testing.T, recs []rmm.Record, cfg alloc.Config, lag int64) lagResult {
	t.Helper()
	d := &laggingSim{Device: newDev(t, 141<<30), lag: lag, rec: map[alloc.Event]int64{}}
	a, err := alloc.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	type liveAlloc struct{ ptr, size uint64 }
	live := map[uint64]liveAlloc{}
	var bytes, peak uint64
	for _, r := range recs {
		d.op++
		switch r.Action {
		case rmm.Allocate:
			p, err := a.Malloc(r.Size, alloc.Stream(r.Stream))
			if err != nil {
				t.Fatalf("record %d: %v", d.op, err)
			}
			live[r.Pointer] = liveAlloc{p, r.Size}
			bytes += r.Size
			peak = max(peak, bytes)
		case rmm.Free:
			l, ok := live[r.Pointer]
			if !ok {
				continue
			}
			delete(live, r.Pointer)
			bytes -= l.size
			if err := a.Free(l.ptr); err != nil {
				t.Fatalf("record %d: %v", d.op, err)
			}
		}
	}
	st := a.Stats()
	return lagResult{st, d.waits, float64(st.ReservedBytes.All.Peak) / float64(max(peak, 1))}
}
