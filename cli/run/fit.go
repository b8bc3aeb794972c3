package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/job"
)

// SchemaFit names the JSON layout of vram fit.
const SchemaFit = "vram.fit/v1"

type fitFlags struct {
	common
	min, max            int
	margin, tolerance   string
	trialTimeout        time.Duration
	envName             string
	limit               string
	showOutput          bool
	marginV, toleranceV float64
}

// NewCmdFit builds vram fit on the outside world fac.
func NewCmdFit(fac *cmdutil.Factory) *cobra.Command {
	f := &fitFlags{}
	cmd := &cobra.Command{
		Use:   "fit [flags] -- CMD [ARG...] {}",
		Short: "Find the largest batch size that fits in GPU memory",
		Long: `Run CMD once per candidate batch size, with the size where {} stands (or in
the environment variable --env NAME), each trial a child process watched like
vram run. A trial fits when it exits 0 without an out-of-memory message (or
runs until --trial-timeout without one); an OOM message makes it too large; any
other failure (an import error, a crash) stops the search without an answer:
vram fit shows the end of the trial's error output and exits 1.

The first trial runs --min, to check that the command works. Without memory
figures the search then bisects in log space (about 11 trials for an answer
in 1–65536) and stops when the largest fitting size is within --tolerance of
the smallest failing one. With memory figures it learns the memory the job
can use, from the free memory at each trial's peak (other processes count),
the figures of PyTorch's out-of-memory message ("N allowed" when the job set
a memory fraction, "in use" and "free"), --limit, and the peaks at which
trials ran out of memory; it fits peak ≈ a + b·batch over the largest trials
that fitted and jumps to the size that line says fits. No size at or above
one that failed is tried again; the answer itself always ran. The
recommended size leaves --margin.

--limit caps each trial's memory per GPU as vram run does (the trial is ended
at the limit, which counts as not fitting), and tells the search the
capacity at once.

A signal (Ctrl-C, SIGTERM) ends the running trial and the search: the table
so far is printed, and vram fit exits 128+N (130 for SIGINT, 143 for
SIGTERM).

The trial command should do a few full training steps at the given batch size
and exit. --allocator vram (and --alloc-conf, --libvram) runs every trial on
vram's allocator, as vram run does; a cap in --alloc-conf (max_bytes:16GiB)
is then enforced inside each trial.`,
		Example: `  vram fit -- python train.py --steps 3 --batch-size {}
  vram fit --max 4096 --trial-timeout 2m -- python train.py --batch-size={}
  vram fit --env BATCH_SIZE --json -- ./bench.sh
  vram fit --limit 16GiB -- python train.py --batch-size {}
  vram fit --allocator vram --alloc-conf page_mapped:true,max_bytes:16GiB -- python train.py --batch-size {}`,
		Args: cmdutil.NeedArgs("fit: name the command to run (vram fit -- CMD ARGS... {})"),
		RunE: func(cmd *cobra.Command, args []string) error { return runFit(fac, cmd, f, args) },
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&f.min, "min", 1, "smallest batch size to try")
	fl.IntVar(&f.max, "max", 65536, "largest batch size to try")
	fl.StringVar(&f.margin, "margin", "5%", "safety margin taken off the largest size that fits")
	fl.StringVar(&f.tolerance, "tolerance", "2%", "stop when the answer is within this fraction of the true maximum")
	fl.DurationVar(&f.trialTimeout, "trial-timeout", 0, "end a trial after this long; one that ran this long without an OOM fits (0: no timeout)")
	fl.StringVar(&f.envName, "env", "", "pass the batch size in environment variable `NAME` instead of {}")
	fl.StringVar(&f.limit, "limit", "", "cap each trial's memory per GPU: a size (16GiB) or a percentage of the GPU (50%)")
	fl.BoolVar(&f.showOutput, "show-output", false, "pass each trial's output through (default: hidden; the tail is shown on failure)")
	return cmd
}

func runFit(fac *cmdutil.Factory, cmd *cobra.Command, f *fitFlags, args []string) error {
	if err := f.check(); err != nil {
		return err
	}
	bad := cmdutil.Usage
	var err error
	if f.marginV, err = parseFraction("--margin", f.margin); err != nil {
		return bad(err)
	}
	if f.toleranceV, err = parseFraction("--tolerance", f.tolerance); err != nil || f.toleranceV == 0 {
		if err == nil {
			err = errors.New("--tolerance must be above 0")
		}
		return bad(err)
	}
	switch {
	case f.min < 1 || f.max < f.min:
		return bad(fmt.Errorf("--min %d --max %d: want 1 ≤ min ≤ max", f.min, f.max))
	case f.trialTimeout < 0:
		return bad(fmt.Errorf("--trial-timeout %v: must not be negative", f.trialTimeout))
	case f.envName == "" && !strings.Contains(strings.Join(args, " "), job.Placeholder):
		return bad(fmt.Errorf("fit: put %s where the batch size goes in the command, or name a variable with --env", job.Placeholder))
	case f.envName != "" && strings.ContainsAny(f.envName, "= \t"):
		return bad(fmt.Errorf("--env %q: not a variable name", f.envName))
	}
	var limit job.Limit
	if f.limit != "" {
		if limit, err = job.ParseLimit(f.limit); err != nil {
			return cmdutil.Usagef("--limit: %w", err)
		}
	}
	if err := checkOutputs(f.jsonOutputs(nil)); err != nil {
		return bad(err)
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	s := open(fac, &f.common, stderr, cmd.InOrStdin())
	defer s.close()
	if limit.Set() && s.src == nil {
		fmt.Fprintln(stderr, "vram: --limit cannot be enforced without memory figures")
	}
	trial := s.spec(&f.common, cmd, nil)
	trial.Limit = limit
	cleanup, err := f.useAllocator(&trial, limit)
	if err != nil {
		return err
	}
	defer cleanup()
	trial.Timeout, trial.Warn = f.trialTimeout, io.Discard
	trial.Stdin = nil
	if !f.showOutput {
		trial.Stdout, trial.Stderr = nil, nil
	} else {
		trial.Stdout = stderr // keep stdout for the table and JSON
	}
	// Signals cancel the search: the running trial is ended (SIGTERM, then
	// SIGKILL after --grace), the table so far is printed, and vram exits
	// as a program killed by the signal would report it (128+N).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trial.Signals = nil
	var got atomic.Int32
	go func() {
		if sig, ok := <-s.relay; ok {
			if n, ok := sig.(syscall.Signal); ok {
				got.Store(int32(n))
			} else {
				got.Store(int32(syscall.SIGTERM))
			}
			fmt.Fprintf(stderr, "vram: %s received: ending the search\n", job.SignalName(syscall.Signal(got.Load())))
			cancel()
		}
	}()
	res, err := job.Fit(ctx, job.FitSpec{
		Args: args, EnvName: f.envName, Min: f.min, Max: f.max, Margin: f.marginV, Tolerance: f.toleranceV,
		Trial: trial, Progress: stderr,
	})
	if err != nil {
		return startError(err)
	}
	if !f.json {
		writeFitTable(stdout, res, f)
	}
	if res.Failure != nil {
		fmt.Fprintf(stderr, "vram: %s; the end of its error output:\n", res.Stop)
		for _, l := range res.Failure.Result.Tail {
			fmt.Fprintf(stderr, "  | %s\n", l)
		}
		if len(res.Failure.Result.Tail) == 0 {
			fmt.Fprintln(stderr, "  (it wrote nothing on standard error)")
		}
	}
	saved := writeOutputs(stdout, stderr, fac.FallbackDirs(), f.jsonOutputs(func(w io.Writer) error { return writeFitJSON(w, res, f, args) }))
	switch {
	case ctx.Err() != nil:
		sig := syscall.Signal(got.Load())
		return &cmdutil.ExitError{Code: 128 + int(sig), Err: fmt.Errorf("fit: the search was ended by %s after %d trials", job.SignalName(sig), res.Ran())}
	case res.Failure != nil:
		// Whatever fitted before, the search has no answer: a failure
		// that is not an OOM (an import error, a crash) may well hit
		// every larger size, and says nothing about memory.
		return errors.New("fit: the search stopped without an answer: " + res.Stop)
	case !res.Found:
		return errors.New("fit: " + res.Stop)
	case !saved:
		return &cmdutil.ExitError{Code: cmdutil.ExitFailure}
	}
	return nil
}

func writeFitTable(w io.Writer, res *job.FitResult, f *fitFlags) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "trial\tbatch\toutcome\tpeak\tpredicted\tseconds\thow chosen\t")
	n := 0
	for _, t := range res.Trials {
		n++
		id := fmt.Sprint(n)
		peak, pred := "-", "-"
		if t.Peak > 0 {
			peak = units.FormatBytes(t.Peak)
		}
		if t.Predicted > 0 {
			pred = units.FormatBytes(t.Predicted)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.1f\t%s\t\n", id, t.Batch, t.Outcome, peak, pred, t.Seconds, t.Why)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if res.Line != nil {
		fmt.Fprintf(w, "memory ≈ %s + %s per batch element (R² %.3f over the %d largest sizes that fitted)\n",
			units.FormatBytes(uint64(max(0, res.Line.A))), units.FormatBytes(uint64(max(0, res.Line.B))), res.Line.R2, res.Line.N)
	}
	if res.Capacity > 0 {
		fmt.Fprintf(w, "memory the job can use: about %s (from %s)\n", units.FormatBytes(res.Capacity), res.CapacityFrom)
	}
	switch {
	case res.Failure != nil && res.MaxBatch > 0:
		fmt.Fprintf(w, "search stopped: %s; %d fitted before, larger sizes are unknown\n", res.Stop, res.MaxBatch)
	case res.Failure != nil:
		fmt.Fprintf(w, "search stopped: %s\n", res.Stop)
	case res.Found:
		fmt.Fprintf(w, "largest batch that fits: %d (%s)\n", res.MaxBatch, res.Stop)
		fmt.Fprintf(w, "recommended batch:       %d (%.0f%% margin)\n", res.Recommended, 100*f.marginV)
	default:
		fmt.Fprintf(w, "no batch size fits: %s\n", res.Stop)
	}
	fmt.Fprintf(w, "%d trials in %s\n", res.Ran(), res.Elapsed.Round(100*time.Millisecond))
}

type fitJSON struct {
	Schema      string      `json:"schema"`
	Command     []string    `json:"command"`
	Env         string      `json:"env,omitempty"`
	Found       bool        `json:"found"`
	MaxBatch    int         `json:"max_batch"`
	Recommended int         `json:"recommended_batch"`
	Bound       int         `json:"smallest_failing_batch"`
	Margin      float64     `json:"margin"`
	Tolerance   float64     `json:"tolerance"`
	Stop        string      `json:"stop"`
	Capacity    uint64      `json:"capacity_bytes"`
	CapFrom     string      `json:"capacity_from,omitempty"`
	Limit       string      `json:"limit,omitempty"`
	Line        *lineJSON   `json:"line"`
	Trials      []job.Trial `json:"trials"`
	Failure     *failJSON   `json:"failure,omitempty"`
	Seconds     float64     `json:"seconds"`
}

type lineJSON struct {
	A  float64 `json:"a_bytes"`
	B  float64 `json:"b_bytes_per_batch"`
	R2 float64 `json:"r2"`
	N  int     `json:"points"`
}

type failJSON struct {
	Batch    int      `json:"batch"`
	ExitCode int      `json:"exit_code"`
	Tail     []string `json:"tail"`
}

func writeFitJSON(w io.Writer, res *job.FitResult, f *fitFlags, args []string) error {
	out := fitJSON{Schema: SchemaFit, Env: f.envName, Found: res.Found, MaxBatch: res.MaxBatch, Recommended: res.Recommended,
		Bound: res.Bound, Margin: f.marginV, Tolerance: f.toleranceV, Command: args, Stop: res.Stop, Capacity: res.Capacity,
		CapFrom: res.CapacityFrom, Limit: f.limit, Trials: res.Trials, Seconds: res.Elapsed.Seconds()}
	if out.Trials == nil {
		out.Trials = []job.Trial{}
	}
	if res.Line != nil {
		out.Line = &lineJSON{A: res.Line.A, B: res.Line.B, R2: res.Line.R2, N: res.Line.N}
	}
	if res.Failure != nil {
		out.Failure = &failJSON{Batch: res.Failure.Batch, ExitCode: res.Failure.ExitCode, Tail: res.Failure.Result.Tail}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
