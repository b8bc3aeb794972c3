// Package cmdutil is what every vram command shares: the errors that choose
// the exit status, the flags that choose a GPU host and its GPUs, and the
// Factory through which the commands reach the outside world.
//
// # Exit status
//
// Every command exits with
//
//	0  it did what was asked;
//	1  it failed: the driver is missing, a file cannot be read, a replay ran
//	   out of memory, a search found no answer;
//	2  the command line is wrong: an unknown command or flag, a flag value
//	   that is not valid or out of range, a missing or extra argument, flags
//	   that cannot be used together, a configuration or policy file a
//	   command was pointed at that does not parse. Nothing was done.
//
// A command that passes on another program's status (vram run exits with
// its job's: 128+N when signal N killed it, 127 when the command is not
// found, 126 when it cannot be executed) returns an *ExitError.
//
// A command returns a usage problem as a *UsageError (Usage, Usagef) and
// any other failure as a plain error; ExitCode is the one mapping from an
// error to the status, and Execute the one place that prints the error:
// one line, "vram: " and the message, never a stack trace.
package cmdutil

import (
	"errors"
	"fmt"
	"io"
)

// The exit statuses of every vram command (see the package documentation).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is a mistake on the command line: vram exits with status 2.
// Its message names the flag or argument as the user typed it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err as a usage error; nil stays nil, and an error that
// already is one is returned as it is.
func Usage(err error) error {
	if err == nil || IsUsage(err) {
		return err
	}
	return &UsageError{Err: err}
}

// Usagef is Usage(fmt.Errorf(format, a...)).
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// IsUsage reports whether err is, or wraps, a usage error.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// ExitError ends vram with status Code. Err, when not nil, is printed
// first; without it nothing is printed (the command has said what there
// was to say, or the status is a job's own).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is the status vram exits with after err: 0 for nil, an
// ExitError's code, 2 for a usage error, 1 for any other.
func ExitCode(err error) int {
	var exit *ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exit):
		return exit.Code
	case IsUsage(err):
		return ExitUsage
	}
	return ExitFailure
}

// Report prints err on w as one line ("vram: ...") unless it is an
// ExitError without a message, and returns the exit status (ExitCode).
func Report(w io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Err != nil {
		fmt.Fprintf(w, "vram: %v\n", err)
	}
	return ExitCode(err)
}
