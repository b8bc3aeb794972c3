package main

// Faults other than kill -9: a graceful stop under load, history files
// that cannot be used, and configuration files with mistakes.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type faultOptions struct {
	Spec            daemonSpec // the load: binary, GPUs, processes, interval, address
	HistoryInterval time.Duration
	StopAfter       time.Duration // SIGTERM this long after healthy
	Out             string
}

// stopResult is the graceful stop under load.
type stopResult struct {
	Command       string
	Before        int64     // vram_history_ticks_written_total just before SIGTERM
	SignalAt      time.Time // when SIGTERM was sent
	Exit          int
	Took          time.Duration
	Ticks         int64         // ticks in the file after the stop
	LastTickLag   time.Duration // SIGTERM time minus the newest tick's time
	WAL           int64         // -wal bytes after the stop
	Integrity     string
	StoppedLogged bool // the log's last line says "stopped"
	StreamEnded   bool // the open event stream ended
	Err           string
}

// caseResult is one bad history file or configuration.
type caseResult struct {
	Name    string
	Command string
	Exit    int    // -1: it ran (and was stopped after a few seconds)
	Message string // the first line of its standard error (time and level removed)
	Log     string // everything it wrote, for the record
	Clean   bool   // no panic, no goroutine dump
	Want    string // what the case expects
	OK      bool
}

type faultResult struct {
	Stop    stopResult
	DBCases []caseResult
	Configs []caseResult
}

func runFaults(ctx context.Context, o faultOptions) (*faultResult, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	res := &faultResult{}
	good, err := gracefulStop(ctx, o, &res.Stop)
	if err != nil {
		return res, err
	}
	if res.DBCases, err = badDBs(ctx, o, good); err != nil {
		return res, err
	}
	res.Configs, err = badConfigs(ctx, o)
	return res, err
}

// gracefulStop runs the daemon under load, sends SIGTERM in the middle of
// a history interval and checks that the interval in progress was
// written. It returns the path of the history file it leaves.
func gracefulStop(ctx context.Context, o faultOptions, r *stopResult) (string, error) {
	dir := filepath.Join(o.Out, "stop")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	spec := o.Spec
	spec.DB, spec.Log, spec.Config = filepath.Join(dir, "history.db"), filepath.Join(dir, "daemon.log"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(spec.Config, runConfig(spec.Interval, o.HistoryInterval), 0o644); err != nil {
		return "", err
	}
	r.Command = spec.commandLine()
	d, err := startDaemon(spec)
	if err != nil {
		return "", err
	}
	if err := d.waitHealthy(ctx, time.Minute); err != nil {
		d.kill()
		return "", err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sse := watchEvents(sctx, d.url("/events"))
	time.Sleep(o.StopAfter)
	body, _, err := get(ctx, d.url("/metrics"))
	if err != nil {
		d.kill()
		return "", err
	}
	m, err := scalars(body)
	if err != nil {
		d.kill()
		return "", err
	}
	r.Before = int64(m["vram_history_ticks_written_total"])
	r.SignalAt = time.Now()
	r.Exit, r.Took, err = d.stop(30 * time.Second)
	if err != nil {
		r.Err = err.Error()
	}
	select {
	case <-sse.stopped:
		r.StreamEnded = true
	case <-time.After(5 * time.Second):
	}
	_, r.WAL = fileSizes(spec.DB)
	if r.Integrity, err = integrity(ctx, spec.DB); err != nil {
		r.Err = err.Error()
		return "", nil
	}
	if r.Ticks, err = count(ctx, spec.DB, "SELECT COUNT(DISTINCT t) FROM device_samples"); err != nil {
		r.Err = err.Error()
	}
	last, err := count(ctx, spec.DB, "SELECT MAX(t) FROM device_samples")
	if err != nil {
		r.Err = err.Error()
	}
	r.LastTickLag = r.SignalAt.Sub(time.UnixMilli(last))
	logb, _ := os.ReadFile(spec.Log)
	lines := strings.Split(strings.TrimSpace(string(logb)), "\n")
	r.StoppedLogged = strings.Contains(lines[len(lines)-1], `msg=stopped`)
	switch {
	case r.Err != "":
	case r.Exit != 0:
		r.Err = fmt.Sprintf("exit status %d", r.Exit)
	case r.Ticks < r.Before+1:
		r.Err = fmt.Sprintf("%d ticks in the file, %d reported before SIGTERM: the interval in progress was not written", r.Ticks, r.Before)
	case r.LastTickLag > time.Second:
		r.Err = fmt.Sprintf("the newest tick is %v older than SIGTERM: the interval in progress was not written", r.LastTickLag)
	case r.Integrity != "ok":
		r.Err = "integrity_check: " + r.Integrity
	}
	return spec.DB, nil
}

// runCase runs vram serve with args for at most a few seconds and reports
// how it ended.
func runCase(ctx context.Context, bin, name string, args []string, env []string) caseResult {
	c := caseResult{Name: name, Command: bin + " " + strings.Join(args, " ")}
	ctx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	c.Exit = cmd.ProcessState.ExitCode()
	if ctx.Err() != nil {
		c.Exit = -1 // it was still running: it started
	}
	_ = err
	c.Log = out.String()
	c.Clean = !strings.Contains(c.Log, "panic") && !strings.Contains(c.Log, "goroutine ")
	first, _, _ := strings.Cut(strings.TrimSpace(c.Log), "\n")
	c.Message = tidy(first)
	return c
}

// tidy removes the slog time and level from a log line.
func tidy(line string) string {
	if strings.HasPrefix(line, "time=") {
		if i := strings.Index(line, " msg="); i >= 0 {
			line = line[i+1:]
		}
	}
	return line
}

// badDBs starts vram serve on history files it cannot use. good is a
// history file written by the daemon, used to make damaged copies.
func badDBs(ctx context.Context, o faultOptions, good string) ([]caseResult, error) {
	dir := filepath.Join(o.Out, "db")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	garbage := make([]byte, 64<<10)
	rand.Read(garbage)
	type dbCase struct {
		name, want string
		make       func() (string, error)
	}
	write := func(name string, b []byte) func() (string, error) {
		return func() (string, error) {
			p := filepath.Join(dir, name)
			return p, os.WriteFile(p, b, 0o644)
		}
	}
	copyAnd := func(name string, f func(p string) error) func() (string, error) {
		return func() (string, error) {
			p := filepath.Join(dir, name)
			if good == "" {
				return "", fmt.Errorf("no history file to damage")
			}
			if err := copyFile(good, p); err != nil {
				return "", err
			}
			return p, f(p)
		}
	}
	cases := []dbCase{
		{"random bytes", "refused", write("random.db", garbage)},
		{"a text file", "refused", write("text.db", []byte("not a database\n"))},
		{"a directory", "refused", func() (string, error) {
			p := filepath.Join(dir, "adir.db")
			return p, os.Mkdir(p, 0o755)
		}},
		{"parent is a file", "refused", func() (string, error) {
			p := filepath.Join(dir, "plain")
			return filepath.Join(p, "history.db"), os.WriteFile(p, nil, 0o644)
		}},
		{"unwritable place (/proc)", "refused", func() (string, error) { return "/proc/vram-load/history.db", nil }},
		{"schema from a newer vram", "refused", copyAnd("newer.db", func(p string) error {
			db, err := openDB(p)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.Exec("PRAGMA user_version = 999")
			return err
		})},
		{"truncated to half", "refused, or runs and reports the damage", copyAnd("half.db", func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, fi.Size()/2/4096*4096)
		})},
		{"page 2 overwritten", "refused, or runs and reports the damage", copyAnd("page2.db", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(garbage[:4096], 4096)
			return err
		})},
	}
	var out []caseResult
	for i, c := range cases {
		p, err := c.make()
		if err != nil {
			return out, fmt.Errorf("%s: %w", c.name, err)
		}
		spec := o.Spec
		spec.GPUs, spec.Procs, spec.Interval = 1, 0, "100ms"
		spec.Addr = fmt.Sprintf("127.0.0.1:%d", 19500+i)
		spec.DB = p
		r := runCase(ctx, spec.Bin, c.name, spec.args(), nil)
		r.Want = c.want
		switch c.want {
		case "refused":
			r.OK = r.Exit > 0 && r.Clean && strings.Contains(r.Log, p)
		default:
			// Refused with the path named, or running and saying what is
			// wrong in its log.
			r.OK = r.Clean && ((r.Exit > 0 && strings.Contains(r.Log, p)) ||
				(r.Exit == -1 && (strings.Contains(r.Log, "malformed") || strings.Contains(r.Log, "corrupt") || strings.Contains(r.Log, "failed"))))
		}
		out = append(out, r)
	}
	return out, nil
}

// badConfigs starts vram serve with configuration files that have
// mistakes; each must be refused with the file and line named.
func badConfigs(ctx context.Context, o faultOptions) ([]caseResult, error) {
	dir := filepath.Join(o.Out, "config")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	loose := filepath.Join(dir, "token-0644")
	if err := os.WriteFile(loose, []byte("s3cret-token-value\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(loose, 0o644); err != nil { // whatever the umask
		return nil, err
	}
	cases := []struct {
		name, file, text string
		want             string // must appear in the message
	}{
		{"unknown key", "unknown.yaml", "version: 1\nintervall: 1s\n", "unknown.yaml:2"},
		{"duplicate key", "dup.yaml", "version: 1\ninterval: 1s\ninterval: 2s\n", "dup.yaml:3"},
		{"wrong kind", "kind.yaml", "version: 1\nhttp: yes\n", "kind.yaml:2"},
		{"bad duration", "duration.yaml", "version: 1\nhistory_interval: often\n", "duration.yaml:2"},
		{"interval out of range", "range.yaml", "version: 1\ninterval: 1ms\n", "range.yaml:2"},
		{"history shorter than the sample", "order.yaml", "version: 1\ninterval: 10s\nhistory_interval: 1s\n", "order.yaml:3"},
		{"unsupported version", "version.yaml", "version: 2\n", "version.yaml:1"},
		{"YAML syntax", "syntax.yaml", "version: 1\nretention: {raw: 24h\n", "syntax.yaml"},
		{"retention order", "retention.yaml", "version: 1\nretention:\n  raw: 48h\n  aggregate: 24h\n", "retention.yaml:"},
		{"mutations without a token", "notoken.yaml", "version: 1\nhttp:\n  mutations: true\n", "notoken.yaml:"},
		{"token file readable by others", "loose.yaml", "version: 1\nhttp:\n  mutations: true\n  token_file: " + loose + "\n", loose},
		{"alert rule without its threshold", "alert.yaml", "version: 1\nalerts:\n  rules:\n    - name: full\n      when: used_above\n", "alert.yaml:"},
		{"missing policy file", "policy.yaml", "version: 1\npolicy_file: " + filepath.Join(dir, "nowhere.yaml") + "\n", "nowhere.yaml"},
	}
	var out []caseResult
	for i, c := range cases {
		p := filepath.Join(dir, c.file)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			return out, err
		}
		spec := o.Spec
		spec.GPUs, spec.Procs, spec.Interval, spec.Config = 1, 0, "", p
		spec.Addr = fmt.Sprintf("127.0.0.1:%d", 19600+i)
		spec.DB = filepath.Join(dir, "history.db")
		r := runCase(ctx, spec.Bin, c.name, spec.args(), nil)
		r.Want = "refused, naming " + c.want
		r.OK = r.Exit > 0 && r.Clean && strings.Contains(r.Log, c.want)
		out = append(out, r)
	}
	return out, nil
}
