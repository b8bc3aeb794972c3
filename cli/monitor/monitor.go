// Package monitor holds the vram status and vram watch commands: one screen
// of who holds GPU memory, and a sampled stream of it. Both sit on package
// gpu (NVML and /proc, or a simulated host with --simulate N) and only read.
//
// Output conventions (see docs/monitor.md for the schemas): human tables on
// stdout, warnings on stderr; --json is versioned (vram.status/v2,
// vram.watch/v2) with sizes in bytes and RFC 3339 times; --csv has a header
// row and a simulated column. A simulated host is labelled in every format.
//
// When NVML is missing the commands fail with one line that says what is
// missing and that --simulate N still works; nothing panics.
package monitor

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
)

// registerHostFlags adds the host flags status and watch share.
func registerHostFlags(h *cmdutil.HostFlags, cmd *cobra.Command) {
	h.Register(cmd)
	h.RegisterIdleWindow(cmd)
}

// session is the open host with its sampler and selected GPUs, and the
// warnings to print.
type session struct {
	*cmdutil.Host
	warnings []string
}

func open(h *cmdutil.HostFlags, f *cmdutil.Factory) (*session, error) {
	host, err := h.Open(f)
	if err != nil {
		return nil, err
	}
	op := host.Opened
	s := &session{Host: host}
	if op.ProcErr != nil {
		s.warnings = append(s.warnings, fmt.Sprintf("processes are not enriched from /proc: %v", op.ProcErr))
	}
	s.warnings = append(s.warnings, op.Warnings...)
	return s, nil
}

func warn(w io.Writer, msgs []string) {
	for _, m := range msgs {
		fmt.Fprintf(w, "vram: warning: %s\n", m)
	}
}

var errNoDevices = errors.New("no GPU to show")

// bar draws used (#), reserved (=) and free (.) memory in width cells.
func bar(m gpu.Memory, width int) string {
	if m.Total == 0 {
		return "[" + strings.Repeat("?", width) + "]"
	}
	cells := func(v uint64) int { return int((v*uint64(width) + m.Total/2) / m.Total) }
	used := cells(m.Used)
	res := cells(m.Reserved)
	if used+res > width {
		res = max(0, width-used)
	}
	return "[" + strings.Repeat("#", used) + strings.Repeat("=", res) + strings.Repeat(".", width-used-res) + "]"
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"
