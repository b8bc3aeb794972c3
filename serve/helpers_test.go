package serve

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// clock is a fake clock that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// hidingHost wraps a host so that tests can make processes disappear from
// the driver's lists (they exited).
type hidingHost struct {
	gpu.Host
	mu   sync.Mutex
	hide map[uint32]bool
}

func (h *hidingHost) Devices() ([]gpu.Device, error) {
	ds, err := h.Host.Devices()
	out := make([]gpu.Device, len(ds))
	for i, d := range ds {
		out[i] = hidingDevice{d, h}
	}
	return out, err
}

func (h *hidingHost) setHidden(pid uint32, hidden bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hide == nil {
		h.hide = map[uint32]bool{}
	}
	h.hide[pid] = hidden
}

type hidingDevice struct {
	gpu.Device
	h *hidingHost
}

func (d hidingDevice) Processes() ([]gpu.DriverProcess, error) {
	ps, err := d.Device.Processes()
	d.h.mu.Lock()
	defer d.h.mu.Unlock()
	out := ps[:0:0]
	for _, p := range ps {
		if !d.h.hide[p.PID] {
			out = append(out, p)
		}
	}
	return out, err
}

// signalRecorder is a proc.Signaller that records what it would send.
// Signal 0 (a probe: it sends nothing) is counted, not listed.
type signalRecorder struct {
	mu     sync.Mutex
	sent   []sent
	probes int
	err    error // returned by Signal when set
}

type sent struct {
	pid int
	sig syscall.Signal
}

func (r *signalRecorder) Open(pid int) (proc.Handle, error) { return recHandle{r, pid}, nil }

func (r *signalRecorder) list() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.sent...)
}

type recHandle struct {
	r   *signalRecorder
	pid int
}

func (h recHandle) Signal(sig syscall.Signal) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.r.err != nil {
		return h.r.err
	}
	if sig == 0 {
		h.r.probes++
		return nil
	}
	h.r.sent = append(h.r.sent, sent{h.pid, sig})
	return nil
}

func (recHandle) Close() error { return nil }

// testEnv is a daemon on a simulated host with a fake clock.
type testEnv struct {
	d     *Daemon
	sim   *gpu.Sim
	host  *hidingHost
	clk   *clock
	log   *syncBuffer
	sig   *signalRecorder
	dir   string
	procs map[string]gpu.Process // by sim shape, from the first sample
}

type envOption func(*Options)

// withDB makes the daemon use the history file db.
func withDB(db string) envOption { return func(o *Options) { o.DB = db } }

// newEnv builds a daemon over a simulated host of n GPUs (seed 1) with a
// fake clock, writing its history under a temporary directory.
func newEnv(t *testing.T, n int, cfg Config, opts ...envOption) *testEnv {
	t.Helper()
	return newEnvClock(t, n, cfg, newClock(), opts...)
}

// newEnvClock is newEnv on a given clock.
func newEnvClock(t *testing.T, n int, cfg Config, clk *clock, opts ...envOption) *testEnv {
	t.Helper()
	sim, err := gpu.NewSim(n, 1, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvSim(t, sim, cfg, clk, opts...)
}

// newEnvSim is newEnv over a given simulated host on a given clock.
func newEnvSim(t *testing.T, sim *gpu.Sim, cfg Config, clk *clock, opts ...envOption) *testEnv {
	t.Helper()
	host := &hidingHost{Host: sim}
	sampler, err := gpu.NewSampler(host, gpu.SamplerOptions{Procs: sim, Now: clk.Now, IdleWindow: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{sim: sim, host: host, clk: clk, log: &syncBuffer{}, sig: &signalRecorder{}, dir: t.TempDir()}
	o := Options{
		Config: cfg, Opened: &gpu.Opened{Host: host, Sampler: sampler, Procs: sim, Hostname: "node-1"},
		DB: filepath.Join(e.dir, "history.db"), Logger: slog.New(slog.NewTextHandler(io.MultiWriter(e.log, testWriter(t)), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now: clk.Now, Self: os.Getpid(), Signaller: e.sig, NoXid: true,
	}
	for _, f := range opts {
		f(&o)
	}
	d, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e.d = d
	return e
}

// testWriter shows the daemon's log with -v only.
func testWriter(t *testing.T) io.Writer {
	if testing.Verbose() {
		return tLog{t}
	}
	return io.Discard
}

type tLog struct{ t *testing.T }

func (l tLog) Write(p []byte) (int, error) {
	l.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// step advances the clock by d and takes one sample.
func (e *testEnv) step(d time.Duration) {
	e.clk.Advance(d)
	e.d.tick()
}

// flush waits for the queued history writes.
func (e *testEnv) flush(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.d.w.sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// byShape finds the simulated process of a shape (train, serve, jupyter,
// leak, orphan, zombie, foreign) on GPU 0 by its command line and flags.
func byShape(t *testing.T, snap *gpu.Snapshot, shape string) gpu.Process {
	t.Helper()
	for _, p := range snap.Processes {
		if p.Device != 0 {
			continue
		}
		cmd := p.Command()
		switch {
		case shape == "leak" && cmd == "python serve_features.py --port 8080",
			shape == "orphan" && p.Flags&gpu.FlagOrphaned != 0,
			shape == "zombie" && p.Flags&gpu.FlagZombie != 0,
			shape == "foreign" && p.Flags&gpu.FlagNoSuchProcess != 0,
			shape == "jupyter" && p.Flags&gpu.FlagJupyter != 0:
			return p
		}
	}
	t.Fatalf("no %s process on GPU 0", shape)
	return gpu.Process{}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// metricSeries returns the series of a metric in the daemon's registry
// whose labels include every pair of match.
func metricSeries(t *testing.T, d *Daemon, name string, match map[string]string) []*dto.Metric {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// metricSum adds up the values of the matching series.
func metricSum(t *testing.T, d *Daemon, name string, match map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range metricSeries(t, d, name, match) {
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

// trackOf is the track of the lifetime k, nil when there is none.
func (d *Daemon) trackOf(k procKey) *procTrack {
	if t := d.procs[k.slot()]; t != nil && t.start == k.start {
		return t
	}
	return nil
}
