package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
)

// loadHost is a synthetic host for load tests: devs GPUs with procs
// processes each, whose memory moves a little at every sample (a sawtooth
// per process, a slow leak for every tenth). It is its own ProcSource.
type loadHost struct {
	devs, procs int
	now         func() time.Time
	start       time.Time
	boot        time.Time
}

func newLoadHost(devs, procs int, now func() time.Time) *loadHost {
	t := now()
	return &loadHost{devs: devs, procs: procs, now: now, start: t, boot: t.Add(-24 * time.Hour)}
}

func (h *loadHost) Info() gpu.HostInfo { return gpu.HostInfo{Driver: "load", Backend: "load"} }
func (h *loadHost) Close() error       { return nil }
func (h *loadHost) Devices() ([]gpu.Device, error) {
	out := make([]gpu.Device, h.devs)
	for i := range out {
		out[i] = &loadDevice{h: h, i: i}
	}
	return out, nil
}

func (h *loadHost) pid(dev, j int) int { return 100000 + dev*1000 + j }

func (h *loadHost) Stat(pid int) (gpu.ProcStat, error) {
	if pid == 1 {
		return gpu.ProcStat{PID: 1, Session: 1, State: "S", Comm: "init", StartTime: h.boot, StartTicks: 1}, nil
	}
	if pid < 100000 {
		return gpu.ProcStat{}, fmt.Errorf("pid %d: %w", pid, gpu.ErrNoProcess)
	}
	started := h.start.Add(-time.Duration(pid%3600) * time.Second)
	return gpu.ProcStat{PID: pid, PPID: 1, Session: pid, State: "S", Comm: "python", StartTime: started, StartTicks: uint64(started.Sub(h.boot) / (10 * time.Millisecond))}, nil
}

func (h *loadHost) Details(pid int) (gpu.ProcDetails, error) {
	return gpu.ProcDetails{UID: 1000 + uint32(pid%7), User: fmt.Sprintf("user%d", pid%7), Cmdline: []string{"python", "train.py", "--rank", fmt.Sprint(pid % 1000)},
		Cgroup: "/user.slice/user-1000.slice/session-1.scope"}, nil
}

type loadDevice struct {
	h *loadHost
	i int
}

const loadTotal = 140 << 30

func (d *loadDevice) Identity() (gpu.Identity, error) {
	return gpu.Identity{Index: d.i, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", d.i), Name: "Load H200"}, nil
}

func (d *loadDevice) mem(j int, t float64) uint64 {
	base := uint64(200<<20) + uint64(j%13)<<20
	v := base + uint64(64<<20*(0.5+0.5*math.Sin(t/3+float64(j))))
	if j%10 == 0 {
		v += uint64(t * float64(1<<20)) // 1 MiB/s
	}
	return v &^ (1<<20 - 1)
}

func (d *loadDevice) Memory() (gpu.Memory, error) {
	t := d.h.now().Sub(d.h.start).Seconds()
	var used uint64
	for j := range d.h.procs {
		used += d.mem(j, t)
	}
	return gpu.Memory{Total: loadTotal, Reserved: 512 << 20, Used: used, Free: loadTotal - 512<<20 - used, ReservedKnown: true}, nil
}

func (d *loadDevice) Utilization() (gpu.Utilization, error) {
	return gpu.Utilization{GPU: 50, Memory: 20, Known: true}, nil
}

func (d *loadDevice) Processes() ([]gpu.DriverProcess, error) {
	t := d.h.now().Sub(d.h.start).Seconds()
	out := make([]gpu.DriverProcess, d.h.procs)
	for j := range out {
		out[j] = gpu.DriverProcess{PID: uint32(d.h.pid(d.i, j)), Memory: d.mem(j, t), MemoryKnown: true, Kind: gpu.KindCompute}
	}
	return out, nil
}

func (d *loadDevice) ProcessUtilization(time.Time) ([]gpu.ProcessUtilization, error) {
	return nil, fmt.Errorf("load host: %w", gpu.ErrNotSupported)
}
func (d *loadDevice) AccountingEnabled() (bool, error) { return false, nil }
func (d *loadDevice) Accounting() ([]gpu.AccountingRecord, error) {
	return nil, fmt.Errorf("load host: %w", gpu.ErrNotSupported)
}

// loadDaemon builds a daemon over a load host with a fake clock.
func loadDaemon(tb testing.TB, devs, procs int, cfg Config) (*Daemon, *clock) {
	tb.Helper()
	clk := newClock()
	h := newLoadHost(devs, procs, clk.Now)
	s, err := gpu.NewSampler(h, gpu.SamplerOptions{Procs: h, Now: clk.Now})
	if err != nil {
		tb.Fatal(err)
	}
	d, err := New(context.Background(), Options{
		Config: cfg, Opened: &gpu.Opened{Host: h, Sampler: s, Procs: h, Hostname: "load"},
		DB: filepath.Join(tb.TempDir(), "h.db"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: clk.Now, NoXid: true, Signaller: &signalRecorder{},
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d, clk
}

// BenchmarkTick is one sample of 8 GPUs × 200 processes through every
// stage (detectors, history every 10 s, alerts, state), at 10 Hz of
// simulated time, after a 10-minute warm-up so that every detector holds
// its full 64 windows.
func BenchmarkTick(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Interval = 100 * time.Millisecond
	d, clk := loadDaemon(b, 8, 200, cfg)
	for range 600 * 10 / 5 { // 10 min at 5 s steps: fills the windows
		clk.Advance(5 * time.Second)
		d.tick()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		clk.Advance(100 * time.Millisecond)
		d.tick()
	}
	b.StopTimer()
	b.ReportMetric(float64(len(d.procs)), "processes")
}

// BenchmarkTickSim is BenchmarkTick on the simulated host of the load
// runs (docs/serve.md, "Load and faults"): gpu.NewSimProcs with 8 GPUs × 200
// processes, as vram serve --simulate 8 with VRAM_SIMULATE_PROCS=200 runs
// it, the sampler included. The samples follow each other at once, so the
// daemon's data stays in the CPU's caches from one to the next.
func BenchmarkTickSim(b *testing.B) { benchTickSim(b, nil) }

// BenchmarkTickSimCold is BenchmarkTickSim with 64 MiB of other memory
// read between samples (not timed), as the live daemon meets it: 100 ms
// of other work between two samples leaves little of its data in the
// caches, and then what a sample costs is mostly how many cache lines it
// touches per process.
func BenchmarkTickSimCold(b *testing.B) {
	other := make([]uint64, 64<<20/8)
	for i := range other {
		other[i] = uint64(i)
	}
	var sum uint64
	benchTickSim(b, func() {
		b.StopTimer()
		for i := 0; i < len(other); i += 8 { // one word a cache line
			sum += other[i]
		}
		b.StartTimer()
	})
	if sum == 1 {
		b.Log(sum) // keeps the reads
	}
}

// benchTickSim times the samples of BenchmarkTickSim, calling between
// (when not nil) before each.
func benchTickSim(b *testing.B, between func()) {
	cfg := DefaultConfig()
	cfg.Interval = 100 * time.Millisecond
	clk := newClock()
	sim, err := gpu.NewSimProcs(8, 200, 1, clk.Now)
	if err != nil {
		b.Fatal(err)
	}
	s, err := gpu.NewSampler(sim, gpu.SamplerOptions{Procs: sim, Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(context.Background(), Options{
		Config: cfg, Opened: &gpu.Opened{Host: sim, Sampler: s, Procs: sim, Hostname: "sim"},
		DB: filepath.Join(b.TempDir(), "h.db"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: clk.Now, NoXid: true, Signaller: &signalRecorder{},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	for range 600 * 10 / 5 { // 10 min at 5 s steps: fills the windows
		clk.Advance(5 * time.Second)
		d.tick()
	}
	b.ReportAllocs()
	b.ResetTimer()
	// The label tells the samples apart from the warm-up's in a profile:
	// go tool pprof -tagfocus phase=timed.
	pprof.Do(context.Background(), pprof.Labels("phase", "timed"), func(context.Context) {
		for range b.N {
			if between != nil {
				between()
			}
			clk.Advance(100 * time.Millisecond)
			d.tick()
		}
	})
}

// TestLoad runs the daemon over 8 GPUs × 200 processes at 10 Hz for
// VRAM_LOAD_SECONDS of simulated time (default 20 s; skipped in -short and
// under the race detector)
// and reports the CPU per sample, the heap and the history file's growth.
// The figures go to docs/serve.md; the test fails only when a sample takes
// longer than the interval on average.
func TestLoad(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("load test")
	}
	secs := 20
	if v := os.Getenv("VRAM_LOAD_SECONDS"); v != "" {
		fmt.Sscan(v, &secs)
	}
	cfg := DefaultConfig()
	cfg.Interval = 100 * time.Millisecond
	d, clk := loadDaemon(t, 8, 200, cfg)
	ticks := secs * 10
	var ru0, ru1 syscallRusage
	getRusage(&ru0)
	start := time.Now()
	for range ticks {
		clk.Advance(100 * time.Millisecond)
		d.tick()
	}
	wall := time.Since(start)
	getRusage(&ru1)
	e := &testEnv{d: d, clk: clk}
	e.flush(t)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	written := d.w.ticks.Load()
	if err := d.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	fi, err := os.Stat(d.DB())
	if err != nil {
		t.Fatal(err)
	}
	cpu := ru1.cpu() - ru0.cpu()
	perTick := cpu / time.Duration(ticks)
	t.Logf("8 GPUs × 200 processes, %d samples at 10 Hz (%d s simulated) in %v wall", ticks, secs, wall.Round(time.Millisecond))
	t.Logf("CPU %v per sample = %.1f%% of a core at 10 Hz; wall %v per sample", perTick, 100*perTick.Seconds()/0.1, wall/time.Duration(ticks))
	t.Logf("heap in use after GC: %.1f MiB; processes tracked %d", float64(ms.HeapInuse)/(1<<20), len(d.procs))
	perHist := float64(fi.Size()) / float64(written)
	t.Logf("history: %d ticks of 1,608 rows written, file %.1f MB after the checkpoint: %.1f KB per tick, %.0f MB per day at history_interval 10s (raw, before the 24 h fold)",
		written, float64(fi.Size())/1e6, perHist/1e3, perHist*8640/1e6)
	if perTick > cfg.Interval {
		t.Errorf("a sample costs %v of CPU, more than the interval", perTick)
	}
}
