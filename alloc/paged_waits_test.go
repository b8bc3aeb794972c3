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
// far. lagSource advances op, and ends the count of waits with the trace
// (the teardown's are not counted).
type laggingSim struct {
	*sim.Device
	op, lag int64
	rec     map[alloc.Event]int64
	waits   int
	ended   bool
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
	if !d.ended {
		d.waits++
	}
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
			n := countRecords(t, tr)
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
				fifth := replayLagging(t, tr, n/5, cfg, lag)
				all := replayLagging(t, tr, -1, cfg, lag)
				fmt.Fprintf(&b, "| %s | %s | %d | %.4f | %d | %d | %d | %d of %d |\n", tr.Name, m.name, all.waits, all.ratio,
					all.st.NumDeviceAlloc, all.st.NumMemMap, all.st.NumMemUnmap, fifth.calls(), all.calls())
			}
		}
	}
	t.Log(b.String())
}

// lagSource advances the lagging device by one operation per record.
type lagSource struct {
	replay.Source
	d *laggingSim
}

func (s lagSource) Next() (rmm.Record, error) {
	s.d.op++
	r, err := s.Source.Next()
	s.d.ended = err == io.EOF
	return r, err
}

type lagResult struct {
	st    alloc.Stats
	waits int
	ratio float64 // peak reserved over peak live
}

func (r lagResult) calls() int64 { return r.st.NumDeviceAlloc + r.st.NumMemMap + r.st.NumMemUnmap }

// replayLagging replays the first n records of tr (all of them when n < 0)
// on a lagging simulated device.
func replayLagging(t *testing.T, tr *replay.Trace, n int, cfg alloc.Config, lag int64) lagResult {
	t.Helper()
	src, done, err := tr.Records()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if n >= 0 {
		src = &firstN{src, n}
	}
	d := &laggingSim{Device: newDev(t, 141<<30), lag: lag, rec: map[alloc.Event]int64{}}
	res, err := replay.Replay(lagSource{src, d}, d, cfg, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lagResult{res.Stats, d.waits, res.ReservedOverLive()}
}

// firstN ends a source after n records.
type firstN struct {
	replay.Source
	n int
}

func (s *firstN) Next() (rmm.Record, error) {
	if s.n == 0 {
		return rmm.Record{}, io.EOF
	}
	s.n--
	return s.Source.Next()
}

// countRecords counts the records of tr.
func countRecords(t *testing.T, tr *replay.Trace) int {
	t.Helper()
	src, done, err := tr.Records()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	n := 0
	for {
		if _, err := src.Next(); err == io.EOF {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
}
