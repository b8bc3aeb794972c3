package cmdutil

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Prepare makes root and every command below it report their problems the
// vram way: no usage text after an error, no error printed by cobra (Execute
// prints it), flag errors and positional-argument errors as usage errors
// with the flag library's text put in the user's terms (FlagError). Call it
// once the tree is complete.
func Prepare(root *cobra.Command) {
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.DisableSuggestions = true // Execute adds them, on the error's line
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(FlagError)
	markArgErrorsAsUsage(root)
}

// FlagError is the flag error function of every vram command: a usage
// error, with an invalid value rewritten as
//
//	invalid value "abc" for --simulate: want a whole number
func FlagError(_ *cobra.Command, err error) error {
	return Usage(flagError(err))
}

// markArgErrorsAsUsage makes positional-argument errors (cobra's Args
// validators) usage errors, like flag errors.
func markArgErrorsAsUsage(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			return Usage(check(cmd, args))
		}
	}
	for _, sub := range c.Commands() {
		markArgErrorsAsUsage(sub)
	}
}

// Execute runs root with args, prints the error if there is one (Report)
// and returns the exit status.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	// The root runs nothing itself: an error it returns that is not
	// already a usage error is cobra's check of its arguments, an unknown
	// command ("vram stauts"), which is bad usage like an unknown flag.
	if err != nil && cmd == root && !IsUsage(err) {
		err = Usage(withSuggestion(root, args, err))
	}
	return Report(stderr, err)
}

// withSuggestion adds to an unknown command's error the commands it may
// be a misspelling of.
func withSuggestion(root *cobra.Command, args []string, err error) error {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if s := root.SuggestionsFor(a); len(s) > 0 {
			return fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
		}
		break
	}
	return err
}

// DeprecatedAlias adds old as a hidden spelling of cmd's flag name: what a
// user typed with it keeps working, and a warning on stderr names the flag
// to use instead (stdout stays the command's output).
func DeprecatedAlias(cmd *cobra.Command, old, name string) {
	fl := cmd.Flags()
	f := fl.Lookup(name)
	fl.Var(&alias{Value: f.Value, cmd: cmd, old: old, name: name}, old, f.Usage)
	fl.Lookup(old).NoOptDefVal = f.NoOptDefVal
	_ = fl.MarkHidden(old)
}

// alias is a flag's value under its old name.
type alias struct {
	pflag.Value
	cmd       *cobra.Command
	old, name string
}

func (a *alias) Set(s string) error {
	if err := a.Value.Set(s); err != nil {
		return err
	}
	fmt.Fprintf(a.cmd.ErrOrStderr(), "vram: warning: --%s is deprecated: use --%s\n", a.old, a.name)
	return nil
}

// NeedArgs is an Args validator for a command that takes at least one
// argument: without one, msg (which says what to give) is the usage error.
func NeedArgs(msg string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return Usagef("%s", msg)
		}
		return nil
	}
}
