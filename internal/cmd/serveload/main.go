package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vramhq/vram/cli/cmdutil"
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) { // -h: the usage is printed
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve-load:", err)
	}
	os.Exit(cmdutil.ExitCode(err)) // 2 for a usage mistake
}

func usage(fs *flag.FlagSet) func() {
	return func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./internal/cmd/serveload [flags] load|crash|faults ...\n\n")
		fmt.Fprintf(fs.Output(), "  load    one run per -history interval, -duration each, with a scraper and an event stream\n")
		fmt.Fprintf(fs.Output(), "  crash   kill -9 the daemon -kills times at random moments, restart it on the same file, check the ticks\n")
		fmt.Fprintf(fs.Output(), "  faults  SIGTERM under load, unusable history files, configuration files with mistakes\n")
		fmt.Fprintf(fs.Output(), "  report  the tables again from the results saved in -out\n\n")
		fs.PrintDefaults()
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("serve-load", flag.ContinueOnError)
	fs.Usage = usage(fs)
	var (
		bin       = fs.String("bin", "/tmp/vram", "the vram `binary` to run")
		out       = fs.String("out", "", "`directory` for results, logs and history files (default a new one under $TMPDIR)")
		gpus      = fs.Int("gpus", 8, "simulated GPUs")
		procs     = fs.Int("procs", 200, "simulated processes per GPU")
		interval  = fs.Duration("interval", 100*time.Millisecond, "sample period (--interval)")
		hists     = fs.String("history", "10s,1s", "history intervals of the load runs, comma-separated")
		duration  = fs.Duration("duration", 5*time.Minute, "length of each load run")
		scrape    = fs.Duration("scrape", 15*time.Second, "period of the /metrics scraper")
		monitor   = fs.Duration("monitor", 5*time.Second, "period of the /proc readings")
		requests  = fs.Int("state-requests", 200, "GET /api/v1/state requests timed after each load run")
		kills     = fs.Int("kills", 10, "kill -9 rounds of the crash run")
		killHists = fs.String("kill-history", "1s", "history intervals of the crash runs, comma-separated (one run of -kills each)")
		noEvents  = fs.Bool("no-events", false, "load runs without the /events client (results in load-INTERVAL-noevents)")
		minUp     = fs.Duration("min-up", 3*time.Second, "shortest life before a kill -9")
		maxUp     = fs.Duration("max-up", 25*time.Second, "longest life before a kill -9")
		seed      = fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the kill moments (printed)")
		addr      = fs.String("addr", "127.0.0.1:9470", "address the daemon listens on")
		stopAfter = fs.Duration("stop-after", 23500*time.Millisecond, "SIGTERM this long after the daemon is healthy (faults)")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cmdutil.Usage(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return cmdutil.Usagef("name what to run: load, crash, faults or report")
	}
	if _, err := os.Stat(*bin); err != nil {
		return fmt.Errorf("-bin: %w (build it: go build -o %s ./cmd/vram)", err, *bin)
	}
	hs, err := durations("-history", *hists)
	if err != nil {
		return err
	}
	khs, err := durations("-kill-history", *killHists)
	if err != nil {
		return err
	}
	if *maxUp < *minUp || *minUp <= 0 {
		return fmt.Errorf("-min-up %v and -max-up %v: want 0 < min ≤ max", *minUp, *maxUp)
	}
	if *out == "" {
		d, err := os.MkdirTemp("", "serve-load-")
		if err != nil {
			return err
		}
		*out = d
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	spec := daemonSpec{Bin: *bin, GPUs: *gpus, Procs: *procs, Interval: interval.String(), Addr: *addr}
	summary, err := os.OpenFile(filepath.Join(*out, "summary.md"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer summary.Close()
	w := io.MultiWriter(stdout, summary)
	fmt.Fprintf(w, "\n<!-- %s, %s -->\n", time.Now().UTC().Format(time.RFC3339), machine())
	for _, what := range fs.Args() {
		switch what {
		case "load":
			var runs []*loadResult
			for _, h := range hs {
				dir := filepath.Join(*out, "load-"+h.String())
				if *noEvents {
					dir += "-noevents"
				}
				r, err := runLoad(ctx, loadOptions{Spec: spec, HistoryInterval: h, Duration: *duration, ScrapeEvery: *scrape, MonitorEvery: *monitor, StateRequests: *requests, NoEvents: *noEvents, Out: dir})
				if err != nil {
					return fmt.Errorf("load, history every %v: %w", h, err)
				}
				if err := saveJSON(filepath.Join(dir, "result.json"), r); err != nil {
					return err
				}
				if err := saveSeries(filepath.Join(dir, "series.csv"), r.Series); err != nil {
					return err
				}
				runs = append(runs, r)
			}
			fmt.Fprintf(w, "\n%d GPUs × %d processes, sample every %v; commands:\n\n", *gpus, *procs, *interval)
			for _, r := range runs {
				fmt.Fprintf(w, "    %s\n", r.Command)
			}
			fmt.Fprintln(w)
			loadTable(w, runs)
			for _, r := range runs {
				for _, p := range r.Problems {
					fmt.Fprintf(w, "\nPROBLEM (history %v): %s\n", r.HistoryInterval, p)
				}
			}
		case "crash":
			for _, kh := range khs {
				dir := filepath.Join(*out, "crash-"+kh.String())
				r, err := runCrash(ctx, crashOptions{Spec: spec, HistoryInterval: kh, Kills: *kills, MinUp: *minUp, MaxUp: *maxUp, Seed: *seed, Out: dir})
				if r != nil {
					if err := saveJSON(filepath.Join(dir, "result.json"), r); err != nil {
						return err
					}
					crashReport(w, r)
				}
				if err != nil {
					return fmt.Errorf("crash, history every %v: %w", kh, err)
				}
			}
		case "faults":
			dir := filepath.Join(*out, "faults")
			r, err := runFaults(ctx, faultOptions{Spec: spec, HistoryInterval: 10 * time.Second, StopAfter: *stopAfter, Out: dir})
			if r != nil {
				if err := saveJSON(filepath.Join(dir, "result.json"), r); err != nil {
					return err
				}
				fmt.Fprintf(w, "\nSIGTERM %v after healthy, history every 10s:\n\n    %s\n\n", *stopAfter, r.Stop.Command)
				stopTable(w, r.Stop)
				fmt.Fprintf(w, "\nUnusable history files (`--db`):\n\n")
				caseTable(w, r.DBCases)
				fmt.Fprintf(w, "\nConfiguration files with mistakes (`--config`):\n\n")
				caseTable(w, r.Configs)
			}
			if err != nil {
				return fmt.Errorf("faults: %w", err)
			}
		case "report":
			if err := report(ctx, w, *out, hs); err != nil {
				return fmt.Errorf("report: %w", err)
			}
		default:
			return cmdutil.Usagef("%q: want load, crash, faults or report", what)
		}
	}
	fmt.Fprintf(stdout, "\nresults in %s\n", *out)
	return nil
}

func saveJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func saveSeries(path string, ps []point) error {
	var b strings.Builder
	b.WriteString("seconds,cpu_pct,rss_mib,heap_live_mb,db_bytes,wal_bytes,load1,samples,ticks,ticks_dropped\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "%.1f,%.1f,%.1f,%.0f,%d,%d,%.2f,%.0f,%.0f,%.0f\n", p.At.Seconds(), p.CPUPct, float64(p.RSS)/(1<<20), p.HeapLive, p.DB, p.WAL, p.Load1, p.Samples, p.Ticks, p.TickDrops)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// machine describes this machine for the report.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	l1, _ := loadAvg("/proc")
	return fmt.Sprintf("%d CPUs (%s), load average %.2f at the start", numCPU(), model, l1)
}

// report writes the tables again from the results saved under out.
func report(ctx context.Context, w io.Writer, out string, hs []time.Duration) error {
	var runs []*loadResult
	var dirs []string
	for _, h := range hs {
		dirs = append(dirs, filepath.Join(out, "load-"+h.String()), filepath.Join(out, "load-"+h.String()+"-noevents"))
	}
	for _, dir := range dirs {
		var r loadResult
		if err := loadJSON(filepath.Join(dir, "result.json"), &r); err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return err
		}
		if r.TickRate == 0 { // results saved before the rate was measured
			rate, err := tickRate(ctx, filepath.Join(dir, "history.db"))
			if err != nil {
				return err
			}
			r.TickRate = rate
		}
		runs = append(runs, &r)
	}
	if len(runs) > 0 {
		fmt.Fprintln(w)
		for _, r := range runs {
			fmt.Fprintf(w, "    %s\n", r.Command)
		}
		fmt.Fprintln(w)
		loadTable(w, runs)
	}
	crashes, _ := filepath.Glob(filepath.Join(out, "crash-*", "result.json"))
	for _, f := range crashes {
		var cr crashResult
		if err := loadJSON(f, &cr); err != nil {
			return err
		}
		crashReport(w, &cr)
	}
	var fr faultResult
	if err := loadJSON(filepath.Join(out, "faults", "result.json"), &fr); err == nil {
		fmt.Fprintf(w, "\n    %s\n\n", fr.Stop.Command)
		stopTable(w, fr.Stop)
		fmt.Fprintln(w)
		caseTable(w, fr.DBCases)
		fmt.Fprintln(w)
		caseTable(w, fr.Configs)
	} else if !os.IsNotExist(err) {
		return err
	}
	return nil
}

func loadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func durations(flag, list string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, s := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s %q: want durations like 10s,1s", flag, list)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

func crashReport(w io.Writer, r *crashResult) {
	fmt.Fprintf(w, "\nkill -9 × %d, seed %d, history every %v; command:\n\n    %s\n\n", len(r.Lives), r.Seed, r.HistoryInterval, r.Command)
	crashTable(w, r)
	fmt.Fprintf(w, "\nAfter the last restart and a SIGTERM: integrity_check %s, %d ticks in the file, exit status %d.\n", r.Final, r.Ticks, r.StopExit)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "\nPROBLEM: %s\n", p)
	}
}
