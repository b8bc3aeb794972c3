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
		{[]string{"lef"}, 2, `unknown command "lef" for "vram"`},
		{[]string{"leaf", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"leaf", "extra"}, 2, `unknown command "extra" for "vram leaf"`},
		{[]string{"fail"}, 1, "it failed"},
	} {
		root := build()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(tt.args)
		code := Execute(root, &errOut)
		if code != tt.code || !bytes.Contains(errOut.Bytes(), []byte(tt.msg)) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut.String(), tt.code, tt.msg)
		}
	}
}
