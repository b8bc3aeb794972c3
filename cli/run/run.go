// Package run holds the vram run and vram fit commands: run a GPU job as a
// child process and explain its memory (peak, steady state, leak, OOM
// cause, an optional hard limit), and search the largest batch size that
// fits. The work is done by package job; this package reads the flags,
// opens NVML and writes the reports.
//
// Output conventions: the job's own standard output and error pass through
// unchanged; vram's report, notices and progress go to stderr; --json
// writes to stdout (after the job's own output) or to --json-file. Output
// files are checked before the job starts (output.go); one that still
// cannot be written at the end goes to a fallback file. vram run exits with
// the job's status (128+N when signal N killed it), 127 when the command is
// not found, 126 when it cannot be executed, 2 for bad flags or output
// paths.
//
// Without NVML (no driver, a container without the GPU) both commands
// still run the job, keep its status and read OOM messages; they say once
// on stderr that memory figures are unavailable and why.
package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/job"
	"github.com/vramhq/vram/python"
)

// forwarded are the signals vram passes to the job.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// common are the flags run and fit share.
type common struct {
	simulate  int
	interval  time.Duration
	grace     time.Duration
	json      bool
	jsonFile  string
	allocator allocatorFlags
}

func (c *common) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&c.interval, "interval", job.DefaultInterval, "sampling interval of GPU memory (10ms to 10s)")
	fl.IntVar(&c.simulate, "simulate", 0, "watch `N` simulated GPUs instead of the driver: they carry the job's processes that run libvram on its simulated device (VRAM_DEVICE=sim, which this flag sets); for tests and demos without a GPU")
	fl.DurationVar(&c.grace, "grace", job.DefaultGrace, "time between SIGTERM and SIGKILL when vram ends a job")
	fl.BoolVar(&c.json, "json", false, "write the result as JSON to stdout (after the job's own output)")
	fl.StringVar(&c.jsonFile, "json-file", "", "write the result as JSON to `FILE`")
	c.allocator.register(fl)
	fl.SetInterspersed(false)
}

func (c *common) check() error {
	if c.interval < 10*time.Millisecond || c.interval > 10*time.Second {
		return cmdutil.Usagef("--interval %v: must be between 10ms and 10s", c.interval)
	}
	if c.grace <= 0 {
		return cmdutil.Usagef("--grace %v: must be positive", c.grace)
	}
	if c.simulate < 0 || c.simulate > cmdutil.MaxSimulate {
		return cmdutil.Usagef("--simulate %d: must be between 1 and %d GPUs (0: the real driver)", c.simulate, cmdutil.MaxSimulate)
	}
	return cmdutil.Usage(c.allocator.check())
}

// useAllocator prepares --allocator vram for jobs run from spec: their
// environment, and the limit's headroom once a process installed it. The
// returned cleanup removes what it wrote; an error means the job must not
// start (exit 2: the library is missing).
func (c *common) useAllocator(spec *job.Spec, limit job.Limit) (func(), error) {
	if !c.allocator.vram() {
		return func() {}, nil
	}
	lib, err := c.allocator.findLibrary(os.Executable)
	if err != nil {
		return nil, cmdutil.Usage(err)
	}
	conf, err := allocatorConf(c.allocator.conf, limit)
	if err != nil {
		return nil, cmdutil.Usage(err)
	}
	base := spec.Env
	if base == nil {
		base = os.Environ()
	}
	setup, err := prepareAllocator(python.Package, lib, conf, base)
	if err != nil {
		return nil, err
	}
	spec.Env = setup.env
	spec.LimitHeadroom = setup.headroom
	return setup.cleanup, nil
}

// session is what a command sets up around the job: the memory source and
// the signal relay.
type session struct {
	f       *cmdutil.Factory
	src     job.Source
	note    string
	closeFn func()
	sigs    chan os.Signal
	relay   chan os.Signal
	procs   gpu.ProcSource // nil: /proc cannot be read
	// signalled is set by any signal vram receives, forwarded or not: no
	// new attempt of vram run --retry-oom starts after one.
	signalled atomic.Bool
}

func open(f *cmdutil.Factory, c *common, stderr io.Writer, stdin io.Reader) *session {
	s := &session{f: f}
	if p, err := gpu.NewProcFS(f.ProcRoot, f.LookupUser); err == nil {
		s.procs = p
	}
	source := f.MemorySource
	if c.simulate > 0 {
		source = func() (job.Source, func(), error) { return f.SimulatedSource(c.simulate) }
	}
	src, closeFn, err := source()
	if err != nil {
		s.note = err.Error()
		fmt.Fprintf(stderr, "vram: memory figures unavailable: %v; the command still runs, and its exit status and out-of-memory messages are still read\n", err)
	} else {
		s.src, s.closeFn = src, closeFn
	}
	s.sigs, s.relay = make(chan os.Signal, 8), make(chan os.Signal, 8)
	f.Notify(s.sigs, forwarded...)
	fd := -1
	if f, ok := stdin.(*os.File); ok {
		fd = int(f.Fd())
	}
	go func() {
		for sig := range s.sigs {
			s.signalled.Store(true)
			// The terminal sends SIGINT and SIGQUIT to the whole
			// foreground group, the job included: do not send them twice.
			if (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && fd >= 0 && f.Foreground(fd) {
				continue
			}
			s.relay <- sig
		}
	}()
	return s
}

func (s *session) close() {
	s.f.Stop(s.sigs)
	close(s.sigs)
	if s.closeFn != nil {
		s.closeFn()
	}
}

func (s *session) spec(c *common, cmd *cobra.Command, args []string) job.Spec {
	var env []string
	if c.simulate > 0 {
		env = simulatedEnv(os.Environ(), s.src)
	}
	return job.Spec{
		Env:  env,
		Args: args, Stdin: cmd.InOrStdin(), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), Warn: cmd.ErrOrStderr(),
		Source: s.src, SourceNote: s.note, Procs: s.procs, Interval: c.interval, Grace: c.grace,
		Signals: s.relay, Subreaper: s.f.Subreaper,
	}
}

// simulatedEnv is the job's environment under --simulate: libvram on its
// simulated device, as large as the simulated GPU's usable memory, unless
// the environment says otherwise.
func simulatedEnv(base []string, src job.Source) []string {
	env := append([]string(nil), base...)
	has := func(k string) bool {
		for _, kv := range base {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("VRAM_DEVICE") {
		env = append(env, "VRAM_DEVICE=sim")
	}
	if !has("VRAM_SIM_CAPACITY") && src != nil && len(src.Devices()) > 0 {
		env = append(env, "VRAM_SIM_CAPACITY="+strconv.FormatUint(src.Devices()[0].Usable(), 10))
	}
	return env
}

// startError turns a failure to start the command into the shell's status.
func startError(err error) error {
	code := 1
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		code = 127
	case errors.Is(err, os.ErrPermission):
		code = 126
	}
	return &cmdutil.ExitError{Code: code, Err: err}
}

// jsonOutputs are the JSON results the flags ask for.
func (c *common) jsonOutputs(write func(io.Writer) error) []output {
	var outs []output
	if c.json {
		outs = append(outs, output{flag: "--json", what: "the JSON result", write: write})
	}
	if c.jsonFile != "" {
		outs = append(outs, output{flag: "--json-file", path: c.jsonFile, what: "the JSON result", write: write})
	}
	return outs
}

type runFlags struct {
	common
	csv, report string
	limit       string
	quiet       bool
	retryOOM    int
	batch       int
	batchEnv    string
}

// outputs are the results the flags ask for; res is nil for the check
// before the job starts.
func (f *runFlags) outputs(res *job.Result) []output {
	var outs []output
	if res == nil {
		res = &job.Result{}
	}
	outs = append(outs, f.jsonOutputs(res.WriteJSON)...)
	if f.csv != "" {
		outs = append(outs, output{flag: "--csv", path: f.csv, what: "the samples", write: res.WriteCSV})
	}
	if f.report != "" {
		outs = append(outs, output{flag: "--report", path: f.report, what: "the HTML report", write: res.WriteHTML})
	}
	return outs
}

// NewCmdRun builds vram run on the outside world fac.
func NewCmdRun(fac *cmdutil.Factory) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run a GPU job and explain its memory: peak, steady state, leak, OOM cause, hard limit",
		Long: `Run CMD with its input and output passed through, and watch the GPU memory of
its whole process tree (the command and every descendant) at --interval.
When it exits, print on stderr: the true peak (value, time, GPU, process), the
steady state (median floor after warm-up), a sparkline, the leak verdict, the
out-of-memory verdict with its cause (demand above capacity, fragmentation,
another process holding memory, a leak, or unknown when neither the message
nor the samples state any size) and the time spent above 90 % of the GPU's
capacity. vram exits with the job's status (128+N when signal N
killed it).

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to the job
(SIGINT and SIGQUIT from a terminal already reach it and are not sent twice).

--limit caps the job's memory on each GPU (a size or a percentage of the GPU):
a warning at 90 %, SIGTERM to the job's processes at the limit, SIGKILL after
--grace.

--json-file, --csv and --report are checked before the job starts: vram does
not start it when one cannot be written. A file that still cannot be written
at the end is written to the temporary directory instead, and vram says where.

--retry-oom N starts the job again, up to N times, when it dies of running
out of memory (an OOM message and a failed exit, or the end of --limit),
each time with a smaller batch: --batch B is the first, put where {} stands in
the command or in the variable --batch-env NAME. The next batch is what the
capacity learned from the failure (the OOM message's "allowed" or "in use" and
"free" figures, --limit, the job's memory and the GPU's free memory) and the
memory the failures needed say fits, less 10 %; without figures the batch is
halved. vram only restarts the command: the job resumes from its own
checkpoint (VRAM_RUN_ATTEMPT tells it the attempt, 1 for the first). Every
attempt is listed in the report and in the JSON's "attempts"; the rest of
the report and the exit status are the last attempt's. A failure other than
an OOM is not retried, and after a signal no attempt starts.

--allocator vram puts vram's caching allocator under the job's PyTorch, with
no change to the script (a sitecustomize module installs it right after the
job imports torch; libvram.so from --libvram, $VRAM_LIBRARY or beside the vram
binary; settings from --alloc-conf). --limit then also becomes the allocator's
own cap: the job gets PyTorch's out-of-memory error at the limit and can catch
it. Processes on the allocator are ended only beyond the limit plus 1 GiB for
their CUDA context; a job that never installs it is ended at the limit, as
without --allocator. See docs/torch.md.`,
		Example: `  vram run -- python train.py --batch-size 64
  vram run --allocator vram --alloc-conf page_mapped:true --limit 16GiB -- python train.py
  vram run --json-file run.json --report run.html -- torchrun --nproc-per-node 2 train.py
  vram run --limit 40GiB -- python serve.py
  vram run --retry-oom 3 --batch 512 -- python train.py --batch {}
  vram run --retry-oom 3 --batch 512 --batch-env BATCH_SIZE -- python train.py
  vram run --limit 50% --grace 30s -- ./job.sh`,
		Args: cmdutil.NeedArgs("run: name the command to run (vram run -- CMD ARGS...)"),
		RunE: func(cmd *cobra.Command, args []string) error { return runRun(fac, cmd, f, args) },
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.csv, "csv", "", "write the samples as CSV to `FILE`")
	fl.StringVar(&f.report, "report", "", "write a self-contained HTML report to `FILE`")
	fl.StringVar(&f.limit, "limit", "", "cap the job's memory per GPU: a size (8GiB) or a percentage of the GPU (50%)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not print the report on stderr")
	fl.IntVar(&f.retryOOM, "retry-oom", 0, "start the job again up to `N` times when it runs out of memory, each time with a smaller batch (needs --batch)")
	fl.IntVar(&f.batch, "batch", 0, "the batch size `B`, put where {} stands in the command (or in --batch-env); the first of --retry-oom's attempts")
	fl.StringVar(&f.batchEnv, "batch-env", "", "pass the batch size in environment variable `NAME` (with --batch)")
	return cmd
}

// checkBatch validates --retry-oom, --batch and --batch-env against the
// command.
func (f *runFlags) checkBatch(cmd *cobra.Command, args []string) error {
	batchSet := cmd.Flags().Changed("batch")
	switch {
	case f.retryOOM < 0:
		return cmdutil.Usagef("--retry-oom %d: must be at least 0 (the number of retries)", f.retryOOM)
	case f.retryOOM > maxRetries:
		return cmdutil.Usagef("--retry-oom %d: at most %d retries", f.retryOOM, maxRetries)
	case f.retryOOM > 0 && !batchSet:
		return cmdutil.Usagef("--retry-oom needs --batch B: the batch size of the first attempt (put %s where it goes in the command, or name a variable with --batch-env)", job.Placeholder)
	case batchSet && f.batch < 1:
		return cmdutil.Usagef("--batch %d: must be at least 1", f.batch)
	case f.batchEnv != "" && !batchSet:
		return cmdutil.Usagef("--batch-env %s needs --batch B", f.batchEnv)
	case f.batchEnv != "" && (strings.ContainsAny(f.batchEnv, "= \t") || f.batchEnv[0] >= '0' && f.batchEnv[0] <= '9'):
		return cmdutil.Usagef("--batch-env %q: not a variable name", f.batchEnv)
	case batchSet && f.batchEnv == "" && !strings.Contains(strings.Join(args, " "), job.Placeholder):
		return cmdutil.Usagef("--batch %d: put %s where the batch size goes in the command, or name a variable with --batch-env", f.batch, job.Placeholder)
	}
	return nil
}

// maxRetries bounds --retry-oom: the batch shrinks at every retry, so a
// larger number would only mean more runs at batch 1.
const maxRetries = 100

func runRun(fac *cmdutil.Factory, cmd *cobra.Command, f *runFlags, args []string) error {
	if err := f.check(); err != nil {
		return err
	}
	if err := f.checkBatch(cmd, args); err != nil {
		return err
	}
	var limit job.Limit
	if f.limit != "" {
		l, err := job.ParseLimit(f.limit)
		if err != nil {
			return cmdutil.Usagef("--limit: %w", err)
		}
		limit = l
	}
	if err := checkOutputs(f.outputs(nil)); err != nil {
		return cmdutil.Usage(err)
	}
	stderr := cmd.ErrOrStderr()
	s := open(fac, &f.common, stderr, cmd.InOrStdin())
	defer s.close()
	if limit.Set() && s.src == nil {
		fmt.Fprintln(stderr, "vram: --limit cannot be enforced without memory figures")
	}
	spec := s.spec(&f.common, cmd, args)
	spec.Limit = limit
	cleanup, err := f.useAllocator(&spec, limit)
	if err != nil {
		return err
	}
	defer cleanup()
	var res *job.Result
	if cmd.Flags().Changed("batch") {
		var progress io.Writer
		if f.retryOOM > 0 {
			progress = stderr
		}
		res, err = job.Retry(context.Background(), job.RetrySpec{
			Args: args, EnvName: f.batchEnv, Batch: f.batch, Retries: f.retryOOM,
			Run: spec, Stopped: s.signalled.Load, Progress: progress,
		})
		if err == nil && f.retryOOM == 0 {
			res.Attempts = nil // --batch alone: one run, as without it
		}
	} else {
		res, err = job.Run(context.Background(), spec)
	}
	if err != nil {
		return startError(err)
	}
	if !f.quiet {
		res.WriteText(stderr)
	}
	// vram keeps the job's status when a result had to go elsewhere; only
	// a result lost altogether makes a job that succeeded exit 1.
	if !writeOutputs(cmd.OutOrStdout(), stderr, fac.FallbackDirs(), f.outputs(res)) && res.ExitCode == 0 {
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure}
	}
	if res.ExitCode != 0 {
		return &cmdutil.ExitError{Code: res.ExitCode}
	}
	return nil
}

// parseFraction reads "5%", "0.05" or "5" (read as percent when above 1).
func parseFraction(name, s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(t, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a percentage such as 5%%", name, s)
	}
	if pct || v >= 1 {
		v /= 100
	}
	if v < 0 || v >= 1 {
		return 0, fmt.Errorf("%s %q: must be at least 0%% and below 100%%", name, s)
	}
	return v, nil
}
