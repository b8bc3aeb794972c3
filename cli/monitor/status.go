package monitor

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

// StatusSchema names the JSON layout of vram status --json.
const StatusSchema = "vram.status/v2"

type statusFlags struct {
	cmdutil.HostFlags
	json, csv, accounting, wide bool
}

// NewCmdStatus builds vram status on the outside world fac.
func NewCmdStatus(fac *cmdutil.Factory) *cobra.Command {
	f := &statusFlags{}
	f.AllowNoGPU = true // the table says "no GPU shown"
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show who holds GPU memory now",
		Long: `Show every GPU's memory (used, reserved by the driver, free) and the processes
holding it, largest first, with their owner, command, container and flags:
zombie, orphaned, jupyter, idle, no-such-process (listed by the driver but
not in /proc: another PID namespace). Unattributed memory is what the driver
counts as used but lists under no visible process.

CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES restrict the GPUs shown;
--all-gpus shows all. --accounting adds the driver's exact per-process peak
memory (including exited processes) where accounting mode is on.`,
		Example: `  vram status
  vram status --json | jq '.processes[] | select(.flags | index("idle"))'
  vram status --accounting
  vram status --simulate 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.json && f.csv {
				return cmdutil.Usagef("--json and --csv cannot be used together")
			}
			return runStatus(fac, cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	registerHostFlags(&f.HostFlags, cmd)
	fl := cmd.Flags()
	fl.BoolVar(&f.json, "json", false, "print JSON (schema "+StatusSchema+"; sizes in bytes)")
	fl.BoolVar(&f.csv, "csv", false, "print CSV: one row per device, process and unattributed amount")
	fl.BoolVar(&f.accounting, "accounting", false, "add the driver's per-process peak memory (accounting mode)")
	fl.BoolVar(&f.wide, "wide", false, "do not shorten command lines")
	return cmd
}

func runStatus(fac *cmdutil.Factory, stdout, stderr io.Writer, f *statusFlags) error {
	s, err := open(&f.HostFlags, fac)
	if err != nil {
		return err
	}
	defer s.Close()
	snap, err := s.Sampler.Sample()
	if err != nil {
		return err
	}
	var acc []gpu.AccountingDevice
	if f.accounting {
		acc = s.Sampler.Accounting()
	}
	warnings := append(append([]string{}, s.warnings...), snap.Warnings...)
	switch {
	case f.json:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(statusJSONOf(s, snap, acc, warnings, f.accounting))
	case f.csv:
		warn(stderr, warnings)
		return writeStatusCSV(stdout, snap)
	}
	warn(stderr, warnings)
	return writeStatusText(stdout, s, snap, acc, f)
}

func headerLine(s *session, t time.Time) string {
	info := s.Host.Info()
	var b strings.Builder
	fmt.Fprintf(&b, "vram status  %s", t.Format(timeFormat))
	if s.Hostname != "" {
		fmt.Fprintf(&b, "  host %s", s.Hostname)
	}
	if info.Simulated {
		fmt.Fprintf(&b, "  SIMULATED HOST (seed %d): synthetic GPUs and processes", info.SimSeed)
	} else {
		fmt.Fprintf(&b, "  driver %s  CUDA %s", info.Driver, info.CUDA)
	}
	return b.String()
}

func writeStatusText(w io.Writer, s *session, snap *gpu.Snapshot, acc []gpu.AccountingDevice, f *statusFlags) error {
	fmt.Fprintln(w, headerLine(s, snap.Time))
	if note := s.SelectionNote(); note != "" {
		fmt.Fprintln(w, note)
	}
	fmt.Fprintln(w)
	if len(snap.Devices) == 0 {
		fmt.Fprintln(w, "no GPU shown")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tUSED\tRESERVED\tFREE\tTOTAL\tUTIL")
	anyReserved := false
	for _, d := range snap.Devices {
		if d.Err != nil {
			fmt.Fprintf(tw, "%d\t%s\t(unreadable: %v)\t\t\t\t\t\n", d.Index, d.Name, d.Err)
			continue
		}
		res := "n/a"
		if d.Memory.ReservedKnown {
			res = units.FormatBytes(d.Memory.Reserved)
			anyReserved = true
		}
		util := "n/a"
		if d.Utilization.Known {
			util = fmt.Sprintf("%d%%", d.Utilization.GPU)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Index, d.Name, bar(d.Memory, 30),
			units.FormatBytes(d.Memory.Used), res, units.FormatBytes(d.Memory.Free), units.FormatBytes(d.Memory.Total), util)
	}
	tw.Flush()
	if anyReserved {
		fmt.Fprintln(w, "bar: # used by processes and their contexts, = reserved by the driver, . free")
	} else {
		fmt.Fprintln(w, "bar: # used (includes the driver's reserve: this driver does not report it apart), . free")
	}
	fmt.Fprintln(w)

	if len(snap.Processes) == 0 {
		fmt.Fprintln(w, "no processes hold GPU memory")
	} else {
		showContainer, showAlloc := false, false
		for _, p := range snap.Processes {
			if p.Container.Runtime != "" {
				showContainer = true
			}
			if p.Alloc != nil {
				showAlloc = true
			}
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		hdr := "PID\tUSER\tGPU\tMEMORY\t"
		if showAlloc {
			hdr += "ALLOCATED\tRESERVED\tFRAG\t"
		}
		hdr += "FLAGS\t"
		if showContainer {
			hdr += "CONTAINER\t"
		}
		fmt.Fprintln(tw, hdr+"COMMAND")
		for _, p := range snap.Processes {
			mem := "n/a"
			if p.MemoryKnown {
				mem = units.FormatBytes(p.Memory)
			}
			flags := p.Flags.String()
			if flags == "" {
				flags = "-"
			}
			user := gpu.Printable(p.User)
			if user == "" {
				user = "?"
			}
			row := fmt.Sprintf("%d\t%s\t%d\t%s\t", p.PID, user, p.Device, mem)
			if showAlloc {
				row += allocCells(p.Alloc)
			}
			row += flags + "\t"
			if showContainer {
				row += containerLabel(p.Container) + "\t"
			}
			cmd := p.DisplayCommand()
			if cmd == "" {
				cmd = "?"
			}
			if !f.wide {
				cmd = shorten(cmd, 60)
			}
			fmt.Fprintln(tw, row+cmd)
		}
		tw.Flush()
		if showAlloc {
			fmt.Fprintln(w, allocLegend)
		}
	}
	for _, d := range snap.Devices {
		if d.Err == nil && d.Unattributed > 0 {
			fmt.Fprintf(w, "GPU %d: %s used but not listed under any process above (contexts of processes the driver does not show here, e.g. other PID namespaces, and driver bookkeeping)\n", d.Index, units.FormatBytes(d.Unattributed))
		}
	}
	if acc != nil {
		fmt.Fprintln(w)
		writeAccountingText(w, acc, snap)
	}
	return nil
}

// allocLegend explains the allocator's columns under a table that has them.
const allocLegend = "ALLOCATED, RESERVED, FRAG: vram's allocator inside the process (its statistics channel); FRAG is the share of RESERVED cached free outside the largest free block; - : not on vram's allocator"

// allocCells are the ALLOCATED, RESERVED and FRAG cells of a process
// ("-" for a process not on vram's allocator), tab-terminated.
func allocCells(r *statchan.Record) string {
	if r == nil {
		return "-\t-\t-\t"
	}
	return units.FormatBytes(uint64(r.Allocated)) + "\t" + units.FormatBytes(uint64(r.Reserved)) + "\t" + fragText(r.Figures) + "\t"
}

// fragText is the fragmentation as a whole percentage.
func fragText(f statchan.Figures) string {
	return strconv.FormatFloat(100*f.Fragmentation(), 'f', 0, 64) + "%"
}

func containerLabel(c gpu.Container) string {
	switch {
	case c.PodUID != "" && c.ID != "":
		return fmt.Sprintf("pod %.8s/%s %.12s", c.PodUID, c.Runtime, c.ID)
	case c.PodUID != "":
		return fmt.Sprintf("pod %.8s", c.PodUID)
	case c.ID != "":
		return fmt.Sprintf("%s %.12s", c.Runtime, c.ID)
	}
	return "-"
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

func commandOf(snap *gpu.Snapshot, pid uint32) string {
	for _, p := range snap.Processes {
		if p.PID == pid {
			return p.Command()
		}
	}
	return ""
}

func writeAccountingText(w io.Writer, acc []gpu.AccountingDevice, snap *gpu.Snapshot) {
	fmt.Fprintln(w, "driver accounting (exact peak memory per process, including exited ones)")
	for _, d := range acc {
		switch {
		case d.Err != nil && !d.Enabled:
			fmt.Fprintf(w, "GPU %d: accounting unavailable: %v\n", d.Index, d.Err)
			continue
		case !d.Enabled:
			fmt.Fprintf(w, "GPU %d: %s\n", d.Index, gpu.EnableHint)
			continue
		case d.Err != nil:
			fmt.Fprintf(w, "GPU %d: accounting on, but reading it failed: %v\n", d.Index, d.Err)
			continue
		case len(d.Records) == 0:
			fmt.Fprintf(w, "GPU %d: accounting on, no processes recorded yet\n", d.Index)
			continue
		}
		fmt.Fprintf(w, "GPU %d:\n", d.Index)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PID\tPEAK MEMORY\tSTATE\tSTARTED\tRAN\tGPU UTIL\tCOMMAND")
		for _, r := range d.Records {
			state, ran := "running", "-"
			if !r.Running {
				state, ran = "exited", r.Duration.Round(time.Second).String()
			}
			started := "-"
			if !r.StartTime.IsZero() {
				started = r.StartTime.Format(time.RFC3339)
			}
			cmd := "-"
			if r.Running {
				if c := gpu.Printable(commandOf(snap, r.PID)); c != "" {
					cmd = shorten(c, 50)
				}
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%d%%\t%s\n", r.PID, units.FormatBytes(r.MaxMemory), state, started, ran, r.GPUUtil, cmd)
		}
		tw.Flush()
	}
}

// JSON (schema vram.status/v2; documented in docs/monitor.md and docs/json.md).

type statusJSON struct {
	Schema     string           `json:"schema"`
	Time       string           `json:"time"`
	Simulated  bool             `json:"simulated"`
	SimSeed    *int64           `json:"simulation_seed,omitempty"`
	Host       hostJSON         `json:"host"`
	Visible    visibleJSON      `json:"visible"`
	Devices    []deviceJSON     `json:"devices"`
	Processes  []processJSON    `json:"processes"`
	Accounting []accountingJSON `json:"accounting,omitempty"`
	Warnings   []string         `json:"warnings"`
}

// hostJSON is the host's name, its driver side (backend and versions, as
// gpu.HostInfo writes them) and how many GPUs it has.
type hostJSON struct {
	Hostname string `json:"hostname"`
	gpu.HostInfo
	GPUs int `json:"gpus"`
}

type visibleJSON struct {
	All    bool   `json:"all"`
	Source string `json:"source,omitempty"`
	Shown  []int  `json:"shown"`
}

type memoryJSON struct {
	TotalBytes        uint64  `json:"total_bytes"`
	UsedBytes         uint64  `json:"used_bytes"`
	FreeBytes         uint64  `json:"free_bytes"`
	ReservedBytes     *uint64 `json:"reserved_bytes"`
	ProcessBytes      uint64  `json:"process_bytes"`
	UnattributedBytes uint64  `json:"unattributed_bytes"`
}

type deviceJSON struct {
	Index       int         `json:"gpu_index"`
	UUID        string      `json:"gpu_uuid"`
	Name        string      `json:"name"`
	Memory      *memoryJSON `json:"memory"`
	Utilization *utilJSON   `json:"utilization"`
	Processes   int         `json:"processes"`
	IdleMethod  string      `json:"idle_method"`
	Error       string      `json:"error,omitempty"`
}

type utilJSON struct {
	GPU    uint32 `json:"gpu_percent"`
	Memory uint32 `json:"memory_percent"`
}

type processJSON struct {
	PID         uint32         `json:"pid"`
	GPU         int            `json:"gpu_index"`
	GPUUUID     string         `json:"gpu_uuid"`
	MemoryBytes *uint64        `json:"memory_bytes"`
	Type        string         `json:"type"`
	User        string         `json:"user,omitempty"`
	UID         *uint32        `json:"uid,omitempty"`
	Command     string         `json:"command,omitempty"`
	Cmdline     []string       `json:"cmdline,omitempty"`
	Cgroup      string         `json:"cgroup,omitempty"`
	Container   *gpu.Container `json:"container,omitempty"`
	StartTime   string         `json:"start_time,omitempty"`
	PPID        int            `json:"ppid,omitempty"`
	State       string         `json:"state,omitempty"`
	Flags       []string       `json:"flags"`
	SMPercent   *uint32        `json:"sm_percent,omitempty"`
	MemPercent  *uint32        `json:"memory_util_percent,omitempty"`
	// From vram's allocator inside the process; null when it is not on it.
	AllocatedBytes *int64         `json:"allocated_bytes"`
	ReservedBytes  *int64         `json:"reserved_bytes"`
	Allocator      *AllocatorJSON `json:"allocator,omitempty"`
}

// AllocatorJSON is what the statistics channel says of one process on one
// device, in the JSON of vram status and vram watch: the shape every tool
// uses (statchan.JSON).
type AllocatorJSON = statchan.JSON

type accountingJSON struct {
	GPU     int                `json:"gpu_index"`
	UUID    string             `json:"gpu_uuid"`
	Enabled bool               `json:"enabled"`
	Hint    string             `json:"hint,omitempty"`
	Error   string             `json:"error,omitempty"`
	Records []accountingRecord `json:"records"`
}

type accountingRecord struct {
	PID             uint32  `json:"pid"`
	MaxMemoryBytes  uint64  `json:"max_memory_bytes"`
	Running         bool    `json:"running"`
	StartTime       string  `json:"start_time,omitempty"`
	DurationSeconds float64 `json:"duration_seconds"`
	GPUUtilPercent  uint32  `json:"gpu_util_percent"`
	MemUtilPercent  uint32  `json:"memory_util_percent"`
	Command         string  `json:"command,omitempty"`
}

func statusJSONOf(s *session, snap *gpu.Snapshot, acc []gpu.AccountingDevice, warnings []string, wantAcc bool) statusJSON {
	info := snap.Host
	out := statusJSON{
		Schema:    StatusSchema,
		Time:      snap.Time.Format(time.RFC3339Nano),
		Simulated: info.Simulated,
		Host:      hostJSON{Hostname: s.Hostname, HostInfo: info, GPUs: s.Total},
		Visible:   visibleJSON{All: len(s.Shown) == s.Total, Source: s.Visible.Source, Shown: append([]int{}, s.Shown...)},
		Devices:   []deviceJSON{},
		Processes: []processJSON{},
		Warnings:  append([]string{}, warnings...),
	}
	if info.Simulated {
		seed := info.SimSeed
		out.SimSeed = &seed
	}
	for _, d := range snap.Devices {
		dj := deviceJSON{Index: d.Index, UUID: d.UUID, Name: d.Name, Processes: d.Processes, IdleMethod: d.IdleMethod.String()}
		if d.Err != nil {
			dj.Error = d.Err.Error()
		} else {
			m := &memoryJSON{TotalBytes: d.Memory.Total, UsedBytes: d.Memory.Used, FreeBytes: d.Memory.Free, ProcessBytes: d.ProcessMemory, UnattributedBytes: d.Unattributed}
			if d.Memory.ReservedKnown {
				r := d.Memory.Reserved
				m.ReservedBytes = &r
			}
			dj.Memory = m
			if d.Utilization.Known {
				dj.Utilization = &utilJSON{GPU: d.Utilization.GPU, Memory: d.Utilization.Memory}
			}
		}
		out.Devices = append(out.Devices, dj)
	}
	for _, p := range snap.Processes {
		pj := processJSON{PID: p.PID, GPU: p.Device, GPUUUID: p.DeviceUUID, Type: p.Kind.String(), User: p.User, Command: p.Command(),
			Cmdline: p.Cmdline, Cgroup: p.Cgroup, PPID: p.PPID, State: p.State, Flags: p.Flags.Names()}
		if p.MemoryKnown {
			m := p.Memory
			pj.MemoryBytes = &m
		}
		if p.Flags&gpu.FlagNoSuchProcess == 0 && p.User != "" {
			uid := p.UID
			pj.UID = &uid
		}
		if p.Container.Runtime != "" {
			c := p.Container
			pj.Container = &c
		}
		if !p.StartTime.IsZero() {
			pj.StartTime = p.StartTime.Format(time.RFC3339)
		}
		if p.UtilKnown {
			sm, mu := p.SM, p.MemUtil
			pj.SMPercent, pj.MemPercent = &sm, &mu
		}
		if r := p.Alloc; r != nil {
			a, res := r.Allocated, r.Reserved
			pj.AllocatedBytes, pj.ReservedBytes, pj.Allocator = &a, &res, statchan.JSONOf(r)
		}
		out.Processes = append(out.Processes, pj)
	}
	if wantAcc {
		out.Accounting = []accountingJSON{}
		for _, d := range acc {
			aj := accountingJSON{GPU: d.Index, UUID: d.UUID, Enabled: d.Enabled, Records: []accountingRecord{}}
			if !d.Enabled && d.Err == nil {
				aj.Hint = gpu.EnableHint
			}
			if d.Err != nil {
				aj.Error = d.Err.Error()
			}
			for _, r := range d.Records {
				rec := accountingRecord{PID: r.PID, MaxMemoryBytes: r.MaxMemory, Running: r.Running, DurationSeconds: r.Duration.Seconds(), GPUUtilPercent: r.GPUUtil, MemUtilPercent: r.MemUtil}
				if !r.StartTime.IsZero() {
					rec.StartTime = r.StartTime.Format(time.RFC3339)
				}
				if r.Running {
					rec.Command = commandOf(snap, r.PID)
				}
				aj.Records = append(aj.Records, rec)
			}
			out.Accounting = append(out.Accounting, aj)
		}
	}
	return out
}

// CSV: one table, the record column says what a row is.
var statusCSVHeader = []string{"time", "simulated", "record", "gpu", "uuid", "name", "pid", "user", "memory_bytes", "total_bytes", "used_bytes", "free_bytes", "reserved_bytes", "flags", "container_id", "command", "allocated_bytes", "allocator_reserved_bytes"}

func writeStatusCSV(w io.Writer, snap *gpu.Snapshot) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(statusCSVHeader)
	t := snap.Time.Format(time.RFC3339Nano)
	sim := strconv.FormatBool(snap.Host.Simulated)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, d := range snap.Devices {
		if d.Err != nil {
			continue
		}
		res := ""
		if d.Memory.ReservedKnown {
			res = u(d.Memory.Reserved)
		}
		_ = cw.Write([]string{t, sim, "device", strconv.Itoa(d.Index), d.UUID, d.Name, "", "", u(d.Memory.Used), u(d.Memory.Total), u(d.Memory.Used), u(d.Memory.Free), res, "", "", "", "", ""})
	}
	for _, p := range snap.Processes {
		mem := ""
		if p.MemoryKnown {
			mem = u(p.Memory)
		}
		alloc, res := "", ""
		if r := p.Alloc; r != nil {
			alloc, res = strconv.FormatInt(r.Allocated, 10), strconv.FormatInt(r.Reserved, 10)
		}
		_ = cw.Write([]string{t, sim, "process", strconv.Itoa(p.Device), p.DeviceUUID, "", strconv.FormatUint(uint64(p.PID), 10), gpu.Printable(p.User), mem, "", "", "", "", strings.Join(p.Flags.Names(), ";"), p.Container.ID, p.DisplayCommand(), alloc, res})
	}
	for _, d := range snap.Devices {
		if d.Err == nil {
			_ = cw.Write([]string{t, sim, "unattributed", strconv.Itoa(d.Index), d.UUID, "", "", "", u(d.Unattributed), "", "", "", "", "", "", "", "", ""})
		}
	}
	cw.Flush()
	return cw.Error()
}
