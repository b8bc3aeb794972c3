package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"help", []string{"--help"}, 0, ""},
		{"unknown flag", []string{"status", "--no-such-flag"}, 2, "unknown flag"},
		{"stray argument", []string{"status", "extra"}, 2, "extra"},
		{"unknown command", []string{"no-such-command"}, 1, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, strings.NewReader(""), &out, &errOut)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tt.code, errOut.String())
			}
			if tt.err != "" && !strings.Contains(errOut.String(), tt.err) {
				t.Errorf("stderr %q does not mention %q", errOut.String(), tt.err)
			}
			if strings.Contains(errOut.String(), "goroutine ") {
				t.Errorf("stderr has a stack trace: %q", errOut.String())
			}
		})
	}
}
