// Package reclaim holds the vram reclaim command: find the processes that
// hold GPU memory while dead, orphaned or forgotten, explain why each one
// qualifies, and, after a confirmation, free their memory by signalling
// them.
//
// The command works in five steps:
//
//  1. Observe. The host is sampled (gpu.Sampler) once a second for
//     --observe (default 5 s). Dead and orphaned processes are known from
//     the first sample; idleness needs the whole window: a notebook kernel
//     counts as idle only when no sample in the window showed it active.
//     vram cannot see before it started, so idleness is judged over that
//     window only; --idle-for is then checked against the kernel's age
//     (it cannot have been idle longer than it has lived), and the output
//     says so.
//  2. Plan. The last sample becomes a policy.Sample and is evaluated
//     against reclaim rules (package policy): the rules that the flags
//     describe, or those of --policy FILE. A process appears once even
//     when it holds memory on several GPUs.
//  3. Explain. Each selected process is listed with its evidence: flags,
//     age, memory, user, parent and command, and the facts that made the
//     rule apply. Processes that cannot be signalled are listed with the
//     reason and what to do instead: a zombie (its parent must reap it), a
//     PID with no process in /proc (another PID namespace), PID 1 and vram
//     itself (never signalled).
//  4. Act, unless --dry-run or the policy's dry_run. The user confirms
//     (--yes skips the question; without a terminal vram refuses unless
//     --yes). Each process's identity (PID and start time) is checked again
//     right before each signal (package proc), SIGTERM is sent, and a
//     process still alive after --grace gets SIGKILL, checked again.
//  5. Measure. The GPUs are sampled again (waiting up to --settle for the
//     driver to drop the signalled processes) and the memory actually
//     freed is reported per process and per device (used before and
//     after): what the kernel and the driver did, not what was hoped.
//
// On a simulated host (--simulate) the same steps run against synthetic
// processes, nothing real is signalled, and every output says so.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/proc"
)

// Options are the command's flags; the host flags (--simulate, --seed,
// --gpu, --all-gpus) are every command's (cmdutil).
type Options struct {
	cmdutil.HostFlags
	DryRun    bool
	OlderThan time.Duration
	IdleFor   time.Duration
	MinBytes  string
	Yes       bool
	Signal    string
	Grace     time.Duration
	Observe   time.Duration
	Settle    time.Duration
	JSON      bool
	Policy    string

	minBytes uint64
	sig      syscall.Signal
}

// bad is a flag problem: vram exits with status 2.
func bad(format string, a ...any) error { return cmdutil.Usagef(format, a...) }

// NewCmd returns the `vram reclaim` command on the outside world fac.
func NewCmd(fac *cmdutil.Factory) *cobra.Command {
	o := &Options{}
	c := &cobra.Command{
		Use:   "reclaim",
		Short: "Free GPU memory held by dead, orphaned or idle processes",
		Long: `vram reclaim lists the processes that hold GPU memory while zombie,
orphaned (their starter is gone), invisible in /proc (no such process), or
idle Jupyter kernels, with the evidence for each: flags, age, memory, user,
parent and command. After a confirmation it sends SIGTERM to those it can
signal, SIGKILL after --grace to those still alive, and reports the memory
that was actually freed, measured by sampling the GPUs again.

Identity (PID and start time) is checked again right before every signal,
so a PID reused by another process is never hit. PID 1, vram itself and
processes that were not listed are never signalled. Without a terminal to
ask on, vram refuses to act unless --yes is given.

Idleness is judged over the --observe window only (default 5s): a kernel is
idle when no sample in the window showed GPU activity; --idle-for is then
checked against its age.

--policy FILE applies the file's reclaim rules instead of the selection
flags; its dry_run (true unless the file says false) is obeyed.`,
		Example: `  vram reclaim --dry-run
  vram reclaim --older-than 1h --min-bytes 1GiB
  vram reclaim --yes --signal KILL
  vram reclaim --policy /etc/vram/policy.yaml --json
  vram reclaim --simulate 2`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("policy") {
				for _, f := range []string{"older-than", "idle-for", "min-bytes", "signal", "grace"} {
					if c.Flags().Changed(f) {
						return bad("--%s and --policy: the policy file sets the rules; leave out --%s", f, f)
					}
				}
			}
			ctx, stop := fac.SignalContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return Run(ctx, fac, o, c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.BoolVar(&o.DryRun, "dry-run", false, "list and explain only; signal nothing")
	f.DurationVar(&o.OlderThan, "older-than", 10*time.Minute, "only processes started at least this long ago")
	f.DurationVar(&o.IdleFor, "idle-for", 30*time.Minute, "notebook kernels: idle over the whole --observe window and at least this old")
	f.StringVar(&o.MinBytes, "min-bytes", "256MiB", "only processes holding at least this much GPU memory")
	f.BoolVarP(&o.Yes, "yes", "y", false, "do not ask before signalling (needed without a terminal)")
	f.StringVar(&o.Signal, "signal", "TERM", "first signal: TERM (then KILL after --grace) or KILL")
	f.DurationVar(&o.Grace, "grace", 10*time.Second, "wait between SIGTERM and SIGKILL")
	f.DurationVar(&o.Observe, "observe", 5*time.Second, "how long to watch the GPUs before deciding (idleness is judged over this window)")
	f.DurationVar(&o.Settle, "settle", 5*time.Second, "how long to wait for the driver to release the memory before measuring")
	f.BoolVar(&o.JSON, "json", false, "print the plan and the results as JSON (sizes in bytes)")
	f.StringVar(&o.Policy, "policy", "", "apply the reclaim rules of this policy `FILE` instead of the flags")
	o.Register(c)
	return c
}

func (o *Options) validate() error {
	switch {
	case o.Observe < time.Second || o.Observe > time.Hour:
		return bad("--observe %v: must be between 1s and 1h", o.Observe)
	case o.OlderThan < 0:
		return bad("--older-than %v: must not be negative", o.OlderThan)
	case o.IdleFor < 0:
		return bad("--idle-for %v: must not be negative", o.IdleFor)
	case o.Grace < 0 || o.Grace > time.Hour:
		return bad("--grace %v: must be between 0 and 1h", o.Grace)
	case o.Settle < 0 || o.Settle > 10*time.Minute:
		return bad("--settle %v: must be between 0 and 10m", o.Settle)
	}
	if err := o.HostFlags.Check(); err != nil {
		return err
	}
	b, err := units.ParseBytes(o.MinBytes)
	if err != nil {
		return bad("--min-bytes %q: %v", o.MinBytes, err)
	}
	o.minBytes = b
	switch strings.TrimPrefix(strings.ToUpper(o.Signal), "SIG") {
	case "TERM":
		o.sig = syscall.SIGTERM
	case "KILL":
		o.sig = syscall.SIGKILL
	default:
		return bad("--signal %q: want TERM or KILL", o.Signal)
	}
	return nil
}

// rules turns the flags into the policy they stand for.
func (o *Options) rules() *policy.Policy {
	do := policy.DoTerm
	if o.sig == syscall.SIGKILL {
		do = policy.DoKill
	}
	return &policy.Policy{
		File: "flags", Version: policy.Version, DryRun: o.DryRun, Grace: o.Grace,
		Reclaim: []policy.Rule{
			{Name: "dead-or-orphaned", When: []policy.Condition{policy.CondZombie, policy.CondNoSuchProcess, policy.CondOrphaned},
				OlderThan: o.OlderThan, MinBytes: o.minBytes, Action: do, Grace: o.Grace},
			{Name: "idle-notebook", When: []policy.Condition{policy.CondIdleJupyter},
				IdleFor: o.IdleFor, OlderThan: o.OlderThan, MinBytes: o.minBytes, Action: do, Grace: o.Grace},
		},
	}
}

// readPolicy reads --policy FILE. A file that is missing or does not parse
// is a usage error, as vram serve's --config is.
func readPolicy(path string) (*policy.Policy, error) {
	p, err := policy.ReadFile(path)
	var bad policy.Errors
	var pe *fs.PathError
	switch {
	case errors.As(err, &bad):
		return nil, cmdutil.Usage(err)
	case errors.As(err, &pe):
		return nil, cmdutil.Usagef("--policy: %v", pe)
	}
	return p, err
}

// openHost opens the host the flags name, sampled with an idle window of
// --observe, and the notes to show about it.
func openHost(f *cmdutil.Factory, o *Options) (*cmdutil.Host, []string, error) {
	o.IdleWindow = o.Observe
	h, err := o.HostFlags.Open(f)
	if err != nil {
		return nil, nil, err
	}
	notes := slices.Clone(h.Warnings)
	if h.Procs == nil {
		notes = append(notes, fmt.Sprintf("/proc cannot be read (%v): identities cannot be checked, so nothing will be signalled", h.ProcErr))
	}
	if note := h.SelectionNote(); note != "" {
		notes = append(notes, note)
	}
	return h, notes, nil
}

// Run runs vram reclaim on the outside world f; in is where the user
// confirms.
func Run(ctx context.Context, f *cmdutil.Factory, o *Options, in io.Reader, out, errOut io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	pol := o.rules()
	if o.Policy != "" {
		p, err := readPolicy(o.Policy)
		if err != nil {
			return err
		}
		if len(p.Reclaim) == 0 {
			return fmt.Errorf("%s has no reclaim rules: nothing to look for", o.Policy)
		}
		p.DryRun = p.DryRun || o.DryRun
		pol = p
	}
	h, notes, err := openHost(f, o)
	if err != nil {
		return err
	}
	defer h.Close()

	r := &Report{Simulated: h.Simulated, Host: h.Hostname, Notes: notes, DryRun: pol.DryRun, Rules: pol.File,
		ObserveSeconds: o.Observe.Seconds(), Signal: proc.SignalName(o.sig), GraceSeconds: pol.Grace.Seconds()}
	if !o.JSON {
		fmt.Fprintf(errOut, "vram reclaim: watching the GPUs for %v...\n", o.Observe)
	}
	snap, err := observe(ctx, h.Sampler, o.Observe, f)
	if ctx.Err() != nil {
		return errors.New("interrupted while watching the GPUs: nothing signalled")
	}
	if err != nil {
		return err
	}
	r.Time = snap.Time
	r.Warnings = snap.Warnings
	r.Candidates = plan(pol, snap, f.Self, h.Procs != nil, o.Observe)
	r.DevicesBefore = deviceMemory(snap)

	if !o.JSON {
		writeCandidates(out, r)
	}
	targets := actionable(r.Candidates)
	switch {
	case len(targets) == 0 || pol.DryRun:
		return finish(out, o, r)
	case !o.Yes && !f.IsTerminal(in):
		if o.JSON {
			writeJSON(out, r)
		}
		return fmt.Errorf("refusing to signal %d process(es) without a terminal to confirm on: pass --yes to act, or --dry-run to list only", len(targets))
	case !o.Yes:
		ok, err := confirm(in, errOut, targets, o.sig, pol.Grace, h.Simulated)
		if err != nil {
			return err
		}
		if !ok {
			r.Declined = true
			if !o.JSON {
				fmt.Fprintln(out, "Nothing signalled.")
			}
			return finish(out, o, r)
		}
	}
	act(ctx, f, h, r, targets)
	if err := measure(ctx, f, h, o.Settle, r); err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("could not sample the GPUs again: %v", err))
	}
	if !o.JSON {
		writeResults(out, r)
	}
	return finish(out, o, r)
}

func finish(out io.Writer, o *Options, r *Report) error {
	if o.JSON {
		return writeJSON(out, r)
	}
	switch {
	case len(r.Candidates) == 0:
	case r.DryRun:
		fmt.Fprintln(out, "Dry run: nothing signalled.")
	case len(actionable(r.Candidates)) == 0:
		fmt.Fprintln(out, "None of these can be signalled by vram; see each one's note.")
	}
	return nil
}

// observe samples every second (or every observe/5 when shorter) for the
// window and returns the last snapshot, taken at the end of the window.
func observe(ctx context.Context, s *gpu.Sampler, window time.Duration, f *cmdutil.Factory) (*gpu.Snapshot, error) {
	step := min(time.Second, window/5)
	start := f.Now()
	snap, err := s.Sample()
	if err != nil {
		return nil, fmt.Errorf("sample the GPUs: %w", err)
	}
	for f.Now().Sub(start) < window {
		wait := min(step, window-f.Now().Sub(start))
		if err := f.Sleep(ctx, wait); err != nil {
			return nil, err
		}
		if snap, err = s.Sample(); err != nil {
			return nil, fmt.Errorf("sample the GPUs: %w", err)
		}
	}
	return snap, nil
}

// confirm asks on errOut and reads the answer from in.
func confirm(in io.Reader, errOut io.Writer, targets []*Candidate, sig syscall.Signal, grace time.Duration, sim bool) (bool, error) {
	pids := make([]string, len(targets))
	for i, t := range targets {
		pids[i] = fmt.Sprint(t.PID)
	}
	what := proc.SignalName(sig)
	if sig == syscall.SIGTERM {
		what = fmt.Sprintf("SIGTERM (SIGKILL after %v if still alive)", grace)
	}
	where := ""
	if sim {
		where = " (simulated host: nothing real is signalled)"
	}
	fmt.Fprintf(errOut, "Send %s to %d process(es): %s%s? [y/N] ", what, len(targets), strings.Join(pids, ", "), where)
	var line []byte
	buf := make([]byte, 1)
	for {
		n, err := in.Read(buf)
		if n == 1 {
			if buf[0] == '\n' {
				break
			}
			line = append(line, buf[0])
			if len(line) > 64 {
				break
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return false, fmt.Errorf("read the answer: %w", err)
		}
	}
	ans := strings.ToLower(strings.TrimSpace(string(line)))
	return ans == "y" || ans == "yes", nil
}

func actionable(cs []*Candidate) []*Candidate {
	var out []*Candidate
	for _, c := range cs {
		if c.Action == "term" || c.Action == "kill" {
			out = append(out, c)
		}
	}
	return out
}

// act signals the targets: the first signal to all, then, for SIGTERM,
// waits up to the grace for them to exit and sends SIGKILL to those still
// alive. Every signal goes through proc.Signal (identity re-checked).
func act(ctx context.Context, f *cmdutil.Factory, h *cmdutil.Host, r *Report, targets []*Candidate) {
	send := func(c *Candidate, sig syscall.Signal) bool {
		err := proc.Signal(h.Procs, h.Signaller, f.Self, c.identity, sig)
		step := Step{Signal: proc.SignalName(sig), Time: f.Now()}
		if err != nil {
			step.Error = err.Error()
			step.Refused = errors.Is(err, proc.ErrRefused)
			step.Gone = errors.Is(err, proc.ErrGone)
		}
		c.Steps = append(c.Steps, step)
		return err == nil
	}
	var waiting []*Candidate
	grace := time.Duration(0)
	for _, c := range targets {
		sig := syscall.SIGTERM
		if c.Action == "kill" {
			sig = syscall.SIGKILL
		}
		if send(c, sig) && sig == syscall.SIGTERM {
			waiting = append(waiting, c)
			grace = max(grace, c.grace)
		}
	}
	deadline := f.Now().Add(grace)
	for len(waiting) > 0 {
		still := waiting[:0]
		for _, c := range waiting {
			if alive, err := proc.Alive(h.Procs, c.identity); err != nil || alive {
				still = append(still, c)
			} else {
				c.Exited = true
			}
		}
		waiting = still
		if len(waiting) == 0 || !f.Now().Before(deadline) {
			break
		}
		if f.Sleep(ctx, min(100*time.Millisecond, deadline.Sub(f.Now()))) != nil {
			break // interrupted: no SIGKILL the user did not wait for
		}
	}
	if ctx.Err() != nil {
		r.Notes = append(r.Notes, "interrupted during the grace period: no SIGKILL sent")
		return
	}
	for _, c := range waiting {
		send(c, syscall.SIGKILL)
	}
}

// measure samples the GPUs again, waiting up to settle for the driver to
// stop listing the signalled processes, and fills in what was freed.
func measure(ctx context.Context, f *cmdutil.Factory, h *cmdutil.Host, settle time.Duration, r *Report) error {
	signalled := map[uint32]bool{}
	for _, c := range r.Candidates {
		for _, s := range c.Steps {
			if s.Error == "" {
				signalled[uint32(c.PID)] = true
			}
		}
	}
	deadline := f.Now().Add(settle)
	var snap *gpu.Snapshot
	for {
		var err error
		if snap, err = h.Sampler.Sample(); err != nil {
			return err
		}
		listed := false
		for _, p := range snap.Processes {
			if signalled[p.PID] {
				listed = true
				break
			}
		}
		if !listed || !f.Now().Before(deadline) {
			break
		}
		if f.Sleep(ctx, min(250*time.Millisecond, deadline.Sub(f.Now()))) != nil {
			break
		}
	}
	after := map[uint32]uint64{}
	for _, p := range snap.Processes {
		after[p.PID] += p.Memory
	}
	r.Measured = true
	r.MeasuredAt = snap.Time
	r.DevicesAfter = deviceMemory(snap)
	for _, c := range r.Candidates {
		if len(c.Steps) == 0 {
			continue
		}
		a := after[uint32(c.PID)]
		c.BytesAfter = &a
		if a < c.Bytes {
			c.Freed = c.Bytes - a
		}
		r.FreedByProcesses += c.Freed
	}
	for i, b := range r.DevicesBefore {
		for _, a := range r.DevicesAfter {
			if a.Index == b.Index {
				r.DevicesBefore[i].FreedBytes = int64(b.UsedBytes) - int64(a.UsedBytes)
				r.FreedOnDevices += r.DevicesBefore[i].FreedBytes
			}
		}
	}
	return nil
}

func deviceMemory(s *gpu.Snapshot) []DeviceMemory {
	var out []DeviceMemory
	for _, d := range s.Devices {
		if d.Err != nil {
			continue
		}
		out = append(out, DeviceMemory{Index: d.Index, UUID: d.UUID, Name: d.Name, TotalBytes: d.Memory.Total, UsedBytes: d.Memory.Used})
	}
	return out
}

func sortedDevices(ds []int) []int {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return slices.Compact(ds)
}
