package top

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
)

// Options are the command's flags. The host flags (--simulate, --seed,
// --gpu, --all-gpus, --idle-window) are every command's (cmdutil).
type Options struct {
	cmdutil.HostFlags
	Interval time.Duration
	Window   time.Duration
	ReadOnly bool
	Frame    int
	Width    int
	Height   int

	frameGiven bool // --frame was on the command line
}

// Bounds of the history: fewer samples give no growth rate, more cost time
// on every frame for nothing a terminal can show.
const (
	minWindowSamples = 16
	maxWindowSamples = 4096
)

// NewCmd returns the `vram top` command on the outside world f.
func NewCmd(f *cmdutil.Factory) *cobra.Command {
	o := &Options{}
	c := &cobra.Command{
		Use:   "top",
		Short: "Interactive monitor of GPU memory and the processes holding it",
		Long: `vram top shows every GPU's memory (used, reserved by the driver, free) with
a history graph, and the processes holding device memory with their user,
memory history, growth rate (MiB/min, a robust slope over the window) and
flags (zombie, orphan, jupyter, idle, no-proc). Sort with m/p/g/u, filter
with /, open a process with Enter, and terminate (t) or kill (k) it after a
confirmation; --read-only disables signals. Press ? for all keys.

Like vram status, only the GPUs named by CUDA_VISIBLE_DEVICES or
NVIDIA_VISIBLE_DEVICES are shown when either is set; --all-gpus shows every
GPU and --gpu picks some.

The interactive screen needs a terminal on stdin and stdout. --frame N prints
one frame to stdout after N samples instead (for scripts, logs and
documentation); vram watch prints the figures as lines.`,
		Example: `  vram top
  vram top --interval 250ms --read-only
  vram top --simulate 4
  vram top --frame 30 --interval 100ms --width 120 --height 40 > frame.txt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.frameGiven = cmd.Flags().Changed("frame")
			return run(cmd.Context(), f, o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	fl := c.Flags()
	fl.DurationVar(&o.Interval, "interval", time.Second, "sample period (at least 10ms)")
	fl.DurationVar(&o.Window, "window", 5*time.Minute, fmt.Sprintf("time span of the graphs, sparklines and growth rates (%d to %d samples of --interval; the footer says when that changes it)", minWindowSamples, maxWindowSamples))
	fl.BoolVar(&o.ReadOnly, "read-only", false, "never send signals (t and k are disabled)")
	cmdutil.DeprecatedAlias(c, "readonly", "read-only") // the old spelling keeps working
	fl.IntVar(&o.Frame, "frame", 0, "print one frame to stdout after `N` samples and exit")
	fl.IntVar(&o.Width, "width", 120, "frame width in cells (with --frame)")
	fl.IntVar(&o.Height, "height", 40, "frame height in lines (with --frame)")
	o.Register(c)
	o.RegisterIdleWindow(c)
	return c
}

// validate checks the flags and returns the history length in samples.
func (o *Options) validate() (int, error) {
	bad := func(format string, a ...any) (int, error) { return 0, cmdutil.Usagef(format, a...) }
	if err := o.HostFlags.Check(); err != nil {
		return 0, err
	}
	switch {
	case o.Interval < gpu.MinInterval || o.Interval > gpu.MaxInterval:
		return bad("--interval %v out of range: must be between %v and %v", o.Interval, gpu.MinInterval, gpu.MaxInterval)
	case o.Window < o.Interval:
		return bad("--window %v is shorter than --interval %v", o.Window, o.Interval)
	case o.Frame < 0 || o.Frame == 0 && o.frameGiven:
		return bad("--frame %d: must be the number of samples before the frame (1 or more); without --frame, vram top runs interactively", o.Frame)
	case o.Frame > 0 && (o.Width < minWidth || o.Height < minHeight):
		return bad("--width %d --height %d: a frame needs at least %dx%d", o.Width, o.Height, minWidth, minHeight)
	}
	n := int(o.Window / o.Interval)
	return min(max(n, minWindowSamples), maxWindowSamples), nil
}

// source is an opened host with the note to show under the header.
type source struct {
	*cmdutil.Host
	note string
}

// open opens the real driver (or the simulated host) and selects the GPUs
// the way vram status does: --gpu, else --all-gpus, else the visible-devices
// variables (cmdutil.HostFlags).
func open(o *Options, f *cmdutil.Factory) (*source, error) {
	h, err := o.HostFlags.Open(f)
	if err != nil {
		return nil, err
	}
	src := &source{Host: h}
	var notes []string
	if h.Procs == nil {
		notes = append(notes, fmt.Sprintf("no process details and no signals: %v", h.ProcErr))
	}
	notes = append(notes, h.Warnings...)
	if note := h.SelectionNote(); note != "" {
		notes = append(notes, note)
	}
	src.note = strings.Join(notes, " · ")
	return src, nil
}

func run(ctx context.Context, f *cmdutil.Factory, o *Options, in io.Reader, out io.Writer) error {
	window, err := o.validate()
	if err != nil {
		return err
	}
	src, err := open(o, f)
	if err != nil {
		return err
	}
	defer src.Close()
	cfg := Config{
		Interval: o.Interval, Window: window, AskedWindow: o.Window, ReadOnly: o.ReadOnly, Hostname: src.Hostname,
		Self: f.Self, Note: src.note,
	}
	if src.Procs != nil {
		cfg.Signaller, cfg.Procs = src.Signaller, src.Procs
	}
	m := New(cfg, src.Sampler.Sample)
	if ctx == nil {
		ctx = context.Background()
	}
	if o.Frame > 0 {
		frame, err := renderFrame(ctx, m, o.Frame, o.Width, o.Height, func(d time.Duration) { _ = f.Sleep(ctx, d) })
		if err != nil {
			return err
		}
		w := colorprofile.NewWriter(out, os.Environ())
		_, err = fmt.Fprintln(w, frame)
		return err
	}
	if err := needTerminal(f.IsTerminal, in, out); err != nil {
		return err
	}
	p := tea.NewProgram(m, tea.WithInput(in), tea.WithOutput(out), tea.WithContext(ctx))
	if _, err := p.Run(); err != nil && !errors.Is(err, tea.ErrProgramKilled) {
		return fmt.Errorf("terminal UI (--frame N prints one frame without a terminal): %w", err)
	}
	return nil
}

// needTerminal refuses to start the interactive screen where it cannot
// run: on input or output that is not a terminal (a pipe, a file, a
// service's /dev/null).
func needTerminal(isTerminal func(any) bool, in io.Reader, out io.Writer) error {
	var not []string
	if !isTerminal(in) {
		not = append(not, "stdin")
	}
	if !isTerminal(out) {
		not = append(not, "stdout")
	}
	var what string
	switch len(not) {
	case 0:
		return nil
	case 1:
		what = not[0] + " is not a terminal"
	default:
		what = "stdin and stdout are not terminals"
	}
	return fmt.Errorf("top is interactive and needs a terminal, but %s; `vram watch` prints GPU memory as lines without one, and `vram top --frame N` prints a single frame", what)
}

// renderFrame feeds n samples to the model, sleeping the interval between
// them, and returns the frame it then shows at width × height.
func renderFrame(ctx context.Context, m Model, n, width, height int, sleep func(time.Duration)) (string, error) {
	var tm tea.Model = m
	tm, _ = tm.Update(tea.WindowSizeMsg{Width: width, Height: height})
	var last error
	for i := 0; i < n; i++ {
		if i > 0 {
			sleep(m.cfg.Interval)
		}
		if ctx != nil && ctx.Err() != nil {
			return "", ctx.Err()
		}
		snap, err := m.poll()
		last = err
		tm, _ = tm.Update(sampleMsg{snap: snap, err: err})
	}
	final := tm.(Model)
	if final.snap == nil && last != nil {
		return "", fmt.Errorf("no sample succeeded: %w", last)
	}
	return final.render(), nil
}
