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
	want := map[uint32]bool{}
	for _, p := range f.pids {
		want[uint32(p)] = true
	}
	keep := func(p gpu.ProcessStat) bool { return len(want) == 0 || want[p.Process.PID] }

	w := bufio.NewWriter(stdout)
	defer w.Flush()
	info := s.host.Info()
	var out func(iv *gpu.Interval) error
	switch f.format {
	case "table":
		if info.Simulated {
			fmt.Fprintf(w, "# SIMULATED HOST (seed %d): synthetic GPUs and processes\n", info.SimSeed)
		}
		fmt.Fprintf(w, "%-12s %4s %8s %10s %10s %10s %10s %7s\n", "TIME", "GPU", "PID", "USED", "MIN", "MAX", "MEAN", "SAMPLES")
		row := func(t time.Time, gpuIdx int, pid string, st gpu.Stat) {
			fmt.Fprintf(w, "%-12s %4d %8s %10s %10s %10s %10s %7d\n", t.Format("15:04:05.000"), gpuIdx, pid,
				humanBytes(st.Last), humanBytes(st.Min), humanBytes(st.Max), humanBytes(st.Mean()), st.N)
		}
		out = func(iv *gpu.Interval) error {
			for _, d := range iv.Devices {
				if d.Used.N > 0 {
					row(iv.End, d.Index, "-", d.Used)
				}
			}
			if f.processes {
				for _, p := range iv.Processes {
					if keep(p) {
						row(iv.End, p.Process.Device, strconv.FormatUint(uint64(p.Process.PID), 10), p.Memory)
					}
				}
			}
			return w.Flush()
		}
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"time", "simulated", "gpu", "pid", "used_bytes", "min_bytes", "max_bytes", "mean_bytes", "samples", "total_bytes"})
		sim := strconv.FormatBool(info.Simulated)
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		out = func(iv *gpu.Interval) error {
			t := iv.End.Format(timeFormat)
			for _, d := range iv.Devices {
				if d.Used.N > 0 {
					_ = cw.Write([]string{t, sim, strconv.Itoa(d.Index), "", u(d.Used.Last), u(d.Used.Min), u(d.Used.Max), u(d.Used.Mean()), strconv.Itoa(d.Used.N), u(d.Total)})
				}
			}
			if f.processes {
				for _, p := range iv.Processes {
					if keep(p) {
						m := p.Memory
						_ = cw.Write([]string{t, sim, strconv.Itoa(p.Process.Device), u(uint64(p.Process.PID)), u(m.Last), u(m.Min), u(m.Max), u(m.Mean()), strconv.Itoa(m.N), ""})
					}
				}
			}
			cw.Flush()
			if err := cw.Error(); err != nil {
				return err
			}
			return w.Flush()
		}
	case "json":
		enc := json.NewEncoder(w)
		out = func(iv *gpu.Interval) error {
			line := watchJSONOf(iv, f.interval)
			line.Processes = line.Processes[:0]
			for _, p := range iv.Processes {
				if f.processes && keep(p) {
					line.Processes = append(line.Processes, watchProcessJSON(p))
				}
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
			return w.Flush()
		}
	}
	err = s.sampler.Watch(ctx, gpu.WatchOptions{Interval: f.interval, SampleInterval: f.sampleInterval, ProcessInterval: max(f.processInterval, f.sampleInterval), MemoryOnly: f.memoryOnly, Count: f.count}, out)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
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
