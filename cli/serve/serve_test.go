package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/vramhq/vram/cli"
	"github.com/vramhq/vram/serve/store"
)

// TestMain lets the test binary run `vram serve` itself: with
// VRAM_SERVE_CHILD set, it runs the command line that follows "--" and
// exits with its status, so that the crash test kills a real daemon
// process without building one.
func TestMain(m *testing.M) {
	if os.Getenv("VRAM_SERVE_CHILD") == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		os.Exit(cli.Main(args, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func write(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badCfg := write(t, dir, "bad.yaml", "version: 1\ninterval: fast\n", 0o600)
	remote := write(t, dir, "remote.yaml", "version: 1\nhttp: {allow_remote: true}\n", 0o600)
	mut := write(t, dir, "mut.yaml", "version: 1\nhttp: {mutations: true, token_file: token}\n", 0o600)
	write(t, dir, "token", "0123456789abcdef0123456789abcdef\n", 0o644)
	badPol := write(t, dir, "badpol.yaml", "version: 1\npolicy_file: pol.yaml\n", 0o600)
	write(t, dir, "pol.yaml", "version: 1\nreclaim:\n  - {name: x, when: [nope]}\n", 0o600)
	missPol := write(t, dir, "misspol.yaml", "version: 1\npolicy_file: nopol.yaml\n", 0o600)
	badAlert := write(t, dir, "badalert.yaml", "version: 1\nalerts:\n  rules:\n    - {name: x, when: never}\n", 0o600)
	db := filepath.Join(dir, "h.db")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"argument", []string{"serve", "extra"}, 2, "unknown command"},
		{"unknown flag", []string{"serve", "--port", "1"}, 2, "unknown flag: --port"},
		{"remote without allow", []string{"serve", "--simulate", "1", "--addr", "0.0.0.0:9400", "--db", db}, 2, "--addr 0.0.0.0:9400"},
		{"empty host", []string{"serve", "--simulate", "1", "--addr", ":9400", "--db", db}, 2, "--addr :9400"},
		{"bad config", []string{"serve", "--simulate", "1", "--config", badCfg, "--db", db}, 2, "bad.yaml:2: interval: want a duration"},
		{"missing config", []string{"serve", "--config", filepath.Join(dir, "none.yaml")}, 2, "none.yaml: no such file"},
		{"missing policy file", []string{"serve", "--simulate", "1", "--config", missPol, "--db", db}, 1, "misspol.yaml: policy_file: policy: open " + filepath.Join(dir, "nopol.yaml") + ": no such file"},
		{"interval", []string{"serve", "--simulate", "1", "--interval", "1ms"}, 2, "--interval 1ms: must be between 10ms and 1h0m0s"},
		{"simulate", []string{"serve", "--simulate", "65"}, 2, "--simulate 65"},
		{"gpu and all", []string{"serve", "--simulate", "2", "--gpu", "0", "--all-gpus"}, 2, "--gpu and --all-gpus"},
		{"no such gpu", []string{"serve", "--simulate", "2", "--gpu", "5", "--db", db}, 2, "--gpu 5: this host has 2 GPUs (0-1)"},
		{"log format", []string{"serve", "--log-format", "xml"}, 2, `--log-format "xml"`},
		{"log level", []string{"serve", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{"token mode", []string{"serve", "--simulate", "1", "--config", mut, "--db", db}, 1, "http.token_file:"},
		{"bad policy", []string{"serve", "--simulate", "1", "--config", badPol, "--db", db}, 2, `pol.yaml:3: reclaim[0].when[0]: unknown condition "nope"`},
		{"bad alert rule", []string{"serve", "--simulate", "1", "--config", badAlert, "--db", db}, 2, "badalert.yaml:4"},
		{"bad listen address", []string{"serve", "--simulate", "1", "--config", remote, "--addr", "256.0.0.1:1", "--db", db}, 1, "listen on 256.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := cli.Main(tc.args, strings.NewReader(""), &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut.String(), tc.code, tc.want)
			}
			if strings.Contains(errOut.String(), "goroutine ") || strings.Contains(errOut.String(), "panic") {
				t.Errorf("a stack trace: %s", errOut.String())
			}
		})
	}
}

// daemon is a `vram serve` child process.
type daemon struct {
	cmd    *exec.Cmd
	addr   string
	stderr *lockedBuffer
	exited chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var addrRE = regexp.MustCompile(`msg="vram serve started" addr=(\S+)`)

// startDaemon runs the test binary as `vram serve` and waits for its
// startup line.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "serve"}, args...)...)
	cmd.Env = append(os.Environ(), "VRAM_SERVE_CHILD=1")
	pr, pw := io.Pipe()
	d := &daemon{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = io.MultiWriter(pw, d.stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- cmd.Wait(); pw.Close() }()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case d.addr = <-found:
	case err := <-d.exited:
		t.Fatalf("vram serve exited before starting: %v\n%s", err, d.stderr.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("vram serve did not start:\n%s", d.stderr.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-d.exited
		}
	})
	return d
}

// ticks returns the times of the committed history ticks (Unix ms) with
// the number of GPUs each holds, read from the file by a second reader
// beside the daemon (SQLite's WAL allows it).
func ticks(t *testing.T, db string) map[int64]int {
	t.Helper()
	st, err := store.Open(context.Background(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[int64]int{}
	uuids := gpuUUIDs(t, db)
	for _, u := range uuids {
		pts, err := st.DeviceHistory(context.Background(), u, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pts {
			out[p.Time.UnixMilli()]++
		}
	}
	return out
}

func gpuUUIDs(t *testing.T, db string) []string {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	rows, err := sdb.Query("SELECT uuid FROM gpus ORDER BY uuid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func integrity(t *testing.T, db string) {
	t.Helper()
	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	var res string
	if err := sdb.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q, %v", res, err)
	}
}

func waitTicks(t *testing.T, d *daemon, db string, atLeast int) map[int64]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(db); err == nil {
			if got := ticks(t, db); len(got) >= atLeast {
				return got
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d ticks after 30 s:\n%s", atLeast, d.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKillKeepsCommittedHistory kills a running daemon with SIGKILL while
// it writes and checks that every tick a reader saw committed is still in
// the file, which is intact; then a restarted daemon adds to the same file
// and stops cleanly on SIGTERM.
func TestKillKeepsCommittedHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve twice")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "h.db")
	cfg := write(t, dir, "c.yaml", "version: 1\ninterval: 20ms\nhistory_interval: 20ms\n", 0o600)
	args := []string{"--simulate", "8", "--addr", "127.0.0.1:0", "--db", db, "--config", cfg}

	d := startDaemon(t, args...)
	seen := waitTicks(t, d, db, 40)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-d.exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the daemon was not killed: %v", err)
	}
	integrity(t, db)
	after := ticks(t, db)
	for at := range seen {
		if after[at] == 0 {
			t.Errorf("tick at %d ms was committed before the kill and is gone after it", at)
		}
	}
	for at, n := range after {
		if n != 8 {
			t.Errorf("tick at %d ms holds %d GPUs of 8: a tick written in part", at, n)
		}
	}
	t.Logf("%d ticks seen before the kill, %d in the file after it", len(seen), len(after))

	d = startDaemon(t, args...)
	res, err := http.Get("http://" + d.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	more := waitTicks(t, d, db, len(after)+40)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("SIGTERM: exit %v\n%s", err, d.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop on SIGTERM")
	}
	if !strings.Contains(d.stderr.String(), `msg=stopped`) {
		t.Errorf("no clean stop in the log:\n%s", d.stderr.String())
	}
	integrity(t, db)
	final := ticks(t, db)
	for at := range more {
		if final[at] != 8 {
			t.Errorf("tick at %d ms lost or cut (%d GPUs)", at, final[at])
		}
	}
	if len(final) < len(more) {
		t.Errorf("%d ticks at the end, fewer than the %d seen", len(final), len(more))
	}
}

// TestSighupReloads sends SIGHUP to a daemon whose policy file was broken
// meanwhile and then fixed: the first reload fails and is logged, the
// second applies.
func TestSighupReloads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve")
	}
	dir := t.TempDir()
	write(t, dir, "pol.yaml", "version: 1\nreclaim:\n  - {name: orphans, when: [orphaned]}\n", 0o600)
	cfg := write(t, dir, "c.yaml", "version: 1\ninterval: 50ms\npolicy_file: pol.yaml\n", 0o600)
	d := startDaemon(t, "--simulate", "1", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "h.db"), "--config", cfg)
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(d.stderr.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log:\n%s", want, d.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	write(t, dir, "pol.yaml", "version: 1\nreclaim: {}\n", 0o600)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog("reload failed; the rules in force stay")
	write(t, dir, "pol.yaml", "version: 1\nreclaim:\n  - {name: zombies, when: [zombie]}\n", 0o600)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog("msg=reloaded")
	d.cmd.Process.Signal(syscall.SIGINT)
	if err := <-d.exited; err != nil {
		t.Fatalf("SIGINT: %v", err)
	}
}

// runChild runs the test binary as `vram serve args...` and returns its exit
// status and stderr; a daemon that is still running after wait is killed
// and the test fails: it should have refused to start.
func runChild(t *testing.T, wait time.Duration, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--", "serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "VRAM_SERVE_CHILD=1"), env...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("vram serve %s started instead of refusing:\n%s", strings.Join(args, " "), stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestEmptyDB: `--db ”` is refused, and no history file is created at the
// default path.
func TestEmptyDB(t *testing.T) {
	state := t.TempDir()
	for _, args := range [][]string{{"--db", ""}, {"--db="}} {
		code, stderr := runChild(t, 20*time.Second, []string{"XDG_STATE_HOME=" + state},
			append([]string{"--simulate", "1", "--addr", "127.0.0.1:0"}, args...)...)
		want := "vram: --db: empty path: name the history file, or leave --db out for the default (" + filepath.Join(state, "vram", "history.db") + ")"
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", args, code, stderr, want)
		}
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("the state directory has %v: something was created", ents)
	}
}

// TestPortInUseCreatesNothing: a listen address already taken fails before
// the history file (or its directory) exists.
func TestPortInUseCreatesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	db := filepath.Join(dir, "state", "h.db")
	var out, errOut bytes.Buffer
	code := cli.Main([]string{"serve", "--simulate", "1", "--addr", ln.Addr().String(), "--db", db}, strings.NewReader(""), &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "listen on "+ln.Addr().String()) || !strings.Contains(errOut.String(), "address already in use") {
		t.Errorf("exit %d, stderr %q; want exit 1 and the port in use", code, errOut.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestSecondDaemonOnOneFile starts two `vram serve` processes on one
// history file: the second refuses, naming the first one's PID, and
// writes nothing; after the first is killed with SIGKILL the file can be
// used again.
func TestSecondDaemonOnOneFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve three times")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "h.db")
	cfg := write(t, dir, "c.yaml", "version: 1\ninterval: 20ms\nhistory_interval: 20ms\n", 0o600)
	args := []string{"--simulate", "1", "--addr", "127.0.0.1:0", "--db", db, "--config", cfg}
	first := startDaemon(t, args...)
	waitTicks(t, first, db, 3)

	code, stderr := runChild(t, 20*time.Second, nil, args...)
	want := fmt.Sprintf("history file %s is in use by PID %d, which holds its lock %s.lock", db, first.cmd.Process.Pid, db)
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--db") {
		t.Errorf("second daemon: exit %d, stderr %q; want exit 1 and %q", code, stderr, want)
	}

	first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.exited
	third := startDaemon(t, args...)
	third.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-third.exited; err != nil {
		t.Errorf("after the first was killed: %v\n%s", err, third.stderr.String())
	}
}

// TestSighupWithFlags reloads an unchanged configuration under flags that
// override it (--interval, --read-only): nothing is reported as changed.
func TestSighupWithFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve")
	}
	dir := t.TempDir()
	cfg := write(t, dir, "c.yaml", "version: 1\nhistory_interval: 50ms\n", 0o600)
	d := startDaemon(t, "--simulate", "1", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "h.db"), "--config", cfg,
		"--interval", "100ms", "--read-only")
	d.cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.stderr.String(), "msg=reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload in the log:\n%s", d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if log := d.stderr.String(); strings.Contains(log, "take effect at the next start only") {
		t.Errorf("settings reported as changed in an unchanged file:\n%s", log)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d.exited; err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
}

// alertStates returns, per alert (rule, GPU, PID), its recorded states in
// order, read from the file beside the daemon.
func alertStates(t *testing.T, db string) map[string][]string {
	t.Helper()
	st, err := store.Open(context.Background(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	as, err := st.Alerts(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, a := range as {
		k := fmt.Sprintf("%s/%s/%d", a.Name, a.GPU, a.PID)
		out[k] = append(out[k], a.State)
	}
	return out
}

// TestKillWithAlertsFiring kills a daemon with SIGKILL while alerts fire
// and restarts it on the same file: each alert it left firing is resolved,
// fires again while its condition holds, and never has two "firing"
// transitions without a "resolved" between them.
func TestKillWithAlertsFiring(t *testing.T) {
	if testing.Short() {
		t.Skip("runs vram serve twice")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "h.db")
	cfg := write(t, dir, "c.yaml", "version: 1\ninterval: 20ms\nalerts:\n  rules:\n    - {name: orphans, when: orphan_holding, min_bytes: 1MiB}\n", 0o600)
	args := []string{"--simulate", "1", "--addr", "127.0.0.1:0", "--db", db, "--config", cfg}
	waitAlerts := func(d *daemon, what string, cond func(map[string][]string) bool) map[string][]string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if got := alertStates(t, db); cond(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s: %v\n%s", what, alertStates(t, db), d.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	d := startDaemon(t, args...)
	before := waitAlerts(d, "alert firing", func(m map[string][]string) bool { return len(m) > 0 })
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited

	d = startDaemon(t, args...)
	after := waitAlerts(d, "alert firing again", func(m map[string][]string) bool {
		for k := range before {
			if len(m[k]) < 3 {
				return false
			}
		}
		return true
	})
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d.exited; err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	for k, states := range after {
		if want := "firing,resolved,firing"; strings.Join(states, ",") != want && before[k] != nil {
			t.Errorf("%s: %v, want %s", k, states, want)
		}
		for i := 1; i < len(states); i++ {
			if states[i] == states[i-1] {
				t.Errorf("%s: %v: %s twice in a row", k, states, states[i])
			}
		}
	}
}
