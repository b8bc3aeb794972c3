package cmdutil

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

func TestExitCodeAndReport(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		code    int
		printed string
	}{
		{"nil", nil, 0, ""},
		{"failure", errors.New("no driver"), 1, "vram: no driver\n"},
		{"usage", Usagef("--simulate %d: must be between 1 and 64 GPUs", 65), 2, "vram: --simulate 65: must be between 1 and 64 GPUs\n"},
		{"wrapped usage", fmt.Errorf("status: %w", Usagef("--gpu 5: this host has 2 GPUs (0-1)")), 2, "vram: status: --gpu 5: this host has 2 GPUs (0-1)\n"},
		{"child's status, silent", &ExitError{Code: 137}, 137, ""},
		{"status with a message", &ExitError{Code: 127, Err: errors.New(`exec: "nosuch": executable file not found in $PATH`)}, 127, "vram: exec: \"nosuch\": executable file not found in $PATH\n"},
		{"status wins over usage", &ExitError{Code: 1, Err: Usagef("x")}, 1, "vram: x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(tt.err); got != tt.code {
				t.Errorf("ExitCode = %d, want %d", got, tt.code)
			}
			var w bytes.Buffer
			if got := Report(&w, tt.err); got != tt.code || w.String() != tt.printed {
				t.Errorf("Report = %d, printed %q; want %d, %q", got, w.String(), tt.code, tt.printed)
			}
		})
	}
}

func TestUsageKeepsOneLayer(t *testing.T) {
	if Usage(nil) != nil {
		t.Error("Usage(nil) is not nil")
	}
	u := Usagef("--x")
	if Usage(u) != u {
		t.Error("Usage wrapped a usage error again")
	}
	if !IsUsage(Usage(errors.New("y"))) || IsUsage(errors.New("y")) {
		t.Error("IsUsage")
	}
}

// Execute maps cobra's own errors: an unknown command at the root, an
// unknown flag and an argument check below it are all usage (2).
func TestExecuteUsage(t *testing.T) {
	build := func() *cobra.Command {
		root := &cobra.Command{Use: "vram"}
		root.AddCommand(&cobra.Command{Use: "leaf", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }})
		root.AddCommand(&cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error { return errors.New("it failed") }})
		Prepare(root)
		return root
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"leaf"}, 0, ""},
		{[]string{"lef"}, 2, `unknown command "lef" for "vram"; did you mean leaf?` + "\n"},
		{[]string{"nothing-like-it"}, 2, `unknown command "nothing-like-it" for "vram"` + "\n"},
		{[]string{"leaf", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"leaf", "extra"}, 2, `unknown command "extra" for "vram leaf"`},
		{[]string{"fail"}, 1, "it failed"},
	} {
		root := build()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		code := Execute(root, tt.args, &errOut)
		if code != tt.code || !bytes.Contains(errOut.Bytes(), []byte(tt.msg)) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut.String(), tt.code, tt.msg)
		}
	}
}

// The old spelling of a flag sets the same value, is left out of the help
// and warns on stderr, never on stdout.
func TestDeprecatedAlias(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
		warn bool
	}{
		{[]string{"leaf", "--read-only"}, true, false},
		{[]string{"leaf", "--readonly"}, true, true},
		{[]string{"leaf", "--readonly=false"}, false, true},
		{[]string{"leaf"}, false, false},
	} {
		var got bool
		root := &cobra.Command{Use: "vram"}
		leaf := &cobra.Command{Use: "leaf", RunE: func(*cobra.Command, []string) error { return nil }}
		leaf.Flags().BoolVar(&got, "read-only", false, "refuse changes")
		DeprecatedAlias(leaf, "readonly", "read-only")
		root.AddCommand(leaf)
		Prepare(root)
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		if code := Execute(root, tt.args, &errOut); code != 0 || got != tt.want {
			t.Errorf("%v: exit %d, value %v; want 0, %v (stderr %q)", tt.args, code, got, tt.want, errOut.String())
		}
		warned := errOut.String() == "vram: warning: --readonly is deprecated: use --read-only\n"
		if warned != tt.warn || out.Len() != 0 {
			t.Errorf("%v: stdout %q, stderr %q", tt.args, out.String(), errOut.String())
		}
		if leaf.Flags().Lookup("readonly").Hidden != true {
			t.Error("the old spelling shows in the help")
		}
	}
}

func TestNeedArgs(t *testing.T) {
	check := NeedArgs("run: name the command to run")
	if err := check(nil, []string{"true"}); err != nil {
		t.Errorf("an argument refused: %v", err)
	}
	if err := check(nil, nil); err == nil || err.Error() != "run: name the command to run" || !IsUsage(err) {
		t.Errorf("no argument: %v", err)
	}
}
