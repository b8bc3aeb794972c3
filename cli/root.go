// Package cli assembles the vram command tree. Each command family lives in
// its own package under cli/ and contributes cobra commands through a
// constructor; this package only wires them together and turns errors into
// exit codes.
//
// Conventions every command follows:
//   - human output on stdout, warnings and progress on stderr;
//   - --json prints machine-readable output with sizes in bytes;
//   - errors are one line naming the problem, never a stack trace; a flag
//     value the parser rejects reads: invalid value "abc" for --simulate:
//     want a whole number (flagerr.go);
//   - exit code 1 for failures, 2 for bad usage.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

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

// UsageError marks an error caused by bad flags or arguments (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitError carries an exit status chosen by a command (vram run keeps its
// child's status) without printing anything more.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// NewRootCmd builds the whole command tree.
func NewRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "vram",
		Short:         "GPU memory: monitor, diagnose, replay and manage",
		Long:          "vram explains and manages GPU memory: who holds it, how it moves, why a job ran out of it, and what would fit.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(Version, buildInfo),
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: flagError(err)}
	})
	for _, add := range commands {
		root.AddCommand(add())
	}
	markArgErrorsAsUsage(root)
	return root
}

// markArgErrorsAsUsage makes positional-argument errors (cobra's Args
// validators) usage errors, like flag errors, so they exit with status 2.
func markArgErrorsAsUsage(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &UsageError{Err: err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markArgErrorsAsUsage(sub)
	}
}

// commands lists the constructors of the top-level commands, in help order.
var commands = []func() *cobra.Command{
	monitor.NewCmdStatus,
	monitor.NewCmdWatch,
	top.NewCmd,
	run.NewCmdRun,
	run.NewCmdFit,
	reclaim.NewCmd,
	replay.NewCmd,
	serve.NewCmd,
}

// Main runs vram with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := NewRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	// A command that chooses its status (vram run keeps its child's)
	// implements ExitCode; its message, if any, is printed first.
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "vram: %s\n", msg)
		}
		return coded.ExitCode()
	}
	fmt.Fprintf(stderr, "vram: %v\n", err)
	var usage *UsageError
	if errors.As(err, &usage) {
		return 2
	}
	return 1
}
