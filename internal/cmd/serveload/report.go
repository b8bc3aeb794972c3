package main

// Markdown tables of the results, the way docs/serve.md shows them.

import (
	"fmt"
	"io"
	"strings"
	"time"
)

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func mb(b float64) string { return fmt.Sprintf("%.1f MB", b/1e6) }
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// loadTable writes one column per load run.
func loadTable(w io.Writer, runs []*loadResult) {
	if len(runs) == 0 {
		return
	}
	head := []string{"history_interval"}
	sep := []string{"---"}
	for _, r := range runs {
		h := r.HistoryInterval.String()
		if !r.Events {
			h += ", no /events client"
		}
		head = append(head, h)
		sep = append(sep, "---")
	}
	fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(head, " | "), strings.Join(sep, " | "))
	row := func(name string, f func(r *loadResult) string) {
		cells := []string{name}
		for _, r := range runs {
			cells = append(cells, f(r))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	row("measured for", func(r *loadResult) string { return r.Wall.Round(time.Second).String() })
	row("load average (1 min): min / mean / max", func(r *loadResult) string {
		if len(r.LoadAvg) == 0 {
			return "–"
		}
		lo, hi, sum := r.LoadAvg[0], r.LoadAvg[0], 0.0
		for _, v := range r.LoadAvg {
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		return fmt.Sprintf("%.2f / %.2f / %.2f", lo, sum/float64(len(r.LoadAvg)), hi)
	})
	row("samples taken (overran the interval, failed)", func(r *loadResult) string {
		return fmt.Sprintf("%.0f (%.0f, %.0f)", r.Samples, r.Overruns, r.SampleFails)
	})
	row("CPU, % of one core: whole run / last minute", func(r *loadResult) string {
		return fmt.Sprintf("%.1f / %.1f", r.CPUPct, r.CPUPctLastMin)
	})
	row("CPU per sample (all the daemon's work, clients included / samples)", func(r *loadResult) string { return ms(r.CPUPerSample) })
	row("GPU sample (vram_scrape_duration_seconds): median / max of the scrapes", func(r *loadResult) string {
		return fmt.Sprintf("%.1f / %.1f ms", 1e3*quantileF(r.SampleDur, 0.5), 1e3*quantileF(r.SampleDur, 1))
	})
	row("RSS: end / highest read / VmHWM", func(r *loadResult) string {
		return fmt.Sprintf("%s / %s / %s", mib(r.RSSEnd), mib(r.RSSPeak), mib(r.HWM))
	})
	row("Go heap live after GC: last / highest (GCs)", func(r *loadResult) string {
		return fmt.Sprintf("%.0f / %.0f MB (%d)", r.Heap.LastLive, r.Heap.PeakLive, r.Heap.GCs)
	})
	row("/metrics: median / max response, size", func(r *loadResult) string {
		return fmt.Sprintf("%s / %s, %.0f kB, %d series", ms(quantile(r.Scrapes, 0.5)), ms(quantile(r.Scrapes, 1)), float64(r.ScrapeBytes)/1e3, r.SeriesCount)
	})
	row(fmt.Sprintf("/api/v1/state: p50 / p99 / max of %d, size", len(runs[0].StateLatency)), func(r *loadResult) string {
		s := fmt.Sprintf("%s / %s / %s, %.2f MB", ms(quantile(r.StateLatency, 0.5)), ms(quantile(r.StateLatency, 0.99)), ms(quantile(r.StateLatency, 1)), float64(r.StateBytes)/1e6)
		if r.StateErrors > 0 {
			s += fmt.Sprintf(", %d errors", r.StateErrors)
		}
		return s
	})
	row("event stream: state events, MB received (dropped)", func(r *loadResult) string {
		if !r.Events {
			return "none connected"
		}
		return fmt.Sprintf("%d, %.0f MB (%.0f)", r.SSE.Events["state"], float64(r.SSE.Bytes)/1e6, r.EventDrops)
	})
	row("history ticks committed (dropped, failed)", func(r *loadResult) string {
		return fmt.Sprintf("%.0f (%.0f, %.0f)", r.TicksWritten, r.TicksDropped, r.WriteFailures)
	})
	row("file after SIGTERM: db / -wal", func(r *loadResult) string {
		return fmt.Sprintf("%s / %d B", mb(float64(r.DBBytes)), r.WALBytes)
	})
	row("raw samples per tick (device + process tables)", func(r *loadResult) string {
		return fmt.Sprintf("%.1f kB", r.RawPerTick/1e3)
	})
	row("ticks written per second: in the file (1 / history_interval)", func(r *loadResult) string {
		return fmt.Sprintf("%.3f (%.3f)", r.TickRate, 1/r.HistoryInterval.Seconds())
	})
	row("**raw history per day** (per tick × ticks in the file per second, extrapolated)", func(r *loadResult) string {
		return "**" + mb(r.RawPerTick*r.TickRate*86400) + "**"
	})
	row("file growth per day, whole file / run time (extrapolated)", func(r *loadResult) string {
		return mb(float64(r.DBBytes) / r.Wall.Seconds() * 86400)
	})
	row("minute aggregates per day (folded copy, extrapolated)", func(r *loadResult) string {
		return fmt.Sprintf("%s (from %d min)", mb(r.AggPerMinute*1440), r.AggMinutes)
	})
	row("**file at the default retention** (24 h raw + 30 d of minutes, extrapolated)", func(r *loadResult) string {
		return "**" + mb(r.RawPerTick*r.TickRate*86400+30*r.AggPerMinute*1440) + "**"
	})
	row("SIGTERM to exit (status)", func(r *loadResult) string {
		return fmt.Sprintf("%s (%d)", ms(r.StopTook), r.StopExit)
	})
	row("integrity_check after the stop", func(r *loadResult) string { return r.Integrity })
}

func crashTable(w io.Writer, r *crashResult) {
	fmt.Fprintf(w, "| life | up before kill -9 | restart to healthy | ticks reported committed | ticks shown by the API | ticks in the file | up ÷ history_interval | longest gap | integrity_check | result |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, l := range r.Lives {
		res := "ok"
		if l.Err != "" {
			res = l.Err
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %d | %d | %s | %s | %s |\n", l.N, l.Up.Round(10*time.Millisecond), l.Healthy.Round(10*time.Millisecond),
			l.Reported, l.APITicks, l.InDB, l.Expected, l.MaxGap.Round(time.Millisecond), l.Integrity, res)
	}
}

func caseTable(w io.Writer, cs []caseResult) {
	fmt.Fprintf(w, "| case | exit status | first line of the output | clean (no panic) | as wanted |\n| --- | --- | --- | --- | --- |\n")
	for _, c := range cs {
		exit := fmt.Sprint(c.Exit)
		if c.Exit == -1 {
			exit = "ran (stopped after 8 s)"
		}
		ok := "yes"
		if !c.OK {
			ok = "**no** (wanted: " + c.Want + ")"
		}
		fmt.Fprintf(w, "| %s | %s | `%s` | %v | %s |\n", c.Name, exit, strings.ReplaceAll(c.Message, "|", `\|`), c.Clean, ok)
	}
}

func stopTable(w io.Writer, s stopResult) {
	res := "ok"
	if s.Err != "" {
		res = s.Err
	}
	fmt.Fprintf(w, "| ticks committed before SIGTERM | ticks in the file after | newest tick before SIGTERM by | SIGTERM to exit | exit status | -wal after | event stream ended | \"stopped\" logged | integrity_check | result |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	fmt.Fprintf(w, "| %d | %d | %s | %s | %d | %d B | %v | %v | %s | %s |\n", s.Before, s.Ticks, s.LastTickLag.Round(time.Millisecond), s.Took.Round(time.Millisecond), s.Exit, s.WAL, s.StreamEnded, s.StoppedLogged, s.Integrity, res)
}
