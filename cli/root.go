// Package cli assembles the vram command tree. Each command family lives in
// its own package under cli/ and contributes cobra commands through a
// constructor; this package only wires them together. What the commands
// share (exit statuses, usage errors, the host flags, the factory of their
// dependencies) is package cli/cmdutil.
//
// Conventions every command follows:
//   - human output on stdout, warnings and progress on stderr;
//   - --json prints machine-readable output with sizes in bytes;
//   - errors are one line naming the problem, never a stack trace; a flag
//     value the parser rejects reads: invalid value "abc" for --simulate:
//     want a whole number;
//   - exit status 0 when done, 1 for failures, 2 for bad usage (an unknown
//     command or flag, a bad value, a missing argument, conflicting flags);
//     vram run passes on its job's status.
package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/cli/estimate"
	"github.com/vramhq/vram/cli/monitor"
	"github.com/vramhq/vram/cli/reclaim"
	"github.com/vramhq/vram/cli/replay"
	"github.com/vramhq/vram/cli/run"
	"github.com/vramhq/vram/cli/serve"
	"github.com/vramhq/vram/cli/top"
)

// Version, when set at build time with
// -ldflags "-X github.com/vramhq/vram/cli.Version=v1.2.3", is the version
// vram reports. Left empty, vram reports what the Go toolchain recorded in
// the binary: the module version and the VCS revision (see version.go).
var Version = ""

// NewRootCmd builds the whole command tree on the outside world f.
func NewRootCmd(f *cmdutil.Factory) *cobra.Command {
	root := &cobra.Command{
		Use:     "vram",
		Short:   "GPU memory: monitor, diagnose, replay and manage",
		Long:    "vram explains and manages GPU memory: who holds it, how it moves, why a job ran out of it, and what would fit.",
		Version: versionString(Version, buildInfo),
	}
	root.SetIn(f.In)
	root.SetOut(f.Out)
	root.SetErr(f.Err)
	for _, add := range commands {
		root.AddCommand(add(f))
	}
	cmdutil.Prepare(root)
	return root
}

// commands lists the constructors of the top-level commands, in help order.
var commands = []func(*cmdutil.Factory) *cobra.Command{
	monitor.NewCmdStatus,
	monitor.NewCmdWatch,
	top.NewCmd,
	run.NewCmdRun,
	run.NewCmdFit,
	estimate.NewCmd,
	reclaim.NewCmd,
	replay.NewCmd,
	serve.NewCmd,
}

// Main runs vram with args on the real world and these streams, and
// returns the process exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	f := cmdutil.New()
	f.In, f.Out, f.Err = stdin, stdout, stderr
	return Run(f, args)
}

// Run runs vram with args on the outside world f and returns the exit
// status.
func Run(f *cmdutil.Factory, args []string) int {
	return cmdutil.Execute(NewRootCmd(f), args, f.Err)
}
