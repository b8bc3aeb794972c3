package job

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

// SchemaRun names the JSON layout of WriteJSON.
const SchemaRun = "vram.run/v2"

// Report is the JSON form of a Result (schema vram.run/v1). Sizes are in
// bytes, times in seconds after the job started.
type Report struct {
	Schema      string       `json:"schema"`
	Command     []string     `json:"command"`
	Start       time.Time    `json:"start"`
	DurationS   float64      `json:"duration_s"`
	ExitCode    int          `json:"exit_code"`
	Signal      string       `json:"signal,omitempty"`
	Memory      bool         `json:"memory_available"`
	MemoryNote  string       `json:"memory_note,omitempty"`
	IntervalS   float64      `json:"interval_s"`
	PeakBytes   uint64       `json:"peak_bytes"`
	Peak        *ReportPeak  `json:"peak"`
	SteadyBytes *uint64      `json:"steady_bytes"`
	Devices     []ReportGPU  `json:"devices"`
	Processes   []Proc       `json:"processes"`
	Others      []Proc       `json:"other_processes"`
	Leak        ReportLeak   `json:"leak"`
	OOM         ReportOOM    `json:"oom"`
	Limit       *ReportLimit `json:"limit,omitempty"`
	// Allocator is null unless a process of the job ran vram's allocator.
	Allocator *ReportAllocator `json:"allocator"`
	TimedOut  bool             `json:"timed_out"`
	Warnings  []string         `json:"warnings"`
	Samples   []ReportSmp      `json:"samples"`
	// Attempts is there only under vram run --retry-oom: every run of
	// the job, the one this report describes last.
	Attempts []Attempt `json:"attempts,omitempty"`
}

// ReportPeak is where the peak was.
type ReportPeak struct {
	TS       float64 `json:"t_s"`
	GPU      int     `json:"gpu_index"`
	GPUUUID  string  `json:"gpu_uuid"`
	PID      int     `json:"pid"`
	Command  string  `json:"command"`
	PIDBytes uint64  `json:"pid_bytes"`
}

// ReportGPU is one device the job could use.
type ReportGPU struct {
	Device
	Used          bool    `json:"used_by_job"`
	JobPeakBytes  uint64  `json:"job_peak_bytes"`
	UsedPeakBytes uint64  `json:"used_peak_bytes"`
	Above90S      float64 `json:"seconds_above_90pct"`
}

// ReportLeak is the leak verdict.
type ReportLeak struct {
	Verdict    string  `json:"verdict"` // detect.Verdict*: leak, no-leak, insufficient, unavailable
	Slope      float64 `json:"slope_bytes_per_s"`
	Confidence float64 `json:"confidence"`
	WarmupS    float64 `json:"warmup_s"`
	Reason     string  `json:"reason"`
	// Series is what the verdict was taken on: "allocated" (vram's
	// allocator's allocated memory) or "used" (the driver's figure).
	Series string `json:"series,omitempty"`
}

// ReportAllocator is what vram's allocator inside the job published
// (docs/channel.md): the highest sums of the job's allocated and reserved
// memory over the samples, and the last figures of the process kept for
// the OOM diagnosis.
type ReportAllocator struct {
	Processes          int     `json:"processes"`
	PeakAllocatedBytes uint64  `json:"peak_allocated_bytes"`
	PeakReservedBytes  uint64  `json:"peak_reserved_bytes"`
	LastTS             float64 `json:"last_t_s"`
	PID                int     `json:"pid"`
	GPU                int     `json:"gpu_index"`
	GPUUUID            string  `json:"gpu_uuid"`
	AllocatedBytes     int64   `json:"allocated_bytes"`
	ReservedBytes      int64   `json:"reserved_bytes"`
	FreeCachedBytes    int64   `json:"free_cached_bytes"`
	LargestFreeBlock   int64   `json:"largest_free_block_bytes"`
	Fragmentation      float64 `json:"fragmentation"`
	NumOOMs            int64   `json:"num_ooms"`
	NumAllocRetries    int64   `json:"num_alloc_retries"`
	CapBytes           int64   `json:"cap_bytes"`
}

// ReportOOM is the OOM verdict.
type ReportOOM struct {
	Detected    bool     `json:"detected"`
	Caught      bool     `json:"caught"`
	Cause       string   `json:"cause"`
	Message     string   `json:"message"`
	Framework   string   `json:"framework,omitempty"`
	Explanation string   `json:"explanation,omitempty"`
	Advice      string   `json:"advice,omitempty"`
	Figures     *Message `json:"figures,omitempty"`
	Holder      *Proc    `json:"holder,omitempty"`
	AtS         *float64 `json:"t_s,omitempty"`
}

// ReportLimit is what the limit did.
type ReportLimit struct {
	Limit      string  `json:"limit"`
	Hit        bool    `json:"hit"`
	TS         float64 `json:"t_s,omitempty"`
	GPU        *int    `json:"gpu_index,omitempty"`
	GPUUUID    string  `json:"gpu_uuid,omitempty"`
	Bytes      uint64  `json:"bytes,omitempty"`
	LimitBytes uint64  `json:"limit_bytes,omitempty"`
	Killed     bool    `json:"killed"`
}

// ReportSmp is one sample: the job's memory in total and per device, and
// each device's used memory.
type ReportSmp struct {
	TS    float64  `json:"t_s"`
	Bytes uint64   `json:"bytes"`
	GPUs  []uint64 `json:"job_bytes_per_gpu"`
	Used  []uint64 `json:"used_bytes_per_gpu"`
	// The job's allocated and reserved memory from vram's allocator; null
	// when no process of the job published figures at this sample.
	Allocated *uint64 `json:"allocated_bytes"`
	Reserved  *uint64 `json:"reserved_bytes"`
}

// Report builds the JSON form.
func (r *Result) Report() Report {
	rep := Report{
		Schema: SchemaRun, Command: r.Args, Start: r.Start.UTC(), DurationS: r.Duration.Seconds(),
		ExitCode: r.ExitCode, Memory: r.Memory, MemoryNote: r.MemoryNote,
		IntervalS: r.Interval.Seconds(), PeakBytes: r.Peak.Bytes, TimedOut: r.TimedOut,
		Processes: nonNil(r.Procs), Others: nonNil(r.Others), Warnings: r.Warnings,
		Devices: []ReportGPU{}, Samples: make([]ReportSmp, 0, len(r.Samples)),
		Attempts: r.Attempts,
	}
	if rep.Warnings == nil {
		rep.Warnings = []string{}
	}
	if r.Signal != 0 {
		rep.Signal = SignalName(r.Signal)
	}
	if r.Peak.Device >= 0 && r.Peak.Bytes > 0 {
		rep.Peak = &ReportPeak{TS: r.Peak.At.Seconds(), GPU: r.Devices[r.Peak.Device].Index, GPUUUID: r.Devices[r.Peak.Device].UUID,
			PID: r.Peak.PID, Command: r.Peak.Command, PIDBytes: r.Peak.PIDDev}
	}
	if r.SteadyKnown {
		v := r.Steady
		rep.SteadyBytes = &v
	}
	used := map[int]bool{}
	for _, d := range r.UsedDevices() {
		used[d] = true
	}
	above := r.AboveSeconds(0.9)
	for i, d := range r.Devices {
		g := ReportGPU{Device: d, Used: used[i], Above90S: above[i]}
		for _, s := range r.Samples {
			g.JobPeakBytes = max(g.JobPeakBytes, s.JobDev[i])
			g.UsedPeakBytes = max(g.UsedPeakBytes, s.Used[i])
		}
		rep.Devices = append(rep.Devices, g)
	}
	rep.Leak = ReportLeak{Verdict: detect.VerdictUnavailable, Reason: "no memory figures"}
	if r.Memory {
		rep.Leak = ReportLeak{Verdict: r.Leak.Kind.String(), Slope: r.Leak.Slope, Confidence: r.Leak.Confidence,
			WarmupS: r.Leak.WarmUp.Seconds(), Reason: r.Leak.Reason, Series: r.LeakSeries}
	}
	if a := r.Allocator; a != nil {
		f := a.Last
		rep.Allocator = &ReportAllocator{Processes: a.Processes, PeakAllocatedBytes: a.PeakAllocated, PeakReservedBytes: a.PeakReserved,
			LastTS: a.LastAt.Seconds(), PID: a.PID, GPU: r.Devices[a.Device].Index, GPUUUID: r.Devices[a.Device].UUID, AllocatedBytes: f.Allocated, ReservedBytes: f.Reserved,
			FreeCachedBytes: f.FreeCached, LargestFreeBlock: f.LargestFree, Fragmentation: f.Fragmentation(),
			NumOOMs: f.NumOOMs, NumAllocRetries: f.NumAllocRetries, CapBytes: f.Cap}
	}
	o := r.OOM
	rep.OOM = ReportOOM{Detected: o.Detected, Caught: o.Caught, Cause: o.Cause, Explanation: o.Explanation,
		Advice: o.Advice, Figures: o.Message, Holder: o.Holder}
	if o.Message != nil {
		rep.OOM.Message, rep.OOM.Framework = o.Message.Text, o.Message.Framework
		at := o.Message.At.Seconds()
		rep.OOM.AtS = &at
	}
	if l := r.Limit; l.Limit.Set() {
		rep.Limit = &ReportLimit{Limit: l.Limit.String(), Hit: l.Hit, Killed: l.Killed}
		if l.Hit {
			d := r.Devices[l.Device]
			rep.Limit.TS, rep.Limit.GPU, rep.Limit.GPUUUID, rep.Limit.Bytes, rep.Limit.LimitBytes = l.At.Seconds(), &d.Index, d.UUID, l.Bytes, l.Cap
		}
	}
	for _, s := range r.Samples {
		rs := ReportSmp{TS: s.T.Seconds(), Bytes: s.Job, GPUs: s.JobDev, Used: s.Used}
		if s.AllocKnown {
			a, res := s.Allocated, s.Reserved
			rs.Allocated, rs.Reserved = &a, &res
		}
		rep.Samples = append(rep.Samples, rs)
	}
	return rep
}

func nonNil(p []Proc) []Proc {
	if p == nil {
		return []Proc{}
	}
	return p
}

// WriteJSON writes the report as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r.Report()); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

// WriteCSV writes the samples: one row per sample with the time, the job's
// total, its allocated and reserved memory from vram's allocator (empty
// when unknown), and per GPU the job's memory and the device's used
// memory.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"t_s", "job_bytes", "job_allocated_bytes", "job_reserved_bytes"}
	for _, d := range r.Devices {
		i := strconv.Itoa(d.Index)
		head = append(head, "gpu"+i+"_job_bytes", "gpu"+i+"_used_bytes")
	}
	cw.Write(head)
	row := make([]string, len(head))
	for _, s := range r.Samples {
		row = row[:0]
		row = append(row, strconv.FormatFloat(s.T.Seconds(), 'f', 3, 64), strconv.FormatUint(s.Job, 10))
		if s.AllocKnown {
			row = append(row, strconv.FormatUint(s.Allocated, 10), strconv.FormatUint(s.Reserved, 10))
		} else {
			row = append(row, "", "")
		}
		for i := range r.Devices {
			row = append(row, strconv.FormatUint(s.JobDev[i], 10), strconv.FormatUint(s.Used[i], 10))
		}
		cw.Write(row)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write CSV samples: %w", err)
	}
	return nil
}

// sparkBlocks are the eight heights of a sparkline.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws values in width columns, each column the maximum of the
// values that fall in it (so a peak is never averaged away), scaled from 0
// to the maximum.
func Sparkline(values []uint64, width int) string {
	if len(values) == 0 || width <= 0 {
		return ""
	}
	if width > len(values) {
		width = len(values)
	}
	cols := make([]uint64, width)
	var top uint64
	for i, v := range values {
		c := i * width / len(values)
		cols[c] = max(cols[c], v)
		top = max(top, v)
	}
	var b strings.Builder
	for _, v := range cols {
		k := 0
		if top > 0 {
			k = int(float64(v) / float64(top) * float64(len(sparkBlocks)-1))
		}
		b.WriteRune(sparkBlocks[k])
	}
	return b.String()
}

// WriteText writes the human report (vram run prints it on stderr).
func (r *Result) WriteText(w io.Writer) {
	p := func(label, format string, a ...any) {
		fmt.Fprintf(w, "  %-11s %s\n", label, fmt.Sprintf(format, a...))
	}
	fmt.Fprintf(w, "vram run: %s\n", gpu.Printable(strings.Join(r.Args, " ")))
	status := fmt.Sprintf("exit status %d", r.ExitCode)
	if r.Signal != 0 {
		status = fmt.Sprintf("killed by %s (status %d)", SignalName(r.Signal), r.ExitCode)
	}
	p("job", "%s after %s", status, round(r.Duration))
	if !r.Memory {
		p("memory", "unavailable: %s", orUnknown(r.MemoryNote))
	} else if r.Peak.Bytes == 0 {
		p("memory", "the job held no GPU memory in %d samples", len(r.Samples))
	} else {
		d := r.Devices[r.Peak.Device]
		p("peak", "%s at %s on GPU %d (%s), pid %d %s holding %s",
			units.FormatBytes(r.Peak.Bytes), round(r.Peak.At), d.Index, d.Name, r.Peak.PID, gpu.Printable(r.Peak.Command), units.FormatBytes(r.Peak.PIDDev))
		if r.SteadyKnown {
			p("steady", "%s (median floor after %s of warm-up)", units.FormatBytes(r.Steady), round(r.Leak.WarmUp))
		} else {
			p("steady", "unknown (too short)")
		}
		vals := make([]uint64, len(r.Samples))
		for i, s := range r.Samples {
			vals[i] = s.Job
		}
		p("memory", "%s  0–%s over %s, %d samples", Sparkline(vals, 60), units.FormatBytes(r.Peak.Bytes), round(r.Duration), len(r.Samples))
		if a := r.Allocator; a != nil {
			f := a.Last
			p("allocator", "vram's allocator in %d process(es): peak allocated %s, peak reserved %s; last: allocated %s, reserved %s, largest free block %s, fragmentation %.0f%%, %d OOM(s), %d retries",
				a.Processes, units.FormatBytes(a.PeakAllocated), units.FormatBytes(a.PeakReserved), units.FormatBytes(uint64(f.Allocated)),
				units.FormatBytes(uint64(f.Reserved)), units.FormatBytes(uint64(f.LargestFree)), 100*f.Fragmentation(), f.NumOOMs, f.NumAllocRetries)
		}
		series := ""
		if r.LeakSeries == "allocated" {
			series = ", on allocated memory"
		}
		p("leak", "%s (confidence %.3f, %+.1f MiB/min%s)", r.Leak.Reason, r.Leak.Confidence, r.Leak.MiBPerMin(), series)
		above := r.AboveSeconds(0.9)
		for _, i := range r.UsedDevices() {
			p("above 90%", "GPU %d: %.1f s of %s", r.Devices[i].Index, above[i], round(r.Duration))
		}
		if len(r.Procs) > 1 {
			for _, pr := range r.Procs {
				p("process", "pid %d peak %s %s", pr.PID, units.FormatBytes(pr.Peak), gpu.Printable(pr.Command))
			}
		}
	}
	o := r.OOM
	switch {
	case o.Cause == CauseLimit:
		p("limit", "%s", o.Explanation)
		if r.Limit.Killed {
			p("", "the job ignored SIGTERM and was killed after the grace period")
		}
	case o.Detected:
		p("OOM", "yes (%s): %s: %s", o.Message.Framework, o.Cause, o.Explanation)
		p("", "advice: %s", o.Advice)
	case o.Caught:
		p("OOM", "caught: %s", o.Explanation)
	default:
		p("OOM", "no out-of-memory message")
	}
	if r.Limit.Limit.Set() && !r.Limit.Hit {
		p("limit", "%s per GPU, not reached", r.Limit.Limit)
	}
	if r.TimedOut {
		p("timeout", "vram ended the job at its timeout")
	}
	for _, wn := range r.Warnings {
		p("warning", "%s", wn)
	}
	for i, a := range r.Attempts {
		peak := "-"
		if r.Memory {
			peak = units.FormatBytes(a.Peak)
		}
		status := fmt.Sprintf("exit status %d", a.ExitCode)
		if a.Signal != "" {
			status = fmt.Sprintf("killed by %s (status %d)", a.Signal, a.ExitCode)
		}
		p("attempt", "%d: batch %d (%s): %s, %s, peak %s, %.1f s", i+1, a.Batch, a.Why, a.Outcome, status, peak, a.Seconds)
	}
}

func round(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(10 * time.Millisecond)
}

// SignalName is "SIGTERM" for syscall.SIGTERM.
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "signal " + strconv.Itoa(int(s))
}
