package main

// The load run: one daemon over a simulated host, a scraper, an event
// stream, and the kernel's view of the daemon every few seconds.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// loadOptions configure one load run.
type loadOptions struct {
	Spec            daemonSpec
	HistoryInterval time.Duration // written to the run's configuration file
	Duration        time.Duration
	ScrapeEvery     time.Duration // the Prometheus-like scraper's period
	MonitorEvery    time.Duration // how often /proc and the file sizes are read
	StateRequests   int           // GET /api/v1/state requests timed at the end
	NoEvents        bool          // no /events client
	Out             string        // directory for the configuration, logs, series
}

// point is one reading of the monitor.
type point struct {
	At        time.Duration // since the daemon was healthy
	CPUPct    float64       // of one core, since the previous point
	CPU       time.Duration // the daemon's CPU time so far (utime + stime)
	RSS       uint64
	HeapLive  float64 // MB, at the newest GC
	DB, WAL   int64
	Load1     float64
	Samples   float64 // vram_daemon_samples_total at the newest scrape
	Ticks     float64 // vram_history_ticks_written_total at the newest scrape
	TickDrops float64
}

// loadResult is what a load run measured.
type loadResult struct {
	Command         string
	HistoryInterval time.Duration
	Events          bool          // an /events client was connected
	Wall            time.Duration // from healthy to the end of the steady phase
	LoadAvg         []float64     // 1-minute load averages read during the run

	CPUPct, CPUPctLastMin float64       // of one core
	CPUPerSample          time.Duration // CPU time / samples taken, in the steady phase
	RSSEnd, RSSPeak, HWM  uint64
	Heap                  heapStats

	Samples, Overruns, SampleFails float64
	TicksWritten, TicksDropped     float64
	WriteFailures, EventDrops      float64
	SampleDur                      []float64 // vram_scrape_duration_seconds at each scrape

	Scrapes     []time.Duration // /metrics response times
	ScrapeBytes int
	SeriesCount int // samples in the /metrics exposition

	StateLatency []time.Duration
	StateBytes   int
	StateErrors  int

	SSE sseStats

	StopExit int
	StopTook time.Duration
	StopErr  string

	DBBytes, WALBytes int64 // after the clean stop (checkpointed)
	Integrity         string
	TicksInDB         int64
	Tables            map[string]int64
	FreeBytes         int64
	RawPerTick        float64 // bytes of device_samples + process_samples per tick
	TickRate          float64 // ticks per second in the file: (ticks - 1) / (newest - oldest)
	AggPerMinute      float64 // bytes of the minute tables per minute, after folding
	AggMinutes        int64
	Series            []point
	Problems          []string // anything that went wrong; the report lists them
}

func (r *loadResult) problem(format string, a ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
}

func runLoad(ctx context.Context, o loadOptions) (*loadResult, error) {
	if err := prepareRun(o.Out, &o.Spec, o.HistoryInterval); err != nil {
		return nil, err
	}
	r := &loadResult{Command: o.Spec.commandLine(), HistoryInterval: o.HistoryInterval, Events: !o.NoEvents}

	d, err := startDaemon(o.Spec)
	if err != nil {
		return nil, err
	}
	defer func() {
		select {
		case <-d.exited:
		default:
			d.kill()
		}
	}()
	if err := d.waitHealthy(ctx, time.Minute); err != nil {
		return nil, err
	}
	t0 := time.Now()
	u0, err := readUsage("/proc", d.pid())
	if err != nil {
		return nil, err
	}
	samples0, err := samplesTaken(ctx, d)
	if err != nil {
		return nil, err
	}

	runCtx, stopClients := context.WithCancel(ctx)
	defer stopClients()
	var sse *sseClient
	if !o.NoEvents {
		sse = watchEvents(runCtx, d.url("/events"))
	}

	var mu sync.Mutex // guards r's scrape fields and last
	var last map[string]float64
	var wg sync.WaitGroup
	wg.Go(func() { // the scraper
		tk := time.NewTicker(o.ScrapeEvery)
		defer tk.Stop()
		for {
			body, took, err := get(runCtx, d.url("/metrics"))
			if runCtx.Err() != nil {
				return
			}
			mu.Lock()
			if err != nil {
				r.problem("scrape at %v: %v", time.Since(t0).Round(time.Second), err)
			} else if m, err := scalars(body); err != nil {
				r.problem("scrape at %v: %v", time.Since(t0).Round(time.Second), err)
			} else {
				r.Scrapes = append(r.Scrapes, took)
				r.ScrapeBytes = len(body)
				r.SeriesCount = strings.Count(string(body), "\nvram_") + 1
				r.SampleDur = append(r.SampleDur, m["vram_scrape_duration_seconds"])
				last = m
			}
			mu.Unlock()
			select {
			case <-runCtx.Done():
				return
			case <-tk.C:
			}
		}
	})
	prev, prevAt := u0, t0
	wg.Go(func() { // the monitor
		tk := time.NewTicker(o.MonitorEvery)
		defer tk.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tk.C:
			}
			now := time.Now()
			u, err := readUsage("/proc", d.pid())
			if err != nil {
				mu.Lock()
				r.problem("monitor: %v", err)
				mu.Unlock()
				return
			}
			l1, _ := loadAvg("/proc")
			db, wal := fileSizes(o.Spec.DB)
			p := point{At: now.Sub(t0), CPU: u.CPU, CPUPct: 100 * (u.CPU - prev.CPU).Seconds() / now.Sub(prevAt).Seconds(),
				RSS: u.RSS, HeapLive: d.heap.stats().LastLive, DB: db, WAL: wal, Load1: l1}
			mu.Lock()
			p.Samples, p.Ticks, p.TickDrops = last["vram_daemon_samples_total"], last["vram_history_ticks_written_total"], last["vram_history_ticks_dropped_total"]
			r.Series = append(r.Series, p)
			r.LoadAvg = append(r.LoadAvg, l1)
			r.RSSPeak = max(r.RSSPeak, u.RSS)
			mu.Unlock()
			prev, prevAt = u, now
		}
	})

	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.exited:
		return nil, fmt.Errorf("vram serve exited during the run: %v (log: %s)", d.err, o.Spec.Log)
	case <-time.After(o.Duration):
	}

	// The steady phase ends here: CPU and memory before the latency probe.
	t1 := time.Now()
	u1, err := readUsage("/proc", d.pid())
	if err != nil {
		return nil, err
	}
	samples1, err := samplesTaken(ctx, d)
	if err != nil {
		return nil, err
	}
	if samples1 > samples0 {
		r.CPUPerSample = time.Duration(float64(u1.CPU-u0.CPU) / (samples1 - samples0))
	}
	r.Wall = t1.Sub(t0)
	r.CPUPct = 100 * (u1.CPU - u0.CPU).Seconds() / r.Wall.Seconds()
	mu.Lock()
	r.RSSEnd, r.HWM = u1.RSS, u1.HWM
	r.RSSPeak = max(r.RSSPeak, u1.RSS)
	series := append([]point(nil), r.Series...)
	mu.Unlock()
	// CPU over the last minute: from the newest point at least 60 s old.
	for i := len(series) - 1; i >= 0; i-- {
		if r.Wall-series[i].At >= time.Minute {
			r.CPUPctLastMin = 100 * (u1.CPU - series[i].CPU).Seconds() / (r.Wall - series[i].At).Seconds()
			break
		}
	}

	// /api/v1/state under the same load, one request after the other.
	for range o.StateRequests {
		b, took, err := get(ctx, d.url("/api/v1/state"))
		if err != nil {
			r.StateErrors++
			continue
		}
		r.StateLatency = append(r.StateLatency, took)
		r.StateBytes = len(b)
	}
	body, _, err := get(ctx, d.url("/metrics"))
	if err != nil {
		return nil, err
	}
	m, err := scalars(body)
	if err != nil {
		return nil, err
	}
	r.Samples, r.Overruns, r.SampleFails = m["vram_daemon_samples_total"], m["vram_daemon_sample_overruns_total"], m["vram_daemon_sample_failures_total"]
	r.TicksWritten, r.TicksDropped = m["vram_history_ticks_written_total"], m["vram_history_ticks_dropped_total"]
	r.WriteFailures, r.EventDrops = m["vram_history_write_failures_total"], m["vram_events_dropped_total"]
	if u, err := readUsage("/proc", d.pid()); err == nil {
		r.HWM = u.HWM
	}
	r.Heap = d.heap.stats()
	stopClients()
	wg.Wait()
	if sse != nil {
		<-sse.stopped
		r.SSE = sse.stats()
	}

	exit, took, err := d.stop(30 * time.Second)
	r.StopExit, r.StopTook = exit, took
	if err != nil {
		r.StopErr = err.Error()
		r.problem("%v", err)
	}
	r.DBBytes, r.WALBytes = fileSizes(o.Spec.DB)
	if r.Integrity, err = integrity(ctx, o.Spec.DB); err != nil {
		r.problem("%v", err)
	}
	if r.TicksInDB, err = count(ctx, o.Spec.DB, "SELECT COUNT(DISTINCT t) FROM device_samples"); err != nil {
		r.problem("%v", err)
	}
	if r.Tables, r.FreeBytes, err = tableBytes(ctx, o.Spec.DB); err != nil {
		r.problem("%v", err)
	} else if r.TicksInDB > 0 {
		r.RawPerTick = float64(r.Tables["device_samples"]+r.Tables["process_samples"]) / float64(r.TicksInDB)
	}
	if r.TickRate, err = tickRate(ctx, o.Spec.DB); err != nil {
		r.problem("%v", err)
	}
	if r.AggPerMinute, r.AggMinutes, err = aggregates(ctx, o.Spec.DB, o.Out); err != nil {
		r.problem("%v", err)
	}
	os.Remove(filepath.Join(o.Out, "folded.db"))
	if r.Integrity != "ok" {
		r.problem("integrity_check: %s", r.Integrity)
	}
	if int64(r.TicksWritten) > r.TicksInDB {
		r.problem("the daemon reported %v ticks committed, the file has %d", r.TicksWritten, r.TicksInDB)
	}
	if r.StopExit != 0 {
		r.problem("vram serve exited with status %d after SIGTERM", r.StopExit)
	}
	if r.SSE.Err != "" {
		r.problem("event stream: %s", r.SSE.Err)
	}
	return r, nil
}

// samplesTaken scrapes the daemon's count of samples.
func samplesTaken(ctx context.Context, d *daemon) (float64, error) {
	body, _, err := get(ctx, d.url("/metrics"))
	if err != nil {
		return 0, err
	}
	m, err := scalars(body)
	if err != nil {
		return 0, err
	}
	return m["vram_daemon_samples_total"], nil
}
