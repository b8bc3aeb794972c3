package monitor

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/gpu"
)

// WatchSchema names the layout of each vram watch --json line.
const WatchSchema = "vram.watch/v1"

type watchFlags struct {
	hostFlags
	interval, sampleInterval time.Duration
	processInterval          time.Duration
	count                    int
	pids                     []uint
	format                   string
	json, csv                bool
	memoryOnly, processes    bool
}

// NewCmdWatch builds vram watch.
func NewCmdWatch() *cobra.Command {
	f := &watchFlags{}
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print GPU memory at an interval, keeping the peaks between lines",
		Long: `Print each GPU's used memory every --interval (1s down to 10ms) with the
minimum, maximum and mean over the interval. Device memory is sampled every
--sample-interval (default 5ms or the interval if smaller: one cheap NVML call
per GPU), so a spike between two printed lines still shows in MAX. Processes
are sampled every --process-interval (default 100ms: a process list costs far
more than a memory read); at shorter intervals process lines appear only on
the lines that had a process sample.

Formats: a table (default), CSV (--csv) or JSON lines (--json, schema
vram.watch/v1). --processes adds a line per process; --pid shows only the
given processes.`,
		Example: `  vram watch --interval 100ms
  vram watch --interval 10ms --csv --count 500 > mem.csv
  vram watch --pid 4242 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd); err != nil {
				return cmd.FlagErrorFunc()(cmd, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return asUsage(cmd, runWatch(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), f))
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.DurationVar(&f.interval, "interval", time.Second, "print every `duration` (10ms to 1h)")
	fl.DurationVar(&f.sampleInterval, "sample-interval", 0, "read device memory every `duration` (default 5ms, or the interval if smaller)")
	fl.DurationVar(&f.processInterval, "process-interval", 100*time.Millisecond, "sample process lists every `duration`")
	fl.IntVar(&f.count, "count", 0, "stop after `N` lines per GPU (0: until interrupted)")
	fl.UintSliceVar(&f.pids, "pid", nil, "show only these `PIDs` (implies --processes)")
	fl.StringVar(&f.format, "format", "table", "output format: table, csv or json (JSON lines)")
	fl.BoolVar(&f.json, "json", false, "same as --format json")
	fl.BoolVar(&f.csv, "csv", false, "same as --format csv")
	fl.BoolVar(&f.memoryOnly, "memory-only", false, "sample device memory only (no process lists: the cheapest mode)")
	fl.BoolVar(&f.processes, "processes", false, "add a line per process")
	return cmd
}

func (f *watchFlags) validate(cmd *cobra.Command) error {
	if f.json && f.csv {
		return fmt.Errorf("--json and --csv cannot be used together")
	}
	if f.json {
		f.format = "json"
	}
	if f.csv {
		f.format = "csv"
	}
	switch f.format {
	case "table", "csv", "json":
	default:
		return fmt.Errorf("--format %q: must be table, csv or json", f.format)
	}
	if f.interval < 10*time.Millisecond || f.interval > gpu.MaxInterval {
		return fmt.Errorf("--interval %v: must be between 10ms and 1h (NVML cannot usefully be polled faster than 10ms)", f.interval)
	}
	if f.sampleInterval != 0 && (f.sampleInterval < time.Millisecond || f.sampleInterval > f.interval) {
		return fmt.Errorf("--sample-interval %v: must be between 1ms and the interval (%v)", f.sampleInterval, f.interval)
	}
	if f.processInterval < time.Millisecond || f.processInterval > gpu.MaxInterval {
		return fmt.Errorf("--process-interval %v: must be between 1ms and 1h", f.processInterval)
	}
	if f.count < 0 {
		return fmt.Errorf("--count %d: must be 0 (until interrupted) or more", f.count)
	}
	if len(f.pids) > 0 {
		if f.memoryOnly {
			return fmt.Errorf("--pid needs process sampling: it cannot be used with --memory-only")
		}
		f.processes = true
	}
	return nil
}

func runWatch(ctx context.Context, stdout, stderr io.Writer, f *watchFlags) error {
	s, err := f.open()
	if err != nil {
		return err
	}
	defer s.host.Close()
	// One goroutine samples; more Ps only add idle spinning to every
	// timer wakeup (hundreds a second at short intervals).
	if runtime.GOMAXPROCS(0) > 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	warn(stderr, s.warnings)
	if len(s.shown) == 0 {
		return fmt.Errorf("%w: %s", errNoDevices, s.selectionNote())
	}
	if note := s.selectionNote(); note != "" {
		fmt.Fprintf(stderr, "vram: %s\n", note)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	p := newWatchPrinter(w, f.format, f.processes, f.pids, s.host.Info(), f.interval)
	if err := p.header(); err != nil {
		return err
	}
	out := func(iv *gpu.Interval) error {
		if err := p.print(iv); err != nil {
			return err
		}
		return w.Flush()
	}
	err = s.sampler.Watch(ctx, gpu.WatchOptions{Interval: f.interval, SampleInterval: f.sampleInterval, ProcessInterval: max(f.processInterval, f.sampleInterval), MemoryOnly: f.memoryOnly, Count: f.count}, out)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
}

// watchPrinter writes vram watch's output: a header, then the lines of
// each interval.
type watchPrinter struct {
	w         io.Writer
	format    string // table, csv or json
	processes bool
	want      map[uint32]bool // --pid; empty: every process
	info      gpu.HostInfo
	interval  time.Duration
	cw        *csv.Writer
	enc       *json.Encoder
}

func newWatchPrinter(w io.Writer, format string, processes bool, pids []uint, info gpu.HostInfo, interval time.Duration) *watchPrinter {
	p := &watchPrinter{w: w, format: format, processes: processes, want: map[uint32]bool{}, info: info, interval: interval}
	for _, pid := range pids {
		p.want[uint32(pid)] = true
	}
	p.cw = csv.NewWriter(w)
	p.enc = json.NewEncoder(w)
	return p
}

func (p *watchPrinter) keep(ps gpu.ProcessStat) bool {
	return p.processes && (len(p.want) == 0 || p.want[ps.Process.PID])
}

// header writes what comes before the first interval.
func (p *watchPrinter) header() error {
	switch p.format {
	case "table":
		if p.info.Simulated {
			fmt.Fprintf(p.w, "# SIMULATED HOST (seed %d): synthetic GPUs and processes\n", p.info.SimSeed)
		}
		_, err := fmt.Fprintf(p.w, "%-12s %4s %8s %10s %10s %10s %10s %7s\n", "TIME", "GPU", "PID", "USED", "MIN", "MAX", "MEAN", "SAMPLES")
		return err
	case "csv":
		_ = p.cw.Write([]string{"time", "simulated", "gpu", "pid", "used_bytes", "min_bytes", "max_bytes", "mean_bytes", "samples", "total_bytes"})
		p.cw.Flush()
		return p.cw.Error()
	}
	return nil
}

// print writes one interval's lines.
func (p *watchPrinter) print(iv *gpu.Interval) error {
	switch p.format {
	case "table":
		row := func(t time.Time, gpuIdx int, pid string, st gpu.Stat) {
			fmt.Fprintf(p.w, "%-12s %4d %8s %10s %10s %10s %10s %7d\n", t.Format("15:04:05.000"), gpuIdx, pid,
				humanBytes(st.Last), humanBytes(st.Min), humanBytes(st.Max), humanBytes(st.Mean()), st.N)
		}
		for _, d := range iv.Devices {
			if d.Used.N > 0 {
				row(iv.End, d.Index, "-", d.Used)
			}
		}
		for _, ps := range iv.Processes {
			if p.keep(ps) {
				row(iv.End, ps.Process.Device, strconv.FormatUint(uint64(ps.Process.PID), 10), ps.Memory)
			}
		}
		return nil
	case "csv":
		cw := p.cw
		sim := strconv.FormatBool(iv.Simulated)
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		t := iv.End.Format(timeFormat)
		for _, d := range iv.Devices {
			if d.Used.N > 0 {
				_ = cw.Write([]string{t, sim, strconv.Itoa(d.Index), "", u(d.Used.Last), u(d.Used.Min), u(d.Used.Max), u(d.Used.Mean()), strconv.Itoa(d.Used.N), u(d.Total)})
			}
		}
		for _, ps := range iv.Processes {
			if p.keep(ps) {
				m := ps.Memory
				_ = cw.Write([]string{t, sim, strconv.Itoa(ps.Process.Device), u(uint64(ps.Process.PID)), u(m.Last), u(m.Min), u(m.Max), u(m.Mean()), strconv.Itoa(m.N), ""})
			}
		}
		cw.Flush()
		return cw.Error()
	default:
		line := watchJSONOf(iv, p.interval)
		for _, ps := range iv.Processes {
			if p.keep(ps) {
				line.Processes = append(line.Processes, watchProcessJSON(ps))
			}
		}
		return p.enc.Encode(line)
	}
}

type watchLine struct {
	Schema          string         `json:"schema"`
	Time            string         `json:"time"`
	Start           string         `json:"start"`
	Simulated       bool           `json:"simulated"`
	IntervalSeconds float64        `json:"interval_seconds"`
	MemorySamples   int            `json:"memory_samples"`
	ProcessSamples  int            `json:"process_samples"`
	Devices         []watchDevice  `json:"devices"`
	Processes       []watchProcess `json:"processes"`
}

type watchDevice struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	statJSON
	TotalBytes uint64 `json:"total_bytes"`
}

type statJSON struct {
	UsedBytes uint64 `json:"used_bytes"`
	MinBytes  uint64 `json:"min_bytes"`
	MaxBytes  uint64 `json:"max_bytes"`
	MeanBytes uint64 `json:"mean_bytes"`
	Samples   int    `json:"samples"`
}

type watchProcess struct {
	PID     uint32 `json:"pid"`
	GPU     int    `json:"gpu"`
	User    string `json:"user,omitempty"`
	Command string `json:"command,omitempty"`
	statJSON
	Flags []string `json:"flags"`
}

func statOf(s gpu.Stat) statJSON {
	return statJSON{UsedBytes: s.Last, MinBytes: s.Min, MaxBytes: s.Max, MeanBytes: s.Mean(), Samples: s.N}
}

func watchProcessJSON(p gpu.ProcessStat) watchProcess {
	return watchProcess{PID: p.Process.PID, GPU: p.Process.Device, User: p.Process.User, Command: p.Process.Command(), statJSON: statOf(p.Memory), Flags: p.Process.Flags.Names()}
}

func watchJSONOf(iv *gpu.Interval, interval time.Duration) watchLine {
	l := watchLine{Schema: WatchSchema, Time: iv.End.Format(time.RFC3339Nano), Start: iv.Start.Format(time.RFC3339Nano), Simulated: iv.Simulated,
		IntervalSeconds: interval.Seconds(), MemorySamples: iv.MemorySamples, ProcessSamples: iv.ProcessSamples, Devices: []watchDevice{}, Processes: []watchProcess{}}
	for _, d := range iv.Devices {
		if d.Used.N > 0 {
			l.Devices = append(l.Devices, watchDevice{Index: d.Index, UUID: d.UUID, statJSON: statOf(d.Used), TotalBytes: d.Total})
		}
	}
	return l
}
