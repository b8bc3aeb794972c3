// Command confusion runs the leak detector over the synthetic patterns of
// package detecttest at several sampling intervals and noise levels, many
// seeds each, and prints a Markdown confusion table (pattern × verdict).
//
//	go run ./internal/cmd/confusion -seeds 100
//	go run ./internal/cmd/confusion -seeds 100 -interval 1s -window 15s
//	go run ./internal/cmd/confusion -seeds 100 -pattern leak-8,leak-16,leak-64,leak-short
//
// For each run the detector's verdict is taken every 5 s of sample time and
// at the end of the series. Healthy runs report the final verdict and whether
// a leak was ever called; leaking runs report how long after the leak's start
// it was first called.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/detect/detecttest"
)

func main() {
	seeds := flag.Int("seeds", 100, "runs per pattern, interval and noise level")
	only := flag.String("pattern", "", "run only these patterns (comma-separated names)")
	flag.BoolVar(&debug, "debug", false, "print the reason of every wrong verdict to stderr")
	flag.DurationVar(&window, "window", 0, "detector window (0: the default)")
	iv := flag.Duration("interval", 0, "run only this sampling interval")
	flag.Parse()
	if *iv > 0 {
		intervals = []time.Duration{*iv}
	}
	if err := run(os.Stdout, *seeds, *only); err != nil {
		fmt.Fprintln(os.Stderr, "confusion:", err)
		os.Exit(1)
	}
}

// Row is the tally of one pattern at one interval and noise level.
type Row struct {
	Pattern  string
	Leak     bool
	Interval time.Duration
	NoiseMiB float64
	Runs     int
	Final    [3]int // final verdict counts by detect.Kind
	Ever     int    // runs with a Leak call at any check (before the leak starts, for leaks)
	EverHeld int    // the same, for calls confirmed over detect.DefaultHold
	Latency  []time.Duration
	Held     []time.Duration // time to a confirmed call
}

var (
	debug  bool
	window time.Duration
)

var (
	intervals = []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second}
	noises    = []float64{0, 4, 16} // MiB
)

func run(w *os.File, seeds int, only string) error {
	var healthy, leaks []Row
	for _, p := range detecttest.Patterns {
		if only != "" && !slices.Contains(strings.Split(only, ","), p.Name) {
			continue
		}
		for _, iv := range intervals {
			for _, nz := range noises {
				row, err := tally(p, iv, nz, seeds)
				if err != nil {
					return err
				}
				if p.Leak {
					leaks = append(leaks, row)
				} else {
					healthy = append(healthy, row)
				}
			}
		}
	}
	if len(healthy) > 0 {
		fmt.Fprintf(w, "Healthy patterns (%v runs), verdict at the end of the run:\n\n", detecttest.QuietDuration)
		fmt.Fprintf(w, "| pattern | interval | noise σ | runs | leak | no-leak | insufficient | leak called at any check | held %v |\n", detect.DefaultHold)
		fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range healthy {
			fmt.Fprintf(w, "| %s | %v | %g MiB | %d | %d | %d | %d | %d | %d |\n", r.Pattern, r.Interval, r.NoiseMiB, r.Runs,
				r.Final[detect.Leak], r.Final[detect.NoLeak], r.Final[detect.Insufficient], r.Ever, r.EverHeld)
		}
		fmt.Fprintln(w)
	}
	if len(leaks) > 0 {
		fmt.Fprintf(w, "Leaking patterns, checked every 5 s until %v after the leak starts (leak-big-steps: 10 min):\n\n", detecttest.LeakTail)
		fmt.Fprintf(w, "| pattern | interval | noise σ | runs | called ≤ %v | called ≤ %v | called by the end | never | time to call (median / max) | called before the leak | held %v: called ≤ %v / median |\n",
			detecttest.LeakWindow, detecttest.LeakTail, detect.DefaultHold, detecttest.LeakWindow)
		fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range leaks {
			within, tail := 0, 0
			for _, l := range r.Latency {
				if l <= detecttest.LeakWindow {
					within++
				}
				if l <= detecttest.LeakTail {
					tail++
				}
			}
			lat := "–"
			if len(r.Latency) > 0 {
				slices.Sort(r.Latency)
				lat = fmt.Sprintf("%v / %v", r.Latency[len(r.Latency)/2].Round(time.Second), r.Latency[len(r.Latency)-1].Round(time.Second))
			}
			held, heldMed := 0, "–"
			for _, l := range r.Held {
				if l <= detecttest.LeakWindow {
					held++
				}
			}
			if len(r.Held) > 0 {
				slices.Sort(r.Held)
				heldMed = r.Held[len(r.Held)/2].Round(time.Second).String()
			}
			fmt.Fprintf(w, "| %s | %v | %g MiB | %d | %d | %d | %d | %d | %s | %d | %d / %s |\n", r.Pattern, r.Interval, r.NoiseMiB, r.Runs,
				within, tail, len(r.Latency), r.Runs-len(r.Latency), lat, r.Ever, held, heldMed)
		}
	}
	return nil
}

func tally(p detecttest.Pattern, iv time.Duration, noiseMiB float64, seeds int) (Row, error) {
	row := Row{Pattern: p.Name, Leak: p.Leak, Interval: iv, NoiseMiB: noiseMiB, Runs: seeds}
	for seed := range seeds {
		s, err := detecttest.Generate(p, uint64(seed), detecttest.Spec{Interval: iv, Noise: noiseMiB * detecttest.MiB})
		if err != nil {
			return row, err
		}
		c, err := Check(s, 5*time.Second)
		if err != nil {
			return row, err
		}
		row.Final[c.Final.Kind]++
		if c.False {
			row.Ever++
		}
		if c.FalseHeld {
			row.EverHeld++
		}
		if p.Leak && c.First >= 0 {
			row.Latency = append(row.Latency, c.First)
		}
		if p.Leak && c.FirstHeld >= 0 {
			row.Held = append(row.Held, c.FirstHeld)
		}
	}
	return row, nil
}

// Result is the outcome of one run.
type Result struct {
	Final detect.Verdict
	// False: a Leak was called where it is wrong (anywhere for a healthy
	// series, before the leak starts for a leaking one); FalseHeld: such a
	// call was confirmed by a detect.Confirm.
	False, FalseHeld bool
	// First and FirstHeld: for leaks, the time from the leak's start to the
	// first Leak call and to the first confirmed one (-1 if none).
	First, FirstHeld time.Duration
}

// Check feeds s to a detector, asking for a verdict every `every` of sample
// time and at the end, and passing each verdict to a detect.Confirm.
func Check(s detecttest.Series, every time.Duration) (Result, error) {
	r := Result{First: -1, FirstHeld: -1}
	d, err := detect.New(detect.Config{Window: window})
	if err != nil {
		return r, err
	}
	if len(s.Samples) == 0 {
		r.Final = d.Verdict()
		return r, nil
	}
	var confirm detect.Confirm
	t0 := s.Samples[0].T
	judge := func(at time.Duration, v detect.Verdict) {
		held := confirm.Update(t0.Add(at), v)
		if v.Kind != detect.Leak {
			return
		}
		if !s.Leak || at < s.LeakStart {
			if debug && !r.False {
				fmt.Fprintf(os.Stderr, "%s at %v: %v\n", s.Pattern, at, v)
			}
			r.False = true
			r.FalseHeld = r.FalseHeld || held
			return
		}
		if r.First < 0 {
			r.First = at - s.LeakStart
		}
		if held && r.FirstHeld < 0 {
			r.FirstHeld = at - s.LeakStart
		}
	}
	next := every
	for _, x := range s.Samples {
		d.Add(x.T, x.Bytes)
		if at := x.T.Sub(t0); at >= next {
			next += every
			judge(at, d.Verdict())
		}
	}
	r.Final = d.Verdict()
	judge(s.Duration, r.Final)
	return r, nil
}
