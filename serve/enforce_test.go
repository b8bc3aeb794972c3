package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
	"github.com/vramhq/vram/serve/api"
)

// auditOf returns the audit trail of the last hour from the store.
func auditOf(t *testing.T, e *testEnv) []api.Action {
	t.Helper()
	e.flush(t)
	as, err := e.d.Actions(context.Background(), e.clk.Now().Add(-time.Hour), e.clk.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return as
}

func policyEnv(t *testing.T, policyYAML string) *testEnv {
	t.Helper()
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.PolicyFile = writeFile(t, dir, "policy.yaml", policyYAML)
	return newEnv(t, 1, cfg)
}

func TestPolicyDryRunAuditsOnce(t *testing.T) {
	e := policyEnv(t, `version: 1
reclaim:
  - name: dead-or-orphaned
    when: [zombie, no_such_process, orphaned]
    min_bytes: 256MiB
    action: term
`)
	events, cancel := e.d.Subscribe()
	defer cancel()
	for range 3 {
		e.step(time.Second)
	}
	acts := auditOf(t, e)
	// GPU 0 of the simulated host has an orphan, a zombie and a process
	// from another PID namespace: three actions, each audited once. Only
	// the orphan could be signalled, so only its SIGTERM is a dry run;
	// the other two are refused as a live run refuses them.
	if len(acts) != 3 {
		t.Fatalf("%d actions, want 3 (one per process, not per sample): %+v", len(acts), acts)
	}
	snap0, _ := e.d.sampler.Sample()
	wantResult := map[uint32]string{
		byShape(t, snap0, "orphan").PID:  "dry run: not sent",
		byShape(t, snap0, "zombie").PID:  "refused: it has already exited",
		byShape(t, snap0, "foreign").PID: "refused: /proc has no such process",
	}
	for _, a := range acts {
		if a.Action != "SIGTERM" || !strings.HasPrefix(a.Result, wantResult[a.PID]) || !strings.Contains(a.Rule, `reclaim rule "dead-or-orphaned"`) || a.Reason == "" {
			t.Errorf("action = %+v, want the result to start with %q", a, wantResult[a.PID])
		}
	}
	if len(e.sig.list()) != 0 {
		t.Errorf("a dry run sent signals: %+v", e.sig.list())
	}
	for result, want := range map[string]float64{"dry_run": 1, "refused": 2} {
		if got := metricSum(t, e.d, "vram_policy_actions_total", map[string]string{"policy": "dead-or-orphaned", "action": "SIGTERM", "result": result}); got != want {
			t.Errorf("vram_policy_actions_total{result=%s} = %v, want %v", result, got, want)
		}
	}
	n := 0
	for len(events) > 0 {
		if ev := <-events; ev.Kind == "action" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d action events, want 3", n)
	}

	// The orphan goes away and comes back: its condition cleared, so it
	// is audited again.
	snap, _ := e.d.sampler.Sample()
	orphan := byShape(t, snap, "orphan")
	e.host.setHidden(orphan.PID, true)
	e.step(time.Second)
	e.host.setHidden(orphan.PID, false)
	e.step(time.Second)
	if acts := auditOf(t, e); len(acts) != 4 || acts[3].PID != orphan.PID {
		t.Errorf("after the orphan came back: %d actions, want a fourth for PID %d", len(acts), orphan.PID)
	}
}

func TestPolicySignals(t *testing.T) {
	e := policyEnv(t, `version: 1
dry_run: false
grace: 10s
reclaim:
  - name: dead-or-orphaned
    when: [zombie, no_such_process, orphaned]
    action: term
`)
	e.step(time.Second)
	snap, _ := e.d.sampler.Sample()
	orphan, zombie, foreign := byShape(t, snap, "orphan"), byShape(t, snap, "zombie"), byShape(t, snap, "foreign")
	acts := auditOf(t, e)
	byPID := map[uint32]api.Action{}
	for _, a := range acts {
		byPID[a.PID] = a
	}
	if a := byPID[orphan.PID]; a.Action != "SIGTERM" || !strings.HasPrefix(a.Result, "ok") || !a.StartTime.Equal(orphan.StartTime) {
		t.Errorf("orphan: %+v", a)
	}
	if a := byPID[zombie.PID]; !strings.HasPrefix(a.Result, "refused: it has already exited") {
		t.Errorf("zombie: %+v", a)
	}
	if a := byPID[foreign.PID]; !strings.HasPrefix(a.Result, "refused: /proc has no such process") {
		t.Errorf("other PID namespace: %+v", a)
	}
	if got := e.sig.list(); len(got) != 1 || got[0] != (sent{int(orphan.PID), syscall.SIGTERM}) {
		t.Fatalf("signals = %+v, want one SIGTERM to the orphan", got)
	}
	// The simulated orphan ignores SIGTERM: SIGKILL follows once the grace
	// is over, not before, and only once.
	for range 9 {
		e.step(time.Second)
	}
	if got := e.sig.list(); len(got) != 1 {
		t.Fatalf("signals before the grace ended: %+v", got)
	}
	e.step(time.Second)
	e.step(time.Second)
	got := e.sig.list()
	if len(got) != 2 || got[1] != (sent{int(orphan.PID), syscall.SIGKILL}) {
		t.Fatalf("signals = %+v, want SIGTERM then SIGKILL to the orphan", got)
	}
	acts = auditOf(t, e)
	last := acts[len(acts)-1]
	if last.Action != "SIGKILL" || !strings.Contains(last.Reason, "still running 10s after SIGTERM") || !strings.HasPrefix(last.Result, "ok") {
		t.Errorf("SIGKILL audit = %+v", last)
	}
	if len(acts) != 4 {
		t.Errorf("%d audit entries, want 4 (3 planned, 1 SIGKILL): %+v", len(acts), acts)
	}
	if got := metricSum(t, e.d, "vram_policy_actions_total", map[string]string{"result": "ok"}); got != 2 {
		t.Errorf("ok actions counted: %v, want 2", got)
	}
}

func TestPolicyNeverSignalsSelf(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.PolicyFile = writeFile(t, dir, "policy.yaml", "version: 1\ndry_run: false\nreclaim:\n  - {name: orphans, when: [orphaned], action: kill}\n")
	var self int
	e := newEnv(t, 1, cfg, func(o *Options) {
		// Make the daemon believe it is the simulated orphan.
		for _, p := range mustSnap(t, o).Processes {
			if p.Device == 0 && p.Flags&0x4 != 0 {
				self = int(p.PID)
			}
		}
		o.Self = self
	})
	e.step(time.Second)
	if got := e.sig.list(); len(got) != 0 {
		t.Fatalf("signals = %+v, want none: the orphan is the daemon itself", got)
	}
	acts := auditOf(t, e)
	if len(acts) != 1 || acts[0].PID != uint32(self) || !strings.Contains(acts[0].Result, "is vram itself") {
		t.Errorf("audit = %+v", acts)
	}
}

func TestPolicyKernelRefuses(t *testing.T) {
	e := policyEnv(t, "version: 1\ndry_run: false\nreclaim:\n  - {name: orphans, when: [orphaned], action: kill}\n")
	e.sig.err = syscall.EPERM
	e.step(time.Second)
	acts := auditOf(t, e)
	if len(acts) != 1 || !strings.HasPrefix(acts[0].Result, "failed: SIGKILL to PID") || !strings.Contains(acts[0].Result, "not permitted") {
		t.Errorf("audit = %+v", acts)
	}
	if got := metricSum(t, e.d, "vram_policy_actions_total", map[string]string{"result": "failed", "policy": "orphans"}); got != 1 {
		t.Errorf("failed actions counted: %v", got)
	}
}

func TestQuotaEscalates(t *testing.T) {
	e := policyEnv(t, `version: 1
dry_run: false
quotas:
  - name: bob
    per: user
    match: {user: bob}
    max_bytes: 256MiB
    action: term
    after: 5s
`)
	e.step(time.Second)
	acts := auditOf(t, e)
	if len(acts) != 1 || acts[0].Action != "warn" || acts[0].Result != "logged" || !strings.Contains(acts[0].Reason, "user=bob") {
		t.Fatalf("first sample: %+v, want one warning", acts)
	}
	for range 4 {
		e.step(time.Second)
	}
	if n := len(auditOf(t, e)); n != 1 || len(e.sig.list()) != 0 {
		t.Fatalf("before after: %d actions, signals %+v", n, e.sig.list())
	}
	e.step(time.Second)
	acts = auditOf(t, e)
	if len(acts) != 2 || acts[1].Action != "SIGTERM" || !strings.HasPrefix(acts[1].Result, "ok") {
		t.Fatalf("after 5 s over: %+v", acts)
	}
}

func TestRuleLabel(t *testing.T) {
	for in, want := range map[string]string{
		`/etc/vram/policy.yaml:12: reclaim rule "dead"`: "dead",
		`p.yaml:3: quota "per \"user\""`:                `per "user"`,
		"api":                                           "api",
		`broken "x`:                                     `broken "x`,
	} {
		if got := ruleLabel(in); got != want {
			t.Errorf("ruleLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSignalAPI(t *testing.T) {
	e := newEnv(t, 1, DefaultConfig())
	ctx := context.Background()
	if _, err := e.d.Signal(ctx, api.SignalRequest{PID: 1234, StartTime: time.Now(), Signal: "TERM"}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("before the first sample: %v", err)
	}
	e.step(time.Second)
	snap, _ := e.d.sampler.Sample()
	target := byShape(t, snap, "jupyter")
	for _, tc := range []struct {
		name string
		req  api.SignalRequest
		want error
	}{
		{"bad signal", api.SignalRequest{PID: target.PID, StartTime: target.StartTime, Signal: "HUP"}, api.ErrInvalid},
		{"init", api.SignalRequest{PID: 1, StartTime: target.StartTime, Signal: "TERM"}, api.ErrConflict},
		{"self", api.SignalRequest{PID: uint32(os.Getpid()), StartTime: target.StartTime, Signal: "TERM"}, api.ErrConflict},
		{"no start time", api.SignalRequest{PID: target.PID, Signal: "TERM"}, api.ErrInvalid},
		{"not on a GPU", api.SignalRequest{PID: 424242, StartTime: target.StartTime, Signal: "TERM"}, api.ErrNotFound},
		{"reused PID", api.SignalRequest{PID: target.PID, StartTime: target.StartTime.Add(time.Second), Signal: "TERM"}, api.ErrConflict},
	} {
		if _, err := e.d.Signal(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if n := len(auditOf(t, e)); n != 0 || len(e.sig.list()) != 0 {
		t.Fatalf("refused requests audited (%d) or signalled (%+v)", n, e.sig.list())
	}
	res, err := e.d.Signal(ctx, api.SignalRequest{PID: target.PID, StartTime: target.StartTime, Signal: "kill", Reason: "forgotten kernel"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Action.Rule != "api" || res.Action.Action != "SIGKILL" || res.Action.Reason != "forgotten kernel" || !strings.HasPrefix(res.Action.Result, "ok") {
		t.Errorf("result = %+v", res)
	}
	if got := e.sig.list(); len(got) != 1 || got[0] != (sent{int(target.PID), syscall.SIGKILL}) {
		t.Errorf("signals = %+v", got)
	}
	if acts := auditOf(t, e); len(acts) != 1 || acts[0].Rule != "api" {
		t.Errorf("audit = %+v", acts)
	}
	// The process named by the request is not the one /proc has now.
	zombie := byShape(t, snap, "zombie")
	if _, err := e.d.Signal(ctx, api.SignalRequest{PID: zombie.PID, StartTime: zombie.StartTime, Signal: "TERM"}); err != nil {
		t.Errorf("zombie: %v", err) // proc signals zombies: they are alive to the kernel
	}
	foreign := byShape(t, snap, "foreign")
	if _, err := e.d.Signal(ctx, api.SignalRequest{PID: foreign.PID, StartTime: time.Unix(1, 0), Signal: "TERM"}); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "cannot be checked") {
		t.Errorf("another PID namespace: %v, want a conflict", err)
	}
}

func mustSnap(t *testing.T, o *Options) *gpu.Snapshot {
	t.Helper()
	s, err := o.Opened.Sampler.Sample()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// goneStater reports one PID as exited, as /proc does once a process is
// reaped between the sample and the signal.
type goneStater struct {
	proc.Stater
	pid int
}

func (g goneStater) Stat(pid int) (gpu.ProcStat, error) {
	if pid == g.pid {
		return gpu.ProcStat{}, fmt.Errorf("/proc/%d: %w", pid, gpu.ErrNoProcess)
	}
	return g.Stater.Stat(pid)
}

// TestDryRunDecidesAsLive runs the same policy as a dry run and live over
// the same host and checks that each process gets the same decision: what
// the live run sends, the dry run reports as not sent; what the live run
// refuses, fails or finds gone, the dry run says too, and counts so.
func TestDryRunDecidesAsLive(t *testing.T) {
	const rules = `reclaim:
  - name: dead-or-orphaned
    when: [zombie, no_such_process, orphaned]
    action: term
`
	snap := mustSnap(t, &newEnv(t, 1, DefaultConfig()).d.opts)
	orphan := byShape(t, snap, "orphan")
	for _, tc := range []struct {
		name string
		opt  envOption
		err  error // the kernel's answer to every signal
	}{
		{"plain", nil, nil},
		{"not permitted", nil, syscall.EPERM},
		{"the orphan is the daemon", func(o *Options) { o.Self = int(orphan.PID) }, nil},
		{"the orphan exited", func(o *Options) { o.Stater = goneStater{o.Opened.Procs, int(orphan.PID)} }, nil},
		{"no /proc", func(o *Options) { o.Opened.Procs = nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(dry bool) (map[uint32]string, map[string]float64, *signalRecorder) {
				cfg := DefaultConfig()
				cfg.PolicyFile = writeFile(t, t.TempDir(), "policy.yaml", fmt.Sprintf("version: 1\ndry_run: %v\n%s", dry, rules))
				var opts []envOption
				if tc.opt != nil {
					opts = append(opts, tc.opt)
				}
				e := newEnv(t, 1, cfg, opts...)
				e.sig.err = tc.err
				e.step(time.Second)
				out := map[uint32]string{}
				for _, a := range auditOf(t, e) {
					out[a.PID] = a.Result
				}
				counts := map[string]float64{}
				for _, r := range []string{"ok", "dry_run", "refused", "gone", "failed"} {
					counts[r] = metricSum(t, e.d, "vram_policy_actions_total", map[string]string{"result": r})
				}
				return out, counts, e.sig
			}
			live, liveCounts, _ := run(false)
			dry, dryCounts, sig := run(true)
			if len(live) != 3 || len(dry) != 3 {
				t.Fatalf("live %v, dry %v: want 3 actions each", live, dry)
			}
			for pid, l := range live {
				want := l
				switch {
				case strings.HasPrefix(l, "ok"):
					want = dryRunResult
				case strings.HasPrefix(l, "failed: "):
					want = "dry run: not sent; sending it would fail: " + strings.TrimPrefix(l, "failed: ")
				}
				if dry[pid] != want {
					t.Errorf("PID %d: live %q, dry run %q; want %q", pid, l, dry[pid], want)
				}
			}
			liveCounts["dry_run"], liveCounts["ok"] = liveCounts["ok"], 0
			for r, n := range liveCounts {
				if dryCounts[r] != n {
					t.Errorf("dry run counted %v %s, want %v (live: %v)", dryCounts[r], r, n, liveCounts)
				}
			}
			if got := sig.list(); len(got) != 0 {
				t.Errorf("the dry run sent %+v", got)
			}
		})
	}
}

// TestProbeSendsNothing probes a real child process the way a dry run does:
// the kernel is asked, nothing is delivered, and the child lives on; once
// it is gone the probe says so as a live signal would.
func TestProbeSendsNothing(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to run: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	pfs, err := gpu.NewProcFS("/proc", nil)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	st, err := pfs.Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := proc.Identity{PID: cmd.Process.Pid, StartTicks: st.StartTicks, StartTime: st.StartTime}
	probe := probeSignaller{proc.Pidfd}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := proc.Signal(pfs, probe, os.Getpid(), id, sig); err != nil {
			t.Fatalf("probe %v: %v", sig, err)
		}
	}
	select {
	case <-exited:
		t.Fatal("the probed child exited: a signal was delivered")
	case <-time.After(200 * time.Millisecond):
	}
	cmd.Process.Kill()
	<-exited
	if err := proc.Signal(pfs, probe, os.Getpid(), id, syscall.SIGTERM); !errors.Is(err, proc.ErrGone) {
		t.Errorf("probe of the reaped child: %v, want gone", err)
	}
}
