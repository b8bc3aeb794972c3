package main

// The daemon's Go heap, read from the runtime's own GC trace: the daemon
// does not export Go runtime metrics (its Prometheus registry holds only
// vram_ series), so the tool starts it with GODEBUG=gctrace=1 and reads
// one line per garbage collection from its standard error.

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// gcLine is one parsed gctrace line.
type gcLine struct {
	N                int     // the collection's number
	At               float64 // seconds since the process started
	Start, End, Live float64 // MB: heap at the start, at the end, and live (marked)
	Goal             float64 // MB: the next collection's goal
}

// parseGCTrace parses a line written by GODEBUG=gctrace=1, such as
//
//	gc 12 @3.104s 2%: 0.010+1.2+0.003 ms clock, ..., 45->46->23 MB, 47 MB goal, 0 MB stacks, ...
//
// ok is false for any other line. The runtime's format is not a stable
// interface; a line that starts like one but does not parse is an error,
// so a change of format is noticed rather than read as zeros.
func parseGCTrace(line string) (g gcLine, ok bool, err error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "gc ") {
		return g, false, nil
	}
	f := strings.Fields(line)
	if len(f) < 3 || !strings.HasPrefix(f[2], "@") || !strings.HasSuffix(f[2], "s") {
		return g, false, nil // a log line that happens to start with "gc "
	}
	if g.N, err = strconv.Atoi(f[1]); err != nil {
		return g, true, fmt.Errorf("gctrace %q: collection number: %w", line, err)
	}
	if g.At, err = strconv.ParseFloat(strings.TrimSuffix(f[2][1:], "s"), 64); err != nil {
		return g, true, fmt.Errorf("gctrace %q: time: %w", line, err)
	}
	var heap, goal bool
	for i := 3; i+1 < len(f); i++ {
		unit := strings.TrimSuffix(f[i+1], ",")
		switch {
		case strings.Count(f[i], "->") == 2 && unit == "MB":
			p := strings.Split(f[i], "->")
			v := make([]float64, 3)
			for k := range p {
				if v[k], err = strconv.ParseFloat(p[k], 64); err != nil || v[k] < 0 {
					return g, true, fmt.Errorf("gctrace %q: heap sizes %q", line, f[i])
				}
			}
			g.Start, g.End, g.Live, heap = v[0], v[1], v[2], true
		case unit == "MB" && i+2 < len(f) && strings.HasPrefix(f[i+2], "goal"):
			if g.Goal, err = strconv.ParseFloat(f[i], 64); err != nil || g.Goal < 0 {
				return g, true, fmt.Errorf("gctrace %q: goal %q", line, f[i])
			}
			goal = true
		}
	}
	if !heap || !goal {
		return g, true, fmt.Errorf("gctrace %q: no heap sizes or goal", line)
	}
	return g, true, nil
}

// heapWatch is an io.Writer for the daemon's standard error: it copies
// everything to out and keeps the heap figures of the GC trace lines.
type heapWatch struct {
	out io.Writer

	mu       sync.Mutex
	partial  []byte
	n        int     // collections seen
	last     gcLine  // the newest
	peakLive float64 // MB
	peakEnd  float64 // MB: the largest heap at the end of a collection
	errs     []string
}

func (h *heapWatch) Write(p []byte) (int, error) {
	if _, err := h.out.Write(p); err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partial = append(h.partial, p...)
	for {
		i := bytes.IndexByte(h.partial, '\n')
		if i < 0 {
			break
		}
		line := string(h.partial[:i])
		h.partial = h.partial[i+1:]
		g, ok, err := parseGCTrace(line)
		switch {
		case err != nil:
			if len(h.errs) < 10 {
				h.errs = append(h.errs, err.Error())
			}
		case ok:
			h.n++
			h.last = g
			h.peakLive = max(h.peakLive, g.Live)
			h.peakEnd = max(h.peakEnd, g.End)
		}
	}
	if len(h.partial) > 1<<20 { // a line that never ends: not a GC trace
		h.partial = h.partial[:0]
	}
	return len(p), nil
}

// heapStats is what heapWatch has seen.
type heapStats struct {
	GCs               int
	LastLive, LastEnd float64 // MB, at the newest collection
	PeakLive, PeakEnd float64 // MB
	Errors            []string
}

func (h *heapWatch) stats() heapStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return heapStats{GCs: h.n, LastLive: h.last.Live, LastEnd: h.last.End, PeakLive: h.peakLive, PeakEnd: h.peakEnd, Errors: append([]string(nil), h.errs...)}
}
