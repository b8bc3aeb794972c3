// Package replay is the vram replay command: it replays allocation traces
// through the caching allocator under named policies and prints, per trace
// and policy, the memory a job needed (live and reserved peaks, their ratio,
// the smallest device it completes on), the driver calls and the host time
// per operation. The engine is package replay (top level); this package reads the
// flags, opens the traces and renders the results.
package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/cudadev"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/cuda"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/replay"
)

// DefaultCapacity is the simulated device's size: an H200's 141 GiB.
const DefaultCapacity = "141GiB"

type flags struct {
	policy, capacity, device string
	json, noMinCapacity      bool
	progress, verify, stream bool
}

// NewCmd builds vram replay on the outside world fac.
func NewCmd(fac *cmdutil.Factory) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "replay TRACE...",
		Short: "Replay allocation traces: memory needed, fragmentation, smallest device",
		Long: `Replay recorded or synthetic allocation traces through vram's caching allocator
and report, per trace and policy: operations, peak live bytes (the sizes the
program asked for, alive at once), peak reserved bytes (what the allocator held
from the device), their ratio, the smallest capacity on which the trace still
completes (found by bisection over the allocator's cap, about 15 replays; skip
it with --no-min-capacity) and its ratio to live, driver calls, host time per
allocation or free (p50, p99; the timer's own cost subtracted) and the bytes
left live when the trace ends.

TRACE is an RMM log (CSV, plain or gzip), a PyTorch memory snapshot pickle
(torch.cuda.memory._dump_snapshot; plain or gzip; detected by its content),
or a synthetic workload:
  ` + strings.ReplaceAll(replay.SynthSyntax, "\n", "\n  ") + `

Policies (--policy a,b or all):
` + policyHelp() + `
By default the traces run on a simulated device of --capacity bytes (timings
are then host-side figures of the allocator alone); --device cuda runs them on
GPU 0 through the CUDA driver.

The timed pass (p50, p99, total s) replays an in-memory copy of the trace
loaded before its clock starts, 24 bytes per record (240 MB for ten million
records); --stream reads the file from disk instead, in constant memory, and
total s then includes reading and parsing it (with --no-min-capacity; the
bisection always keeps the copy).`,
		Example: `  vram replay examples/traces/lstm_varlen.csv.gz
  vram replay --policy all --json examples/traces/*.csv.gz
  vram replay --capacity 40GiB --no-min-capacity examples/traces/snapshot.pickle
  vram replay 'synth:batchwalk:start=4,end=16' synth:kvcache

(examples/traces/ holds small recorded traces: run these from the repository's root.)`,
		Args: cmdutil.NeedArgs("replay: name at least one trace (a file or synth:KIND)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.OutOrStdout(), cmd.ErrOrStderr(), fac.IsTerminal, f, cmd.Flags().Changed("capacity"), args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.policy, "policy", "default", "allocator policies, comma-separated, or all ("+strings.Join(replay.PolicyNames(), ", ")+")")
	fl.StringVar(&f.capacity, "capacity", DefaultCapacity, "size of the simulated device (e.g. 40GiB, 80GB)")
	fl.StringVar(&f.device, "device", "sim", "device to replay on: sim (simulated) or cuda (GPU 0)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object per trace and policy (JSON lines; sizes in bytes)")
	fl.BoolVar(&f.noMinCapacity, "no-min-capacity", false, "skip the bisection for the smallest capacity")
	fl.BoolVar(&f.progress, "progress", false, "report progress on stderr even when it is not a terminal")
	fl.BoolVar(&f.verify, "verify", false, "write a pattern into both ends of every allocation and check it before the free (in the timed pass; total s then includes it)")
	fl.BoolVar(&f.stream, "stream", false, "stream a log file from disk in the timed pass instead of replaying an in-memory copy (24 bytes per record); total s then includes parsing")
	return cmd
}

func policyHelp() string {
	var b strings.Builder
	for _, p := range replay.Policies() {
		conf := p.Conf
		if conf == "" {
			conf = "no settings"
		}
		fmt.Fprintf(&b, "  %-9s %s (%s)\n", p.Name, p.Doc, conf)
	}
	return b.String()
}

func run(stdout, stderr io.Writer, isTerminal func(any) bool, f *flags, capacitySet bool, args []string) error {
	pols, err := replay.ParsePolicies(f.policy)
	if err != nil {
		return cmdutil.Usagef("--policy: %w", err)
	}
	capacity, err := alloc.ParseSize(f.capacity)
	if err != nil {
		return cmdutil.Usagef("--capacity: %w", err)
	}
	if capacity == 0 {
		return cmdutil.Usagef("--capacity: must be more than 0")
	}
	var (
		devFunc  replay.DeviceFunc
		devLabel string
		procMem  func() (uint64, error)
	)
	switch f.device {
	case "sim":
		devFunc = replay.SimDevice(capacity)
		devLabel = "simulated device of " + units.FormatBytes(capacity)
	case "cuda":
		if capacitySet {
			return cmdutil.Usagef("--capacity applies to --device sim only (the GPU's own memory is the capacity with --device cuda)")
		}
		d, err := cudadev.Open(0)
		if err != nil {
			if errors.Is(err, cuda.ErrNoDriver) {
				return fmt.Errorf("--device cuda: no CUDA driver on this machine (%v); use --device sim", err)
			}
			return fmt.Errorf("--device cuda: %w", err)
		}
		defer d.Close()
		devFunc = func() (alloc.Device, error) { return d, nil }
		devLabel = "GPU 0 through the CUDA driver"
		if read, closeNVML, err := processMemory(); err == nil {
			defer closeNVML()
			procMem = read
		} else {
			fmt.Fprintf(stderr, "vram replay: NVML cannot give this process's own device memory (%v): the leak check compares the device's free memory, which other processes move too\n", err)
		}
	default:
		return cmdutil.Usagef("--device: unknown device %q (want sim or cuda)", f.device)
	}

	// Open every trace first, so that a missing file fails before hours of
	// replay.
	type named struct {
		spec  string
		trace *replay.Trace
	}
	var traces []named
	for _, spec := range args {
		ts, err := replay.Open(spec)
		if err != nil {
			if strings.HasPrefix(spec, "synth:") {
				return cmdutil.Usage(err)
			}
			return err
		}
		for _, t := range ts {
			traces = append(traces, named{spec, t})
		}
	}

	opt := replay.MeasureOptions{Device: devFunc, MinCapacity: !f.noMinCapacity, Time: true, Verify: f.verify, Stream: f.stream, ProcessMemory: procMem}
	if f.progress || isTerminal(stderr) {
		opt.Progress = func(msg string) { fmt.Fprintln(stderr, "vram replay:", msg) }
	}
	enc := json.NewEncoder(stdout)
	var reports []*replay.Report
	for _, t := range traces {
		for _, p := range pols {
			rep, err := replay.Measure(t.trace, p, opt)
			if err != nil {
				return fmt.Errorf("%s: %w", t.spec, err)
			}
			reports = append(reports, rep)
			if f.json {
				if err := enc.Encode(jsonOf(rep)); err != nil {
					return err
				}
			}
		}
	}
	if !f.json {
		writeTable(stdout, reports, devLabel, opt.MinCapacity)
	}
	notes := notesOf(reports)
	for _, n := range notes.lines {
		fmt.Fprintln(stderr, "vram replay:", n)
	}
	var fails []string
	if notes.ooms > 0 {
		fails = append(fails, fmt.Sprintf("%d of %d replays ran out of memory on the %s", notes.ooms, len(reports), devLabel))
	}
	if notes.mismatches > 0 {
		fails = append(fails, fmt.Sprintf("%d allocations lost their contents", notes.mismatches))
	}
	if notes.leaks > 0 {
		fails = append(fails, fmt.Sprintf("%d replays did not give all device memory back", notes.leaks))
	}
	if len(fails) > 0 {
		return errors.New(strings.Join(fails, "; "))
	}
	return nil
}

// Schema names the layout of each vram replay --json line (docs/json.md).
const Schema = "vram.replay/v1"

// Record is the JSON object of one trace and policy.
type Record struct {
	Schema              string   `json:"schema"` // Schema
	Trace               string   `json:"trace"`
	Policy              string   `json:"policy"`
	Ops                 int64    `json:"ops"`
	PeakLiveBytes       uint64   `json:"peak_live_bytes"`
	PeakReservedBytes   uint64   `json:"peak_reserved_bytes"`
	ReservedOverLive    float64  `json:"reserved_over_live"`
	MinCapacityBytes    *uint64  `json:"min_capacity_bytes"`     // null: not measured or not found
	MinCapacityOverLive *float64 `json:"min_capacity_over_live"` // null likewise
	DeviceCalls         uint64   `json:"device_calls"`           // Malloc + Free + VMM
	DeviceCallsVMM      uint64   `json:"device_calls_vmm"`       // of which virtual-memory calls
	// DeviceCallsByKind splits DeviceCalls by driver function; null when
	// the device did not count them (the allocator's statistics then give
	// the total).
	DeviceCallsByKind   *CallsByKind `json:"device_calls_by_kind"`
	NsPerOpP50          int64        `json:"ns_per_op_p50"`
	NsPerOpP99          int64        `json:"ns_per_op_p99"`
	TotalSeconds        float64      `json:"total_seconds"` // wall time of the timed pass
	LeakedBytes         uint64       `json:"leaked_bytes"`
	DeviceLeakedBytes   int64        `json:"device_leaked_bytes"` // never negative
	DeviceDeltaBytes    int64        `json:"device_delta_bytes"`  // signed: memory another process freed shows here
	DeviceCheck         string       `json:"device_check"`        // "process" (own figure) or "device" (free memory)
	Verify              bool         `json:"verify"`
	VerifiedAllocations int64        `json:"verified_allocations"`
	VerifyMismatches    int64        `json:"verify_mismatches"`
	// OutOfMemory says the trace did not fit the device: the replay
	// stopped at the allocation OOMRecord (1-based index of the record in
	// the trace) of OOMRequestBytes; both are null otherwise.
	OutOfMemory     bool    `json:"out_of_memory"`
	OOMRecord       *int64  `json:"oom_record"`
	OOMRequestBytes *uint64 `json:"oom_request_bytes"`
}

// CallsByKind is device_calls_by_kind: one count per driver function,
// under the names bench/torchreplay gives the same functions in its
// "driver_calls" object (CUPTI's counts of PyTorch's calls), so that the
// two programs' lines compare key by key.
type CallsByKind struct {
	Malloc      uint64 `json:"malloc"`       // cuMemAlloc
	Free        uint64 `json:"free"`         // cuMemFree
	Reserve     uint64 `json:"reserve"`      // cuMemAddressReserve
	AddressFree uint64 `json:"address_free"` // cuMemAddressFree
	Create      uint64 `json:"create"`       // cuMemCreate
	Release     uint64 `json:"release"`      // cuMemRelease
	Map         uint64 `json:"map"`          // cuMemMap
	SetAccess   uint64 `json:"set_access"`   // cuMemSetAccess
	Unmap       uint64 `json:"unmap"`        // cuMemUnmap
}

func byKindOf(c replay.DeviceCalls) *CallsByKind {
	if !c.FromDevice {
		return nil
	}
	k := c.ByKind
	return &CallsByKind{Malloc: k.Malloc, Free: k.Free, Reserve: k.AddressReserve, AddressFree: k.AddressFree,
		Create: k.MemCreate, Release: k.MemRelease, Map: k.MemMap, SetAccess: k.MemSetAccess, Unmap: k.MemUnmap}
}

func jsonOf(r *replay.Report) Record {
	rec := Record{
		Schema: Schema, Trace: r.Trace, Policy: r.Policy, Ops: r.Ops,
		PeakLiveBytes: r.PeakLiveBytes, PeakReservedBytes: r.PeakReservedBytes,
		ReservedOverLive:    round4(r.ReservedOverLive()),
		DeviceCalls:         r.DeviceCalls.Total(),
		DeviceCallsVMM:      r.DeviceCalls.VMM,
		DeviceCallsByKind:   byKindOf(r.DeviceCalls),
		TotalSeconds:        float64(int64(r.WallSeconds*1e6+0.5)) / 1e6,
		LeakedBytes:         r.LeakedBytes,
		DeviceLeakedBytes:   r.DeviceLeakedBytes,
		DeviceDeltaBytes:    r.DeviceDeltaBytes,
		DeviceCheck:         r.DeviceCheck,
		Verify:              r.Verified,
		VerifiedAllocations: r.VerifiedAllocations,
		VerifyMismatches:    r.VerifyMismatches,
	}
	if r.Latency != nil {
		rec.NsPerOpP50, rec.NsPerOpP99 = r.Latency.P50, r.Latency.P99
	}
	if r.MinCapacity != nil && r.MinCapacity.Found {
		b, ratio := r.MinCapacity.Bytes, round4(r.MinCapacityOverLive())
		rec.MinCapacityBytes, rec.MinCapacityOverLive = &b, &ratio
	}
	if r.OOM != nil {
		at, size := r.OOM.Record, r.OOM.Size
		rec.OutOfMemory, rec.OOMRecord, rec.OOMRequestBytes = true, &at, &size
	}
	return rec
}

func round4(x float64) float64 { return float64(int64(x*10000+0.5)) / 10000 }

func writeTable(w io.Writer, reports []*replay.Report, devLabel string, minCap bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TRACE\tPOLICY\tOPS\tPEAK LIVE\tPEAK RESERVED\tRES/LIVE\tMIN CAPACITY\tMIN/LIVE\tDRIVER CALLS\tNS/OP P50\tP99\tTOTAL S\tLEAKED\t")
	for _, r := range reports {
		minc, ratio := "-", "-"
		switch {
		case r.OOM != nil:
			minc, ratio = "did not fit", "-"
		case r.MinCapacity != nil && r.MinCapacity.Found:
			minc, ratio = units.FormatBytes(r.MinCapacity.Bytes), fmt.Sprintf("%.3f", r.MinCapacityOverLive())
		case r.MinCapacity != nil:
			minc = "not found"
		}
		p50, p99 := "-", "-"
		if r.Latency != nil {
			p50, p99 = fmt.Sprint(r.Latency.P50), fmt.Sprint(r.Latency.P99)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.3f\t%s\t%s\t%d\t%s\t%s\t%.3f\t%s\t\n",
			r.Trace, r.Policy, r.Ops, units.FormatBytes(r.PeakLiveBytes), units.FormatBytes(r.PeakReservedBytes),
			r.ReservedOverLive(), minc, ratio, r.DeviceCalls.Total(), p50, p99, r.WallSeconds, units.FormatBytes(r.LeakedBytes))
	}
	tw.Flush()
	fmt.Fprintf(w, "\non the %s; ns/op is host time per allocate or free; total s is the wall time of the timed pass", devLabel)
	if len(reports) > 0 && reports[0].Latency != nil {
		fmt.Fprintf(w, " (timer overhead of %d ns subtracted)", reports[0].Latency.TimerOverhead)
	}
	fmt.Fprintln(w)
	if minCap {
		fmt.Fprintln(w, "min capacity: smallest allocator cap (max_bytes) under which the trace completed, bisected to 0.1% of live or 2 MiB, whichever is larger")
	}
}

type notes struct {
	lines            []string
	ooms, mismatches int
	leaks            int
}

// notesOf lists what the table does not show: skipped records, unknown
// frees, reused pointers, out-of-memory stops, bisections without an answer.
func notesOf(reports []*replay.Report) notes {
	var n notes
	for _, r := range reports {
		who := r.Trace + " " + r.Policy
		if r.OOM != nil {
			n.ooms++
			n.lines = append(n.lines, fmt.Sprintf("%s: ran out of memory at record %d (%s); the replay stopped there", who, r.OOM.Record, units.FormatBytes(r.OOM.Size)))
		}
		if r.SkippedFailures > 0 {
			n.lines = append(n.lines, fmt.Sprintf("%s: skipped %d allocate failure records", who, r.SkippedFailures))
		}
		if r.UnknownFrees > 0 {
			n.lines = append(n.lines, fmt.Sprintf("%s: %d frees of pointers not allocated in the trace were skipped", who, r.UnknownFrees))
		}
		if r.ReusedPointers > 0 {
			n.lines = append(n.lines, fmt.Sprintf("%s: %d allocations reused a pointer still live (the earlier allocation counts as leaked)", who, r.ReusedPointers))
		}
		if r.VerifyMismatches > 0 {
			n.mismatches += int(r.VerifyMismatches)
			n.lines = append(n.lines, fmt.Sprintf("%s: %d of %d allocations checked had lost their contents before their free", who, r.VerifyMismatches, r.VerifiedAllocations))
		}
		if r.DeviceLeakedBytes > 0 {
			n.leaks++
			if r.DeviceCheck == "process" {
				n.lines = append(n.lines, fmt.Sprintf("%s: this process held %d bytes more device memory after the replay than before it", who, r.DeviceLeakedBytes))
			} else {
				n.lines = append(n.lines, fmt.Sprintf("%s: the device had %d bytes less free memory after the replay than before it (other processes on the GPU move this figure too)", who, r.DeviceLeakedBytes))
			}
		}
		if r.MinCapacity != nil && !r.MinCapacity.Found {
			n.lines = append(n.lines, fmt.Sprintf("%s: the trace did not complete under any cap up to twice its uncapped reserved peak (%s); no smallest capacity", who, units.FormatBytes(r.MinCapacity.Bytes)))
		}
	}
	return n
}
