package job

// The supervisor. See doc.go for an overview.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/proc"
)

// DefaultInterval is the default sampling interval of a job's memory.
const DefaultInterval = 50 * time.Millisecond

// DefaultGrace is how long a job has between SIGTERM and SIGKILL when vram
// ends it (limit, trial timeout, cancellation).
const DefaultGrace = 10 * time.Second

// Spec describes one job to run and watch.
type Spec struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH.
	Args []string
	Env  []string // nil: vram's environment
	Dir  string   // "": vram's working directory

	// Stdin and Stdout are handed to the job as they are when they are
	// *os.File (the job sees the same terminal). Stderr receives the
	// job's standard error chunk by chunk as it is read, unchanged, before
	// the OOM scanner sees it. nil discards.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Warn receives vram's own one-line notices while the job runs (limit
	// warnings, signals sent). nil discards.
	Warn io.Writer

	// Source reads GPU memory; nil runs the job without memory figures
	// (SourceNote says why in the result).
	Source     Source
	SourceNote string
	// Procs supplies command lines of the processes seen (nil: the
	// kernel's short command name only).
	Procs gpu.ProcSource
	// ProcRoot is where /proc is mounted; default "/proc".
	ProcRoot string
	// Interval is the sampling period; default DefaultInterval.
	Interval time.Duration

	// Signals are forwarded to the job's main process as they arrive.
	Signals <-chan os.Signal

	// Limit caps the tree's memory on each GPU: a warning at 90 %,
	// SIGTERM to the tree at the limit, SIGKILL after Grace.
	Limit Limit
	// LimitHeadroom, when set, is asked at each check for bytes per GPU
	// the tree may hold beyond Limit before it is ended: the CUDA context
	// of processes whose allocator enforces Limit itself (vram run
	// --allocator vram).
	LimitHeadroom func() uint64
	// Timeout ends the job the same way after this long; 0 never.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL; default DefaultGrace.
	Grace time.Duration

	// Subreaper makes vram adopt orphaned descendants of the job, so that
	// a process whose parent exits before the first scan sees it is still
	// found. It is a property of the whole vram process (prctl); the
	// command-line tool sets it, a library caller may not want it.
	Subreaper bool

	// Leak configures the leak detector; zero fields use detect's defaults.
	Leak detect.Config

	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Sample is one reading of the job's memory.
type Sample struct {
	T      time.Duration // since the job started
	Job    uint64        // the tree's memory on all GPUs
	JobDev []uint64      // the tree's memory per device (position in Devices)
	Used   []uint64      // each device's used memory (all processes)
	// Allocated and Reserved are the sums over the tree's processes that
	// run vram's allocator, from its statistics channel; AllocKnown is
	// false when none published figures at this sample.
	Allocated, Reserved uint64
	AllocKnown          bool
}

// AllocatorFigures is what vram's allocator inside the job published
// (vram run --allocator vram, or a job that loads libvram itself).
type AllocatorFigures struct {
	// Processes counts the (process, GPU) pairs that published.
	Processes int
	// PeakAllocated and PeakReserved are the highest sums over the
	// samples; the allocator's own peaks are in Last.
	PeakAllocated, PeakReserved uint64
	// Last are the figures of one process on one GPU at the last sample
	// that had them: the one with the most out-of-memory errors, else the
	// one with most reserved memory. The OOM diagnosis reads them.
	Last   statchan.Figures
	LastAt time.Duration
	PID    int
	Device int // position in Devices
}

// Point is one value of a process's memory series.
type Point struct {
	T     time.Duration
	Bytes uint64
}

// Proc is one process that held GPU memory during the job.
type Proc struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	// Devices are the positions (in Result.Devices) it used.
	Devices []int         `json:"-"`
	GPUs    []int         `json:"gpu_indexes"` // NVML indices
	Peak    uint64        `json:"peak_bytes"`
	PeakAt  time.Duration `json:"-"`
	First   time.Duration `json:"-"`
	Last    time.Duration `json:"-"`
	// Series is the process's memory on all GPUs at every sample where
	// it held some (tree processes only).
	Series []Point `json:"-"`
	// AtEnd is what it held at the last sample where the job held memory
	// (other processes only).
	AtEnd uint64 `json:"at_job_end_bytes,omitempty"`
	start uint64
}

// Peak is the highest memory of the job's tree.
type Peak struct {
	Bytes   uint64
	At      time.Duration
	Device  int // position in Devices; -1 when nothing was held
	PID     int // the process holding most at that sample
	Command string
	PIDDev  uint64 // what that process held then
}

// LimitEvent says what the limit did.
type LimitEvent struct {
	Limit  Limit
	Warned bool
	// Hit is true when the tree reached the limit; vram then ended it.
	Hit    bool
	At     time.Duration
	Device int    // position in Devices
	Bytes  uint64 // the tree's memory on that device then
	Cap    uint64 // the limit on that device
	// Killed is true when SIGKILL was needed after the grace period.
	Killed bool
}

// Result is what vram knows about a job once it has exited.
type Result struct {
	Args     []string
	Start    time.Time
	Duration time.Duration
	// ExitCode is the job's exit status, or 128+signal when a signal
	// killed it.
	ExitCode int
	Signal   syscall.Signal // 0 unless a signal killed the job

	// Memory is false when no memory figures were available; Note says why.
	Memory     bool
	MemoryNote string
	Interval   time.Duration
	Devices    []Device
	Samples    []Sample
	Procs      []Proc // the tree's processes that held GPU memory, by peak
	Others     []Proc // other processes on the devices the job used, by peak
	Peak       Peak
	// Steady is the median of the window floors after warm-up (the
	// memory the job keeps between steps); SteadyKnown is false for a job
	// too short to tell.
	Steady      uint64
	SteadyKnown bool
	Leak        detect.Verdict
	LeakConfig  detect.Config
	// LeakSeries names the series the leak verdict was taken on:
	// "allocated" (vram's allocator's allocated memory: a cache that grows
	// is no leak) or "used" (the driver's figure).
	LeakSeries string
	// Allocator is nil unless a process of the job ran vram's allocator.
	Allocator *AllocatorFigures
	OOM       OOM
	Limit     LimitEvent
	TimedOut  bool
	// Tail is the last lines of the job's standard error.
	Tail     []string
	Warnings []string
	// SampleErrors counts samples whose reading failed in part.
	SampleErrors int
	// Attempts lists every run of the job under Retry (vram run
	// --retry-oom), this one last; nil otherwise.
	Attempts []Attempt

	treePIDs map[int]bool // every PID ever seen in the tree
}

// Failed reports whether the job did not exit with status 0.
func (r *Result) Failed() bool { return r.ExitCode != 0 }

// UsedDevices returns the positions of the devices the job held memory on.
func (r *Result) UsedDevices() []int {
	var out []int
	for i := range r.Devices {
		for _, s := range r.Samples {
			if s.JobDev[i] > 0 {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// Run starts the job, watches it until it exits and returns what it saw.
// The error is non-nil only when the job could not be started (the command
// does not exist, is not executable); a job that fails is a Result with a
// non-zero ExitCode. Cancelling ctx ends the job as a limit does (SIGTERM,
// then SIGKILL after Grace).
func Run(ctx context.Context, spec Spec) (*Result, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("no command to run")
	}
	if spec.Interval <= 0 {
		spec.Interval = DefaultInterval
	}
	if spec.Grace <= 0 {
		spec.Grace = DefaultGrace
	}
	if spec.ProcRoot == "" {
		spec.ProcRoot = "/proc"
	}
	if spec.Now == nil {
		spec.Now = time.Now
	}
	if spec.Warn == nil {
		spec.Warn = io.Discard
	}
	det, err := detect.New(spec.Leak)
	if err != nil {
		return nil, fmt.Errorf("leak detector: %w", err)
	}
	res := &Result{
		Args:       append([]string(nil), spec.Args...),
		Interval:   spec.Interval,
		Memory:     spec.Source != nil,
		MemoryNote: spec.SourceNote,
		LeakConfig: det.Config(),
		treePIDs:   map[int]bool{},
	}
	if spec.Source != nil {
		res.Devices = append([]Device(nil), spec.Source.Devices()...)
	}
	if spec.Subreaper {
		if err := setSubreaper(); err != nil {
			res.Warnings = append(res.Warnings, err.Error())
		}
	}

	cmd := exec.Command(spec.Args[0], spec.Args[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	cmd.Stdin, cmd.Stdout = spec.Stdin, spec.Stdout
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for the job's standard error: %w", err)
	}
	cmd.Stderr = pw
	res.Start = spec.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", spec.Args[0], err)
	}
	pw.Close()
	scan := NewScanner(res.Start, spec.Now)
	teeDone := make(chan struct{})
	go tee(pr, spec.Stderr, scan, teeDone)

	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	s := &supervisor{spec: spec, res: res, det: det, cmd: cmd, scan: scan,
		procs: map[procKey]*Proc{}, others: map[int]*Proc{}}
	s.tree, err = newTree(spec.ProcRoot, cmd.Process.Pid)
	if err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the process tree cannot be followed: %v", err))
	}
	s.loop(ctx, waitDone)

	// Descendants that outlive the job may hold its standard error open:
	// give the pipe a moment to drain, then stop reading.
	select {
	case <-teeDone:
	case <-time.After(time.Second):
		pr.Close()
		<-teeDone
	}
	scan.Close()
	res.Tail = scan.Tail()
	s.finish()
	return res, nil
}

// tee copies the job's standard error to w as it arrives and then to the
// scanner, so that the terminal never waits for a line to end.
func tee(r *os.File, w io.Writer, scan *Scanner, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if w != nil {
				w.Write(buf[:n])
			}
			scan.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

type procKey struct {
	pid   int
	start uint64
}

type allocKey struct{ pid, dev int }

// supervisor is the state of one Run. Only Run's goroutine touches it.
type supervisor struct {
	spec Spec
	res  *Result
	det  *detect.Detector
	cmd  *exec.Cmd
	scan *Scanner
	tree *tree

	reading  Reading
	procs    map[procKey]*Proc
	others   map[int]*Proc
	atEnd    map[int]uint64 // other processes' memory at the last sample where the job held memory
	allocs   map[allocKey]bool
	peakIdx  int
	scanTick int

	// ending: vram is ending the job (limit, timeout, cancellation).
	ending   bool
	killedAt time.Duration
}

func (s *supervisor) now() time.Duration { return s.spec.Now().Sub(s.res.Start) }

func (s *supervisor) loop(ctx context.Context, waitDone <-chan error) {
	tick := time.NewTicker(s.spec.Interval)
	defer tick.Stop()
	var timeout <-chan time.Time
	if s.spec.Timeout > 0 {
		t := time.NewTimer(s.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var grace <-chan time.Time
	done := ctx.Done()
	s.sample()
	for {
		select {
		case <-waitDone:
			s.exitStatus()
			return
		case <-tick.C:
			s.sample()
			if s.checkLimit() && grace == nil {
				grace = s.terminate()
			}
		case sig := <-s.spec.Signals:
			if err := s.cmd.Process.Signal(sig); err == nil {
				fmt.Fprintf(s.spec.Warn, "vram: forwarded %v to the job (pid %d)\n", sig, s.cmd.Process.Pid)
			}
		case <-timeout:
			timeout = nil
			s.res.TimedOut = true
			fmt.Fprintf(s.spec.Warn, "vram: the job ran for its %v timeout: ending it\n", s.spec.Timeout)
			if grace == nil {
				grace = s.terminate()
			}
		case <-done:
			done = nil
			fmt.Fprintf(s.spec.Warn, "vram: cancelled: ending the job\n")
			if grace == nil {
				grace = s.terminate()
			}
		case <-grace:
			grace = nil
			s.kill()
		}
	}
}

// exitStatus records how the job ended.
func (s *supervisor) exitStatus() {
	s.res.Duration = s.now()
	ps := s.cmd.ProcessState
	if ps == nil {
		s.res.ExitCode = -1
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		s.res.Signal = ws.Signal()
		s.res.ExitCode = 128 + int(ws.Signal())
		return
	}
	s.res.ExitCode = ps.ExitCode()
}

// sample reads the tree and the GPUs once.
func (s *supervisor) sample() {
	if s.tree != nil {
		// Without memory figures the tree is needed only to signal it, and
		// terminate re-scans it first: scan it every tenth tick.
		s.scanTick++
		if s.spec.Source != nil || s.scanTick%10 == 1 {
			if _, err := s.tree.scan(); err == nil {
				for pid := range s.tree.members {
					s.res.treePIDs[pid] = true
				}
				if s.spec.Subreaper {
					s.tree.reap()
				}
			}
		}
	}
	if s.spec.Source == nil {
		return
	}
	t := s.now()
	if err := s.spec.Source.Read(&s.reading); err != nil {
		s.res.SampleErrors++
		if s.res.SampleErrors == 1 {
			s.res.Warnings = append(s.res.Warnings, fmt.Sprintf("reading GPU memory: %v", err))
		}
	}
	nd := len(s.res.Devices)
	smp := Sample{T: t, JobDev: make([]uint64, nd), Used: make([]uint64, nd)}
	copy(smp.Used, s.reading.Used)
	mine := map[procKey]uint64{}
	theirs := map[int]uint64{}
	var best ProcMemory // the process whose allocator figures to keep
	for _, p := range s.reading.Procs {
		if p.Device < 0 || p.Device >= nd {
			continue
		}
		if s.tree != nil && s.tree.has(p.PID) {
			m := s.tree.members[p.PID]
			k := procKey{p.PID, m.start}
			mine[k] += p.Bytes
			smp.JobDev[p.Device] += p.Bytes
			smp.Job += p.Bytes
			pr := s.procs[k]
			if pr == nil {
				pr = &Proc{PID: p.PID, First: t, start: m.start, Command: s.command(p.PID, m.comm)}
				s.procs[k] = pr
			}
			pr.addDevice(p.Device)
			if p.Alloc != nil {
				s.allocated(&smp, p, &best)
			}
			continue
		}
		theirs[p.PID] += p.Bytes
		o := s.others[p.PID]
		if o == nil {
			o = &Proc{PID: p.PID, First: t, Command: s.command(p.PID, "")}
			s.others[p.PID] = o
		}
		o.addDevice(p.Device)
	}
	for k, b := range mine {
		pr := s.procs[k]
		pr.Last = t
		pr.Series = append(pr.Series, Point{t, b})
		if b > pr.Peak {
			pr.Peak, pr.PeakAt = b, t
		}
	}
	for pid, b := range theirs {
		o := s.others[pid]
		o.Last = t
		if b > o.Peak {
			o.Peak, o.PeakAt = b, t
		}
	}
	if smp.Job > 0 {
		s.atEnd = theirs
	}
	if a := s.res.Allocator; a != nil && smp.AllocKnown {
		a.PeakAllocated = max(a.PeakAllocated, smp.Allocated)
		a.PeakReserved = max(a.PeakReserved, smp.Reserved)
		a.Last, a.LastAt, a.PID, a.Device = *best.Alloc, t, best.PID, best.Device
	}
	s.res.Samples = append(s.res.Samples, smp)
	if smp.Job > s.res.Peak.Bytes {
		s.peakIdx = len(s.res.Samples) - 1
		pk := Peak{Bytes: smp.Job, At: t, Device: argmax(smp.JobDev)}
		for k, b := range mine {
			if b > pk.PIDDev || (b == pk.PIDDev && k.pid < pk.PID) {
				pk.PID, pk.PIDDev, pk.Command = k.pid, b, s.procs[k].Command
			}
		}
		s.res.Peak = pk
	}
}

// allocated adds a tree process's allocator figures to the sample; best
// is the sample's process to keep as the last figures so far: the one
// with the most out-of-memory errors, else the most reserved memory.
func (s *supervisor) allocated(smp *Sample, p ProcMemory, best *ProcMemory) {
	f := p.Alloc
	smp.AllocKnown = true
	smp.Allocated += uint64(f.Allocated)
	smp.Reserved += uint64(f.Reserved)
	if s.res.Allocator == nil {
		s.res.Allocator = &AllocatorFigures{}
		s.allocs = map[allocKey]bool{}
	}
	if k := (allocKey{p.PID, p.Device}); !s.allocs[k] {
		s.allocs[k] = true
		s.res.Allocator.Processes++
	}
	if b := best.Alloc; b == nil || f.NumOOMs > b.NumOOMs || f.NumOOMs == b.NumOOMs && f.Reserved > b.Reserved {
		*best = p
	}
}

func (p *Proc) addDevice(d int) {
	for _, x := range p.Devices {
		if x == d {
			return
		}
	}
	p.Devices = append(p.Devices, d)
	sort.Ints(p.Devices)
}

func argmax(v []uint64) int {
	best := -1
	for i, x := range v {
		if best < 0 || x > v[best] {
			best = i
		}
	}
	return best
}

// command names a process: its command line when Procs can read it, else
// the kernel's short name.
func (s *supervisor) command(pid int, comm string) string {
	if s.spec.Procs != nil {
		if d, err := s.spec.Procs.Details(pid); err == nil && len(d.Cmdline) > 0 {
			return gpu.Process{Cmdline: d.Cmdline}.Command()
		}
	}
	if comm == "" {
		if st, _, err := proc.ReadStat(s.spec.ProcRoot, pid, nil); err == nil {
			comm = st.Comm
		}
	}
	if comm != "" {
		return "[" + comm + "]"
	}
	return ""
}

// checkLimit warns at 90 % of the limit and reports whether the tree has
// reached it on some device.
func (s *supervisor) checkLimit() bool {
	l := &s.res.Limit
	l.Limit = s.spec.Limit
	if !s.spec.Limit.Set() || s.ending || len(s.res.Samples) == 0 {
		return false
	}
	smp := s.res.Samples[len(s.res.Samples)-1]
	var headroom uint64
	if s.spec.LimitHeadroom != nil {
		headroom = s.spec.LimitHeadroom()
	}
	for i, d := range s.res.Devices {
		capB := s.spec.Limit.On(d)
		end := capB + headroom
		b := smp.JobDev[i]
		if b >= end {
			l.Hit, l.At, l.Device, l.Bytes, l.Cap = true, smp.T, i, b, capB
			extra := ""
			if headroom > 0 {
				extra = fmt.Sprintf(" (and %s for the CUDA context)", units.FormatBytes(headroom))
			}
			fmt.Fprintf(s.spec.Warn, "vram: the job holds %s on GPU %d, its limit is %s%s: ending it\n",
				units.FormatBytes(b), d.Index, units.FormatBytes(capB), extra)
			return true
		}
		if !l.Warned && float64(b) >= 0.9*float64(end) {
			l.Warned = true
			fmt.Fprintf(s.spec.Warn, "vram: warning: the job holds %s on GPU %d, %.0f%% of its %s limit\n",
				units.FormatBytes(b), d.Index, 100*float64(b)/float64(capB), units.FormatBytes(capB))
		}
	}
	return false
}

// terminate sends SIGTERM to the whole tree and returns the grace timer.
func (s *supervisor) terminate() <-chan time.Time {
	s.ending = true
	s.signalTree(syscall.SIGTERM)
	return time.After(s.spec.Grace)
}

// kill sends SIGKILL to what is left of the tree.
func (s *supervisor) kill() {
	if n := s.signalTree(syscall.SIGKILL); n > 0 {
		if s.res.Limit.Hit {
			s.res.Limit.Killed = true
		}
		fmt.Fprintf(s.spec.Warn, "vram: %d process(es) still running after %v: sent SIGKILL\n", n, s.spec.Grace)
	}
}

func (s *supervisor) signalTree(sig syscall.Signal) int {
	if s.tree == nil {
		if s.cmd.Process.Signal(sig) == nil {
			return 1
		}
		return 0
	}
	s.tree.scan()
	sent, err := s.tree.signal(sig)
	if err != nil {
		s.res.Warnings = append(s.res.Warnings, err.Error())
	}
	if sig == syscall.SIGTERM && len(sent) > 0 {
		fmt.Fprintf(s.spec.Warn, "vram: sent SIGTERM to %d process(es) of the job: %v\n", len(sent), sent)
	}
	return len(sent)
}

// finish derives the summary figures once the job has exited.
func (s *supervisor) finish() {
	r := s.res
	if len(r.Samples) == 0 || r.Peak.Bytes == 0 {
		r.Peak.Device = -1
	}
	for _, p := range s.procs {
		for _, d := range p.Devices {
			p.GPUs = append(p.GPUs, r.Devices[d].Index)
		}
		r.Procs = append(r.Procs, *p)
	}
	used := map[int]bool{}
	for _, d := range r.UsedDevices() {
		used[d] = true
	}
	for pid, o := range s.others {
		keep := false
		for _, d := range o.Devices {
			keep = keep || used[d]
			o.GPUs = append(o.GPUs, r.Devices[d].Index)
		}
		if keep {
			o.AtEnd = s.atEnd[pid]
			r.Others = append(r.Others, *o)
		}
	}
	byPeak := func(ps []Proc) {
		sort.Slice(ps, func(i, j int) bool {
			if ps[i].Peak != ps[j].Peak {
				return ps[i].Peak > ps[j].Peak
			}
			return ps[i].PID < ps[j].PID
		})
	}
	byPeak(r.Procs)
	byPeak(r.Others)
	if r.Memory {
		r.Leak, r.LeakSeries = leakVerdict(r, s.det)
		r.Steady, r.SteadyKnown = steadyState(r.Samples, r.Leak.WarmUp, r.LeakConfig.Window)
	}
	r.OOM = diagnose(r, s.scan.Messages())
}

// leakVerdict runs the detector over the job's total, without the trailing
// samples where the job held nothing: a process's memory drops to zero
// when it exits, and that teardown is not part of the job's behaviour (it
// would read as a step down and hide a leak that ran until the end).
//
// When processes of the job run vram's allocator, the series is their
// allocated memory (at the samples that have it), not the driver's
// figure: a cache that grows to its working set is no leak, memory the
// program holds and never frees is. It returns the series' name.
func leakVerdict(r *Result, det *detect.Detector) (detect.Verdict, string) {
	end := len(r.Samples)
	for end > 0 && r.Samples[end-1].Job == 0 {
		end--
	}
	if r.Allocator != nil {
		for end > 0 && !r.Samples[end-1].AllocKnown {
			end--
		}
		for _, s := range r.Samples[:end] {
			if s.AllocKnown {
				det.Add(r.Start.Add(s.T), s.Allocated)
			}
		}
		return det.Verdict(), "allocated"
	}
	for _, s := range r.Samples[:end] {
		det.Add(r.Start.Add(s.T), s.Job)
	}
	return det.Verdict(), "used"
}

// steadyState is the median of the window floors after warm-up. Windows
// are the leak detector's, shortened for a short job so that at least
// eight fit (never below two samples); fewer than three windows give
// nothing.
func steadyState(samples []Sample, warmup, window time.Duration) (uint64, bool) {
	if len(samples) < 6 {
		return 0, false
	}
	from := samples[0].T + warmup
	span := samples[len(samples)-1].T - from
	if span <= 0 {
		return 0, false
	}
	if w := span / 8; w < window {
		window = w
	}
	if gap := samples[len(samples)-1].T - samples[len(samples)-2].T; window < 2*gap {
		window = 2 * gap
	}
	if window <= 0 {
		return 0, false
	}
	var floors []uint64
	cur, have := -1, false
	var floor uint64
	for _, s := range samples {
		if s.T < from {
			continue
		}
		w := int((s.T - from) / window)
		if w != cur {
			if have {
				floors = append(floors, floor)
			}
			cur, floor, have = w, s.Job, true
		} else if s.Job < floor {
			floor = s.Job
		}
	}
	// The last window is usually cut short by the job's exit (and its
	// teardown): leave it out.
	if len(floors) < 3 {
		return 0, false
	}
	sort.Slice(floors, func(i, j int) bool { return floors[i] < floors[j] })
	n := len(floors)
	if n%2 == 1 {
		return floors[n/2], true
	}
	return floors[n/2-1]/2 + floors[n/2]/2, true
}

// AboveSeconds returns, per device position, how long the device's used
// memory stood at or above frac of its total.
func (r *Result) AboveSeconds(frac float64) []float64 {
	out := make([]float64, len(r.Devices))
	for i, s := range r.Samples {
		dt := r.Interval
		if i+1 < len(r.Samples) {
			dt = r.Samples[i+1].T - s.T
		}
		for d, dev := range r.Devices {
			if dev.Total > 0 && float64(s.Used[d]) >= frac*float64(dev.Total) {
				out[d] += dt.Seconds()
			}
		}
	}
	return out
}
