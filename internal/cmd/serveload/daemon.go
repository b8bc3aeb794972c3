package main

// Starting and stopping the real vram serve binary, and talking to it over
// HTTP like its clients do.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// daemonSpec is how to start one vram serve.
type daemonSpec struct {
	Bin      string   // the vram binary
	GPUs     int      // --simulate
	Procs    int      // VRAM_SIMULATE_PROCS
	Interval string   // --interval
	Config   string   // --config; "" for none
	DB       string   // --db
	Addr     string   // --addr
	Log      string   // the daemon's standard error goes here (appended)
	Extra    []string // more flags
}

func (s daemonSpec) args() []string {
	a := []string{"serve", "--simulate", fmt.Sprint(s.GPUs), "--addr", s.Addr, "--db", s.DB}
	if s.Interval != "" {
		a = append(a, "--interval", s.Interval)
	}
	if s.Config != "" {
		a = append(a, "--config", s.Config)
	}
	return append(a, s.Extra...)
}

// commandLine is the command as a shell would take it, for the report.
func (s daemonSpec) commandLine() string {
	env := ""
	if s.Procs > 0 {
		env = fmt.Sprintf("VRAM_SIMULATE_PROCS=%d ", s.Procs)
	}
	return env + "GODEBUG=gctrace=1 " + s.Bin + " " + strings.Join(s.args(), " ")
}

// runConfig is the configuration file of a run. The sample interval is
// written there as well as passed with --interval, so that the file says
// on its own how the run sampled.
func runConfig(interval string, history time.Duration) []byte {
	b := []byte("version: 1\n")
	if interval != "" {
		b = fmt.Appendf(b, "interval: %s\n", interval)
	}
	return fmt.Appendf(b, "history_interval: %v\n", history)
}

// daemon is one running vram serve.
type daemon struct {
	spec    daemonSpec
	cmd     *exec.Cmd
	heap    *heapWatch
	logf    *os.File
	started time.Time
	exited  chan struct{}
	err     error // Wait's, once exited is closed
}

func startDaemon(s daemonSpec) (*daemon, error) {
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	cmd := exec.Command(s.Bin, s.args()...)
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	if s.Procs > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("VRAM_SIMULATE_PROCS=%d", s.Procs))
	}
	d := &daemon{spec: s, cmd: cmd, heap: &heapWatch{out: logf}, logf: logf, exited: make(chan struct{})}
	cmd.Stdout = logf
	cmd.Stderr = d.heap
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", s.Bin, err)
	}
	d.started = time.Now()
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.exited)
	}()
	return d, nil
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

func (d *daemon) url(path string) string { return "http://" + d.spec.Addr + path }

// waitHealthy waits until /healthz answers 200 (the first sample exists).
func (d *daemon) waitHealthy(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("vram serve exited before it was healthy: %v (log: %s)", d.err, d.spec.Log)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", d.url("/healthz"), nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vram serve not healthy after %v (log: %s)", within, d.spec.Log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (d *daemon) kill() error {
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 %d: %w", d.pid(), err)
	}
	<-d.exited
	return nil
}

// stop sends SIGTERM and waits up to within; the exit status is returned
// (-1 when it had to be killed).
func (d *daemon) stop(within time.Duration) (int, time.Duration, error) {
	t0 := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return -1, 0, fmt.Errorf("SIGTERM %d: %w", d.pid(), err)
	}
	select {
	case <-d.exited:
		return d.cmd.ProcessState.ExitCode(), time.Since(t0), nil
	case <-time.After(within):
		d.kill()
		return -1, time.Since(t0), fmt.Errorf("vram serve did not stop within %v of SIGTERM; killed", within)
	}
}

// get fetches a path and returns its body, how long the whole response
// took, and an error for any status but 200.
func get(ctx context.Context, url string) ([]byte, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	took := time.Since(t0)
	if err != nil {
		return nil, took, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != 200 {
		return b, took, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return b, took, nil
}

// getJSON fetches a path and decodes its JSON body into v.
func getJSON(ctx context.Context, url string, v any) error {
	b, _, err := get(ctx, url)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// scalars parses a Prometheus text exposition and returns every sample
// without labels (the daemon's own counters and gauges) by metric name.
func scalars(body []byte) (map[string]float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 {
				continue
			}
			switch {
			case m.Counter != nil:
				out[name] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[name] = m.Gauge.GetValue()
			case m.Untyped != nil:
				out[name] = m.Untyped.GetValue()
			}
		}
	}
	return out, nil
}

// sseClient holds one /events stream open and counts what arrives, like
// a dashboard tab left open.
type sseClient struct {
	mu      sync.Mutex
	events  map[string]int
	bytes   int64
	pings   int
	err     error
	stopped chan struct{}
}

func watchEvents(ctx context.Context, url string) *sseClient {
	c := &sseClient{events: map[string]int{}, stopped: make(chan struct{})}
	go func() {
		defer close(c.stopped)
		err := c.run(ctx, url)
		if ctx.Err() != nil {
			err = nil
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	return c
}

func (c *sseClient) run(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long data line: count it and read on.
			c.mu.Lock()
			c.bytes += int64(len(line))
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		c.bytes += int64(len(line))
		if ev, ok := strings.CutPrefix(string(line), "event: "); ok {
			c.events[strings.TrimSpace(ev)]++
		} else if strings.HasPrefix(string(line), ": ping") {
			c.pings++
		}
		c.mu.Unlock()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("GET %s: the stream ended", url)
			}
			return fmt.Errorf("GET %s: %w", url, err)
		}
	}
}

type sseStats struct {
	Events map[string]int
	Bytes  int64
	Pings  int
	Err    string
}

func (c *sseClient) stats() sseStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := sseStats{Events: map[string]int{}, Bytes: c.bytes, Pings: c.pings}
	for k, v := range c.events {
		s.Events[k] = v
	}
	if c.err != nil {
		s.Err = c.err.Error()
	}
	return s
}

// prepareRun makes the output directory out, writes the daemon's
// configuration there and points spec at it, and starts the run from an
// empty history file and log (spec.DB and spec.Log default to files in out).
func prepareRun(out string, spec *daemonSpec, historyInterval time.Duration) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	spec.Config = filepath.Join(out, "config.yaml")
	if err := os.WriteFile(spec.Config, runConfig(spec.Interval, historyInterval), 0o644); err != nil {
		return fmt.Errorf("write configuration: %w", err)
	}
	if spec.DB == "" {
		spec.DB = filepath.Join(out, "history.db")
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(spec.DB + suffix)
	}
	if spec.Log == "" {
		spec.Log = filepath.Join(out, "daemon.log")
	}
	os.Remove(spec.Log)
	return nil
}
