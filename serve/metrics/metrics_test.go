package metrics

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/vramhq/vram/gpu"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// simSnapshot samples a simulated host of n GPUs twice, 40 s apart (the
// second sample is the one idleness can be judged on).
func simSnapshot(t *testing.T, n int) *gpu.Snapshot {
	t.Helper()
	now := t0
	clock := func() time.Time { return now }
	sim, err := gpu.NewSim(n, 7, clock)
	if err != nil {
		t.Fatal(err)
	}
	smp, err := gpu.NewSampler(sim, gpu.SamplerOptions{Procs: sim, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := smp.Sample(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(40 * time.Second)
	s, err := smp.Sample()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGoldenSimulatedHost(t *testing.T) {
	snap := simSnapshot(t, 2)
	c := New(Options{Hostname: "node-1", TopN: 3, Now: fixed(snap.Time)})
	c.Update(snap, 2500*time.Microsecond, nil)
	// A leak slope for the largest process of GPU 0, one for a PID that
	// is not on the GPU (ignored), and one for the second process, set
	// twice and then dropped (not in the golden file).
	c.SetLeakSlope(ProcessKey{0, snap.Processes[0].PID}, 1<<20)
	c.SetLeakSlope(ProcessKey{0, 999999}, 5)
	c.SetLeakSlope(ProcessKey{snap.Processes[1].Device, snap.Processes[1].PID}, 7)
	c.SetLeakSlope(ProcessKey{snap.Processes[1].Device, snap.Processes[1].PID}, 9)
	c.DropLeakSlope(ProcessKey{snap.Processes[1].Device, snap.Processes[1].PID})
	c.CountAction(0, "reclaim-orphans", "signal TERM", "ok")
	c.CountAction(0, "reclaim-orphans", "signal TERM", "ok")
	c.CountAction(-1, "quota", "alert only", "ok")

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	golden := filepath.Join("testdata", "sim2.prom")
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, mf := range mfs {
			if err := writeText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f); err != nil {
		t.Error(err)
	}
}

func TestLint(t *testing.T) {
	snap := simSnapshot(t, 4)
	c := New(Options{Hostname: "node-1", Now: fixed(snap.Time)})
	c.Update(snap, time.Millisecond, nil)
	c.SetLeakSlope(ProcessKey{1, snap.Processes[0].PID}, 3)
	c.CountAction(0, "r", "a", "ok")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// As collected, the only problems are dcgm-exporter's camelCase label
	// modelName, kept on purpose (package documentation).
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Error("lint: modelName is no longer flagged: drop the rename below")
	}
	for _, p := range problems {
		if !strings.Contains(p.Text, "camelCase") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	// With that one label renamed, nothing at all is flagged.
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "modelName" {
					l.Name = proto.String("model_name")
				}
			}
		}
	}
	problems, err = promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// handSnapshot is one GPU with n processes of 1..n MiB, PIDs 100+i.
func handSnapshot(n int) *gpu.Snapshot {
	s := &gpu.Snapshot{Time: t0, Devices: []gpu.DeviceState{{
		Identity: gpu.Identity{Index: 0, UUID: "GPU-x", Name: "NVIDIA H200"},
		Memory:   gpu.Memory{Total: 100 << 30, Used: 10 << 30, Free: 90 << 30},
	}}}
	for i := range n {
		s.Processes = append(s.Processes, gpu.Process{PID: uint32(100 + i), Device: 0, DeviceUUID: "GPU-x", Memory: uint64(i+1) << 20, User: "u", Comm: "p"})
	}
	return s
}

func TestCardinalityBound(t *testing.T) {
	tests := []struct {
		procs, topN, wantProcSeries int
		wantOther                   float64
	}{
		{0, 5, 1, 0},
		{3, 5, 4, 0},
		{5, 5, 6, 0},
		{500, 5, 6, float64((500*501/2 - (500 + 499 + 498 + 497 + 496)) << 20)},
		{500, 10, 11, float64((500*501/2 - 10*(500+491)/2) << 20)},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d procs top %d", tc.procs, tc.topN), func(t *testing.T) {
			c := New(Options{TopN: tc.topN, Now: fixed(t0)})
			snap := handSnapshot(tc.procs)
			for _, p := range snap.Processes {
				c.SetLeakSlope(ProcessKey{0, p.PID}, float64(p.PID))
			}
			c.Update(snap, 0, nil)
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)
			n, err := testutil.GatherAndCount(reg, "vram_process_memory_used_bytes")
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantProcSeries {
				t.Errorf("process series: got %d, want %d", n, tc.wantProcSeries)
			}
			slopeN, _ := testutil.GatherAndCount(reg, "vram_process_leak_slope_bytes_per_second")
			if want := min(tc.procs, tc.topN); slopeN != want {
				t.Errorf("slope series: got %d, want %d", slopeN, want)
			}
			mfs, _ := reg.Gather()
			var other float64
			var sum float64
			for _, mf := range mfs {
				if mf.GetName() != "vram_process_memory_used_bytes" {
					continue
				}
				for _, m := range mf.GetMetric() {
					sum += m.GetGauge().GetValue()
					for _, l := range m.GetLabel() {
						if l.GetName() == "pid" && l.GetValue() == "other" {
							other = m.GetGauge().GetValue()
						}
					}
				}
			}
			if other != tc.wantOther {
				t.Errorf("other: got %v, want %v", other, tc.wantOther)
			}
			// Nothing is lost: the series sum to every process's memory.
			if want := float64(tc.procs*(tc.procs+1)/2) * (1 << 20); sum != want {
				t.Errorf("sum over series: got %v, want %v", sum, want)
			}
		})
	}
}

func TestScrapeHealth(t *testing.T) {
	snap := handSnapshot(2)
	tests := []struct {
		name    string
		update  bool
		snap    *gpu.Snapshot
		err     error
		now     time.Time
		success float64
		devices int
	}{
		{"no sample yet", false, nil, nil, t0, 0, 0},
		{"fresh", true, snap, nil, t0.Add(time.Second), 1, 1},
		{"stale", true, snap, nil, t0.Add(2 * time.Minute), 0, 0},
		{"failed", true, nil, errors.New("nvml: GPU is lost"), t0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Options{Now: fixed(tc.now)})
			if tc.update {
				c.Update(tc.snap, 3*time.Millisecond, tc.err)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)
			want := fmt.Sprintf("# HELP vram_scrape_success 1 when the latest GPU sample succeeded and is fresh, else 0.\n# TYPE vram_scrape_success gauge\nvram_scrape_success %v\n", tc.success)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vram_scrape_success"); err != nil {
				t.Error(err)
			}
			if n, _ := testutil.GatherAndCount(reg, "vram_gpu_memory_used_bytes"); n != tc.devices {
				t.Errorf("device series: got %d, want %d", n, tc.devices)
			}
		})
	}
}

func TestLabelValues(t *testing.T) {
	tests := []struct{ in, want string }{
		{"python train.py", "python train.py"},
		{strings.Repeat("a", 70), strings.Repeat("a", 64)},
		{strings.Repeat("a", 63) + "é", strings.Repeat("a", 63)}, // not cut inside a character
		{"bad\xffbyte", "bad\uFFFDbyte"},
	}
	for _, tc := range tests {
		if got := label(tc.in, MaxCommand); got != tc.want {
			t.Errorf("label(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDeviceWithErrorHasNoSeries(t *testing.T) {
	snap := handSnapshot(1)
	snap.Devices = append(snap.Devices, gpu.DeviceState{Identity: gpu.Identity{Index: 1, UUID: "GPU-y"}, Err: errors.New("lost")})
	c := New(Options{Now: fixed(t0)})
	c.Update(snap, 0, nil)
	if n := testutil.CollectAndCount(c, "vram_gpu_memory_total_bytes"); n != 1 {
		t.Errorf("total series: got %d, want 1", n)
	}
}

func TestConcurrentUpdateAndScrape(t *testing.T) {
	c := New(Options{Now: fixed(t0)})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 200 {
			c.Update(handSnapshot(i%20), 0, nil)
			c.SetLeakSlope(ProcessKey{0, 100}, float64(i))
			if i%3 == 0 {
				c.DropLeakSlope(ProcessKey{0, 100})
			}
			c.CountAction(0, "r", "a", "ok")
		}
	}()
	go func() {
		defer wg.Done()
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	if v := testutil.ToFloat64(onlyActions{c}); v != 200 {
		t.Errorf("actions counted: %v, want 200", v)
	}
}

// onlyActions exposes just the action counter, for testutil.ToFloat64.
type onlyActions struct{ c *Collector }

func (o onlyActions) Describe(ch chan<- *prometheus.Desc) { ch <- descActions }
func (o onlyActions) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { o.c.Collect(all); close(all) }()
	for m := range all {
		if m.Desc() == descActions {
			ch <- m
		}
	}
}

func writeText(w io.Writer, mf *dto.MetricFamily) error {
	_, err := expfmt.MetricFamilyToText(w, mf)
	return err
}

// FuzzLabel: whatever a command line holds, its label value is valid UTF-8,
// at most MaxCommand bytes, and a prefix of the input when the input was
// valid.
func FuzzLabel(f *testing.F) {
	for _, s := range []string{"", "python train.py", strings.Repeat("é", 40), "\xff\xfe", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := label(s, MaxCommand)
		if !utf8.ValidString(got) || len(got) > MaxCommand {
			t.Fatalf("label(%q) = %q", s, got)
		}
		if utf8.ValidString(s) && !strings.HasPrefix(s, got) {
			t.Fatalf("label(%q) = %q is not a prefix", s, got)
		}
	})
}

// TestUpdateHandsBackUnreadSample: Update returns the sample it mirrored
// before only when no scrape reads it, so that its caller may reuse it.
func TestUpdateHandsBackUnreadSample(t *testing.T) {
	c := New(Options{Now: fixed(t0)})
	s := make([]*gpu.Snapshot, 5)
	for i := range s {
		s[i] = handSnapshot(i + 1)
	}
	if got := c.Update(s[0], 0, nil); got != nil {
		t.Fatalf("first Update returned %p, want nil", got)
	}
	if got := c.Update(s[1], 0, nil); got != s[0] {
		t.Fatalf("Update returned %p, want the sample before (%p)", got, s[0])
	}
	// A scrape that is still sending reads s[1].
	ch := make(chan prometheus.Metric)
	done := make(chan struct{})
	go func() { c.Collect(ch); close(done) }()
	<-ch
	if got := c.Update(s[2], 0, nil); got != nil {
		t.Fatalf("Update during a scrape returned %p, want nil", got)
	}
	// The scrape still reads s[1], never handed back; s[2] is unread.
	if got := c.Update(s[3], 0, nil); got != s[2] {
		t.Fatalf("Update returned %p, want the unread sample %p", got, s[2])
	}
	go func() {
		for range ch {
		}
	}()
	<-done
	close(ch)
	// A scrape that has ended no longer holds the sample it read.
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if got := c.Update(s[4], 0, nil); got != s[3] {
		t.Fatalf("Update after a scrape returned %p, want %p", got, s[3])
	}
}
