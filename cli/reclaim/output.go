package reclaim

// Text and JSON output. See reclaim.go.

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

const simBanner = "SIMULATED HOST: synthetic processes; nothing real is signalled."

func writeJSON(out io.Writer, r *Report) error {
	r.Schema = Schema
	if r.Candidates == nil {
		r.Candidates = []*Candidate{}
	}
	for _, c := range r.Candidates {
		if c.Steps == nil {
			c.Steps = []Step{}
		}
	}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func age(c *Candidate) string {
	if c.AgeSeconds < 0 {
		return "-"
	}
	d := time.Duration(c.AgeSeconds * float64(time.Second))
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return d.Round(time.Second).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return gpu.Printable(s)
}

func gpus(ds []int) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = strconv.Itoa(d)
	}
	return strings.Join(s, ",")
}

func actionText(c *Candidate) string {
	switch c.Action {
	case "term":
		return "SIGTERM"
	case "kill":
		return "SIGKILL"
	case "report":
		return "report"
	}
	return "none"
}

// writeCandidates prints the plan: one row per process and its evidence.
func writeCandidates(out io.Writer, r *Report) {
	if r.Simulated {
		fmt.Fprintln(out, simBanner)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", gpu.Printable(n))
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(out, "warning: %s\n", gpu.Printable(w))
	}
	if len(r.Candidates) == 0 {
		fmt.Fprintf(out, "No process holds GPU memory while dead, orphaned or idle by the rules of %s (watched %v).\n",
			r.Rules, time.Duration(r.ObserveSeconds*float64(time.Second)))
		return
	}
	fmt.Fprintf(out, "%d process(es) selected by the rules of %s; idleness judged over the %v watched only.\n\n",
		len(r.Candidates), r.Rules, time.Duration(r.ObserveSeconds*float64(time.Second)))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tGPU\tMEMORY\tUSER\tAGE\tPARENT\tFLAGS\tACTION\tCOMMAND")
	for _, c := range r.Candidates {
		flags := strings.Join(c.Flags, ",")
		ppid := "-"
		if c.PPID > 0 {
			ppid = strconv.Itoa(c.PPID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.PID, gpus(c.GPUs), units.FormatBytes(c.Bytes),
			dash(c.User), age(c), ppid, dash(flags), actionText(c), dash(c.display))
	}
	tw.Flush()
	fmt.Fprintln(out)
	for _, c := range r.Candidates {
		fmt.Fprintf(out, "PID %d (%s):\n", c.PID, gpu.Printable(c.Rule))
		for _, why := range c.Reasons {
			fmt.Fprintf(out, "  - %s\n", gpu.Printable(why))
		}
		if c.Note != "" {
			fmt.Fprintf(out, "  ! %s\n", gpu.Printable(c.Note))
		}
	}
	fmt.Fprintln(out)
}

// writeResults prints what was signalled and what the re-sample shows.
func writeResults(out io.Writer, r *Report) {
	fmt.Fprintln(out, "Signals:")
	for _, c := range actionable(r.Candidates) {
		for _, s := range c.Steps {
			switch {
			case s.Error == "" && r.Simulated:
				fmt.Fprintf(out, "  PID %d: %s (simulated: not sent)\n", c.PID, s.Signal)
			case s.Error == "":
				fmt.Fprintf(out, "  PID %d: %s sent\n", c.PID, s.Signal)
			default:
				fmt.Fprintf(out, "  PID %d: %s not sent: %s\n", c.PID, s.Signal, gpu.Printable(s.Error))
			}
		}
		if c.Exited {
			fmt.Fprintf(out, "  PID %d: exited within the grace period\n", c.PID)
		}
	}
	if !r.Measured {
		return
	}
	fmt.Fprintf(out, "\nMemory, sampled again at %s:\n", r.MeasuredAt.Format(time.TimeOnly))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PID\tBEFORE\tAFTER\tFREED\t")
	for _, c := range r.Candidates {
		if c.BytesAfter == nil {
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", c.PID, units.FormatBytes(c.Bytes), units.FormatBytes(*c.BytesAfter), units.FormatBytes(c.Freed))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GPU\tUSED BEFORE\tUSED AFTER\tFREED\t")
	for _, b := range r.DevicesBefore {
		for _, a := range r.DevicesAfter {
			if a.Index == b.Index {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", b.Index, units.FormatBytes(b.UsedBytes), units.FormatBytes(a.UsedBytes), units.Precise.FormatSigned(b.FreedBytes))
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "Freed: %s by the signalled processes; %s on the devices (other processes may have allocated or freed meanwhile).\n",
		units.FormatBytes(r.FreedByProcesses), units.Precise.FormatSigned(r.FreedOnDevices))
	if r.Simulated {
		fmt.Fprintln(out, simBanner)
	}
}
