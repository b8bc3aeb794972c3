package cmdutil

import (
	"io"

	"github.com/spf13/cobra"
)

// Prepare makes root and every command below it report their problems the
// vram way: no usage text after an error, no error printed by cobra (Execute
// prints it), flag errors and positional-argument errors as usage errors
// with the flag library's text put in the user's terms (FlagError). Call it
// once the tree is complete.
func Prepare(root *cobra.Command) {
	root.SilenceUsage = true
	root.SilenceErrors = true
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

// Execute runs root (with the arguments set on it), prints the error if
// there is one (Report) and returns the exit status.
func Execute(root *cobra.Command, stderr io.Writer) int {
	cmd, err := root.ExecuteC()
	// The root runs nothing itself: an error it returns that is not
	// already a usage error is cobra's check of its arguments, an unknown
	// command ("vram stauts"), which is bad usage like an unknown flag.
	if err != nil && cmd == root {
		err = Usage(err)
	}
	return Report(stderr, err)
}
