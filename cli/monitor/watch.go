package monitor

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/jsonstr"
	"github.com/vramhq/vram/internal/units"
)

// WatchSchema names the layout of each vram watch --json line.
const WatchSchema = "vram.watch/v2"

type watchFlags struct {
	cmdutil.HostFlags
	interval, sampleInterval time.Duration
	processInterval          time.Duration
	count                    int
	pids                     []int    // --pid as given
	pidSet                   []uint32 // --pid once checked
	format                   string
	json, csv                bool
	memoryOnly, processes    bool
}

// NewCmdWatch builds vram watch on the outside world fac.
func NewCmdWatch(fac *cmdutil.Factory) *cobra.Command {
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
vram.watch/v2); --format and --csv or --json must agree. --processes adds a
line per process; --pid shows only the given processes. --memory-only samples
no processes, so --processes, --pid and --process-interval are refused with it.`,
		Example: `  vram watch --interval 100ms
  vram watch --interval 10ms --csv --count 500 > mem.csv
  vram watch --pid 4242 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd); err != nil {
				return cmdutil.Usage(err)
			}
			ctx, stop := fac.SignalContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runWatch(ctx, fac, cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	registerHostFlags(&f.HostFlags, cmd)
	fl := cmd.Flags()
	fl.DurationVar(&f.interval, "interval", time.Second, "print every `duration` (10ms to 1h)")
	fl.DurationVar(&f.sampleInterval, "sample-interval", 0, "read device memory every `duration` (default 5ms, or the interval if smaller)")
	fl.DurationVar(&f.processInterval, "process-interval", 100*time.Millisecond, "sample process lists every `duration`")
	fl.IntVar(&f.count, "count", 0, "stop after `N` lines per GPU (0: until interrupted)")
	fl.IntSliceVar(&f.pids, "pid", nil, "show only these `PIDs` (implies --processes)")
	fl.StringVar(&f.format, "format", "table", "output format: table, csv or json (JSON lines)")
	fl.BoolVar(&f.json, "json", false, "same as --format json")
	fl.BoolVar(&f.csv, "csv", false, "same as --format csv")
	fl.BoolVar(&f.memoryOnly, "memory-only", false, "sample device memory only (no process lists: the cheapest mode)")
	fl.BoolVar(&f.processes, "processes", false, "add a line per process")
	return cmd
}

// maxPID is the largest process ID Linux hands out (PID_MAX_LIMIT).
const maxPID = 1 << 22

func (f *watchFlags) validate(cmd *cobra.Command) error {
	if f.json && f.csv {
		return fmt.Errorf("--json and --csv cannot be used together")
	}
	for _, short := range []struct {
		set    bool
		name   string
		format string
	}{{f.json, "--json", "json"}, {f.csv, "--csv", "csv"}} {
		if !short.set {
			continue
		}
		if cmd.Flags().Changed("format") && f.format != short.format {
			return fmt.Errorf("--format %s and %s cannot be used together", f.format, short.name)
		}
		f.format = short.format
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
	f.pidSet = f.pidSet[:0]
	for _, pid := range f.pids {
		if pid < 1 || pid > maxPID {
			return fmt.Errorf("--pid %d: not a process ID (PIDs are 1 to %d)", pid, maxPID)
		}
		f.pidSet = append(f.pidSet, uint32(pid))
	}
	if f.memoryOnly {
		// --memory-only turns process sampling off; these need it.
		switch {
		case len(f.pids) > 0:
			return fmt.Errorf("--pid needs process sampling: it cannot be used with --memory-only")
		case f.processes:
			return fmt.Errorf("--processes needs process sampling: it cannot be used with --memory-only")
		case cmd.Flags().Changed("process-interval"):
			return fmt.Errorf("--process-interval sets how often processes are sampled: it cannot be used with --memory-only")
		}
	}
	if len(f.pids) > 0 {
		f.processes = true
	}
	return nil
}

func runWatch(ctx context.Context, fac *cmdutil.Factory, stdout, stderr io.Writer, f *watchFlags) error {
	s, err := open(&f.HostFlags, fac)
	if err != nil {
		return err
	}
	defer s.Close()
	// One goroutine samples and prints, sleeping in the kernel between
	// samples (gpu.ClockSleep) on one P: with more Ps, the yield it makes
	// after each sleep wakes an idle thread to look for work. The figures
	// behind both choices are in docs/monitor.md.
	defer cmdutil.OneP()()
	warn(stderr, s.warnings)
	if len(s.Shown) == 0 {
		return fmt.Errorf("%w: %s", errNoDevices, s.SelectionNote())
	}
	if note := s.SelectionNote(); note != "" {
		fmt.Fprintf(stderr, "vram: %s\n", note)
	}
	// The printer writes each interval (all of its lines) with one Write
	// on stdout, so a pipe sees every line as soon as it is printed.
	p := newWatchPrinter(stdout, f.format, f.processes, f.pidSet, s.Host.Info(), f.interval)
	if err := p.header(); err != nil {
		return err
	}
	err = s.Sampler.Watch(ctx, gpu.WatchOptions{Interval: f.interval, SampleInterval: f.sampleInterval, ProcessInterval: max(f.processInterval, f.sampleInterval), MemoryOnly: f.memoryOnly, Count: f.count, Clock: gpu.ClockSleep}, p.print)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
}

// watchPrinter writes vram watch's output: a header, then the lines of
// each interval. At short intervals it runs a hundred times a second, so
// it formats by appending to one reused buffer (strconv, time.AppendFormat,
// its own JSON string quoting) and writes each interval with one Write: a
// line costs no allocation. The golden files in testdata/watch_*.golden and
// TestWatchPrinterMatchesReference hold it to the output of fmt,
// encoding/csv and encoding/json.
type watchPrinter struct {
	w         io.Writer
	format    string // table, csv or json
	processes bool
	want      map[uint32]bool // --pid; empty: every process
	info      gpu.HostInfo
	interval  time.Duration
	buf       []byte
	flags     []string
}

func newWatchPrinter(w io.Writer, format string, processes bool, pids []uint32, info gpu.HostInfo, interval time.Duration) *watchPrinter {
	p := &watchPrinter{w: w, format: format, processes: processes, want: map[uint32]bool{}, info: info, interval: interval}
	for _, pid := range pids {
		p.want[pid] = true
	}
	return p
}

func (p *watchPrinter) keep(ps *gpu.ProcessStat) bool {
	return p.processes && (len(p.want) == 0 || p.want[ps.Process.PID])
}

// Column widths of the table.
const (
	colTime, colGPU, colPID, colBytes, colSamples, colFrag = 12, 4, 8, 11, 7, 5
	tableTime                                              = "15:04:05.000"
)

// header writes what comes before the first interval.
func (p *watchPrinter) header() error {
	b := p.buf[:0]
	switch p.format {
	case "table":
		if p.info.Simulated {
			b = append(b, "# SIMULATED HOST (seed "...)
			b = strconv.AppendInt(b, p.info.SimSeed, 10)
			b = append(b, "): synthetic GPUs and processes\n"...)
		}
		b = padRight(append(b, "TIME"...), len(b), colTime)
		for _, c := range []struct {
			name  string
			width int
		}{{"GPU", colGPU}, {"PID", colPID}, {"USED", colBytes}, {"MIN", colBytes}, {"MAX", colBytes}, {"MEAN", colBytes}, {"SAMPLES", colSamples}} {
			b = append(b, ' ')
			b = padLeft(append(b, c.name...), len(b), c.width)
		}
		if p.processes {
			for _, name := range [2]string{"ALLOCATED", "RESERVED"} {
				b = append(b, ' ')
				b = padLeft(append(b, name...), len(b), colBytes)
			}
			b = append(b, ' ')
			b = padLeft(append(b, "FRAG"...), len(b), colFrag)
		}
		b = append(b, '\n')
	case "csv":
		b = append(b, "time,simulated,gpu,pid,used_bytes,min_bytes,max_bytes,mean_bytes,samples,total_bytes,allocated_bytes,allocator_reserved_bytes\n"...)
	}
	p.buf = b
	if len(b) == 0 {
		return nil
	}
	_, err := p.w.Write(b)
	return err
}

// print writes one interval's lines with one Write.
func (p *watchPrinter) print(iv *gpu.Interval) error {
	b := p.buf[:0]
	switch p.format {
	case "table":
		b = p.table(b, iv)
	case "csv":
		b = p.csv(b, iv)
	default:
		b = p.json(b, iv)
	}
	p.buf = b
	_, err := p.w.Write(b)
	return err
}

func (p *watchPrinter) table(b []byte, iv *gpu.Interval) []byte {
	row := func(b []byte, gpuIdx int, pid int64, st *gpu.Stat, alloc *statchan.Record) []byte {
		b = padRight(iv.End.AppendFormat(b, tableTime), len(b), colTime)
		b = append(b, ' ')
		b = padLeft(strconv.AppendInt(b, int64(gpuIdx), 10), len(b), colGPU)
		b = append(b, ' ')
		start := len(b)
		if pid < 0 {
			b = append(b, '-')
		} else {
			b = strconv.AppendInt(b, pid, 10)
		}
		b = padLeft(b, start, colPID)
		for _, v := range [4]uint64{st.Last, st.Min, st.Max, st.Mean()} {
			b = append(b, ' ')
			b = padLeft(units.AppendBytes(b, v), len(b), colBytes)
		}
		b = append(b, ' ')
		b = padLeft(strconv.AppendInt(b, int64(st.N), 10), len(b), colSamples)
		if p.processes {
			for _, v := range [2]int64{allocOf(alloc), reservedOf(alloc)} {
				b = append(b, ' ')
				start := len(b)
				if v < 0 {
					b = append(b, '-')
				} else {
					b = units.AppendBytes(b, uint64(v))
				}
				b = padLeft(b, start, colBytes)
			}
			b = append(b, ' ')
			start := len(b)
			if alloc == nil {
				b = append(b, '-')
			} else {
				b = strconv.AppendFloat(b, alloc.Fragmentation()*100, 'f', 0, 64)
				b = append(b, '%')
			}
			b = padLeft(b, start, colFrag)
		}
		return append(b, '\n')
	}
	for i := range iv.Devices {
		if d := &iv.Devices[i]; d.Used.N > 0 {
			b = row(b, d.Index, -1, &d.Used, nil)
		}
	}
	for i := range iv.Processes {
		if ps := &iv.Processes[i]; p.keep(ps) {
			b = row(b, ps.Process.Device, int64(ps.Process.PID), &ps.Memory, ps.Process.Alloc)
		}
	}
	return b
}

// allocOf and reservedOf are a channel record's allocated and reserved
// bytes, -1 without a record.
func allocOf(r *statchan.Record) int64 {
	if r == nil {
		return -1
	}
	return r.Allocated
}

func reservedOf(r *statchan.Record) int64 {
	if r == nil {
		return -1
	}
	return r.Reserved
}

// csv writes rows the way encoding/csv would: no field of these rows
// needs quoting (numbers, a time, a boolean, empty fields).
func (p *watchPrinter) csv(b []byte, iv *gpu.Interval) []byte {
	// pid < 0: a device row (empty pid); device rows carry the total.
	row := func(b []byte, gpuIdx int, pid int64, st *gpu.Stat, total uint64, alloc *statchan.Record) []byte {
		b = iv.End.AppendFormat(b, timeFormat)
		b = append(b, ',')
		b = strconv.AppendBool(b, iv.Simulated)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(gpuIdx), 10)
		b = append(b, ',')
		if pid >= 0 {
			b = strconv.AppendInt(b, pid, 10)
		}
		for _, v := range [4]uint64{st.Last, st.Min, st.Max, st.Mean()} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(st.N), 10)
		b = append(b, ',')
		if pid < 0 {
			b = strconv.AppendUint(b, total, 10)
		}
		for _, v := range [2]int64{allocOf(alloc), reservedOf(alloc)} {
			b = append(b, ',')
			if v >= 0 {
				b = strconv.AppendInt(b, v, 10)
			}
		}
		return append(b, '\n')
	}
	for i := range iv.Devices {
		if d := &iv.Devices[i]; d.Used.N > 0 {
			b = row(b, d.Index, -1, &d.Used, d.Total, nil)
		}
	}
	for i := range iv.Processes {
		if ps := &iv.Processes[i]; p.keep(ps) {
			b = row(b, ps.Process.Device, int64(ps.Process.PID), &ps.Memory, 0, ps.Process.Alloc)
		}
	}
	return b
}

// json writes one vram.watch/v2 line, byte for byte what encoding/json
// writes for the schema's struct (field order, omitted empty user and
// command, HTML-safe string escaping).
func (p *watchPrinter) json(b []byte, iv *gpu.Interval) []byte {
	b = append(b, `{"schema":"`+WatchSchema+`","time":"`...)
	b = iv.End.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","start":"`...)
	b = iv.Start.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","simulated":`...)
	b = strconv.AppendBool(b, iv.Simulated)
	b = append(b, `,"interval_seconds":`...)
	b = appendJSONFloat(b, p.interval.Seconds())
	b = append(b, `,"memory_samples":`...)
	b = strconv.AppendInt(b, int64(iv.MemorySamples), 10)
	b = append(b, `,"process_samples":`...)
	b = strconv.AppendInt(b, int64(iv.ProcessSamples), 10)
	b = append(b, `,"devices":[`...)
	first := true
	for i := range iv.Devices {
		d := &iv.Devices[i]
		if d.Used.N == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"gpu_index":`...)
		b = strconv.AppendInt(b, int64(d.Index), 10)
		b = append(b, `,"gpu_uuid":`...)
		b = jsonstr.Append(b, d.UUID)
		b = appendStatJSON(b, &d.Used)
		b = append(b, `,"total_bytes":`...)
		b = strconv.AppendUint(b, d.Total, 10)
		b = append(b, '}')
	}
	b = append(b, `],"processes":[`...)
	first = true
	for i := range iv.Processes {
		ps := &iv.Processes[i]
		if !p.keep(ps) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		pr := &ps.Process
		b = append(b, `{"pid":`...)
		b = strconv.AppendUint(b, uint64(pr.PID), 10)
		b = append(b, `,"gpu_index":`...)
		b = strconv.AppendInt(b, int64(pr.Device), 10)
		b = append(b, `,"gpu_uuid":`...)
		b = jsonstr.Append(b, pr.DeviceUUID)
		if pr.User != "" {
			b = append(b, `,"user":`...)
			b = jsonstr.Append(b, pr.User)
		}
		if hasCommand(pr) {
			b = append(b, `,"command":`...)
			b = appendJSONCommand(b, pr)
		}
		b = appendStatJSON(b, &ps.Memory)
		b = append(b, `,"flags":[`...)
		p.flags = pr.Flags.AppendNames(p.flags[:0])
		for j, name := range p.flags {
			if j > 0 {
				b = append(b, ',')
			}
			b = jsonstr.Append(b, name)
		}
		b = append(b, `],"allocated_bytes":`...)
		b = appendJSONInt(b, allocOf(pr.Alloc))
		b = append(b, `,"reserved_bytes":`...)
		b = appendJSONInt(b, reservedOf(pr.Alloc))
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendJSONInt appends v, or null for a negative v.
func appendJSONInt(b []byte, v int64) []byte {
	if v < 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, v, 10)
}

func appendStatJSON(b []byte, st *gpu.Stat) []byte {
	b = append(b, `,"used_bytes":`...)
	b = strconv.AppendUint(b, st.Last, 10)
	b = append(b, `,"min_bytes":`...)
	b = strconv.AppendUint(b, st.Min, 10)
	b = append(b, `,"max_bytes":`...)
	b = strconv.AppendUint(b, st.Max, 10)
	b = append(b, `,"mean_bytes":`...)
	b = strconv.AppendUint(b, st.Mean(), 10)
	b = append(b, `,"samples":`...)
	return strconv.AppendInt(b, int64(st.N), 10)
}

// hasCommand reports whether p.Command() is not empty, without joining.
func hasCommand(p *gpu.Process) bool {
	if len(p.Cmdline) > 0 {
		return len(p.Cmdline) > 1 || p.Cmdline[0] != ""
	}
	return p.Comm != ""
}

// appendJSONCommand quotes p.Command() without building it: the command
// line's arguments joined by spaces, or [comm].
func appendJSONCommand(b []byte, p *gpu.Process) []byte {
	b = append(b, '"')
	if len(p.Cmdline) > 0 {
		for i, a := range p.Cmdline {
			if i > 0 {
				b = append(b, ' ')
			}
			b = jsonstr.AppendBody(b, a)
		}
	} else {
		b = append(b, '[')
		b = jsonstr.AppendBody(b, p.Comm)
		b = append(b, ']')
	}
	return append(b, '"')
}

// appendJSONFloat writes f as encoding/json does: the shortest decimal
// that reads back as f, in exponent form only below 1e-6 or from 1e21.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-07 -> e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

var spaces = []byte("                                ")

// padLeft right-aligns b[start:] in width columns (%*s for ASCII), like
// fmt: nothing is cut when it is wider.
func padLeft(b []byte, start, width int) []byte {
	n := len(b) - start
	if n >= width {
		return b
	}
	pad := width - n
	b = append(b, spaces[:pad]...)
	copy(b[start+pad:], b[start:start+n])
	copy(b[start:start+pad], spaces)
	return b
}

// padRight left-aligns b[start:] in width columns (%-*s for ASCII).
func padRight(b []byte, start, width int) []byte {
	if n := len(b) - start; n < width {
		b = append(b, spaces[:width-n]...)
	}
	return b
}
