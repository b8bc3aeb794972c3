package serve

// Policies: the policy file's reclaim rules and quotas evaluated at each
// sample, their actions taken (or, in dry run, only recorded) and audited.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/proc"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
)

// Results of an audited action, as the metrics' result label has them.
const (
	resultLogged  = "logged"  // report or warn: nothing to send
	resultDryRun  = "dry_run" // a signal the policy's dry run kept back
	resultOK      = "ok"      // the signal was sent
	resultRefused = "refused" // vram decided not to send it
	resultGone    = "gone"    // the process had exited (or its PID was reused)
	resultFailed  = "failed"  // the kernel refused (e.g. not permitted)
)

// actor sends checked signals and audits every action, for the policies
// (sampling goroutine) and the API (HTTP goroutines): its fields are set
// once and what it calls is safe for concurrent use.
type actor struct {
	d    *Daemon
	st   proc.Stater // nil when /proc cannot be read: nothing is signalled
	sg   proc.Signaller
	self int
}

// signal sends sig to the process id names after proc's checks and says
// what happened as an audit result and its class. With dry set (a policy's
// dry run) every check runs exactly as for a real signal, but the handle is
// only probed with signal 0, which sends nothing and fails where the
// signal would (not permitted, exited): the audit then says what a live
// run would have done.
func (a *actor) signal(id proc.Identity, sig syscall.Signal, dry bool) (result, class string) {
	if a.st == nil {
		return "refused: /proc cannot be read, so the process's identity cannot be checked", resultRefused
	}
	sg := a.sg
	if dry {
		sg = probeSignaller{a.sg}
	}
	err := proc.Signal(a.st, sg, a.self, id, sig)
	switch {
	case err == nil && dry:
		return dryRunResult, resultDryRun
	case err == nil:
		if a.d.info.Simulated {
			return "ok (simulated host: nothing real was sent)", resultOK
		}
		return "ok", resultOK
	case errors.Is(err, proc.ErrGone):
		return "gone: " + err.Error(), resultGone
	case errors.Is(err, proc.ErrRefused):
		return "refused: " + err.Error(), resultRefused
	case dry:
		return "dry run: not sent; sending it would fail: " + err.Error(), resultFailed
	}
	return "failed: " + err.Error(), resultFailed
}

// dryRunResult is the audit result of a signal that a dry run kept back
// and that would have been sent.
const dryRunResult = "dry run: not sent (the policy file says dry_run: true, the default)"

// probeSignaller opens real handles whose Signal sends signal 0 instead:
// the kernel checks that the process exists and may be signalled, and
// nothing is delivered.
type probeSignaller struct{ sg proc.Signaller }

func (p probeSignaller) Open(pid int) (proc.Handle, error) {
	h, err := p.sg.Open(pid)
	if err != nil {
		return nil, err
	}
	return probeHandle{h}, nil
}

type probeHandle struct{ h proc.Handle }

func (p probeHandle) Signal(syscall.Signal) error { return p.h.Signal(0) }
func (p probeHandle) Close() error                { return p.h.Close() }

// audit records one action: in the history file, the log, the metrics and
// the live stream. gpuIndex is the NVML index (-1: none).
func (a *actor) audit(gpuIndex int, label string, act store.Action, class string) {
	d := a.d
	d.w.record(writeOp{action: &act})
	lvl := d.log.Info
	if class == resultOK || class == resultFailed {
		lvl = d.log.Warn
	}
	lvl("policy action", "rule", act.Rule, "pid", act.PID, "action", act.Action, "result", act.Result, "reason", act.Reason)
	d.coll.CountAction(gpuIndex, label, act.Action, class)
	d.hub.publish(api.Event{Kind: "action", Action: &api.Action{
		Time: act.Time, Rule: act.Rule, PID: act.PID, StartTime: act.StartTime,
		Action: act.Action, Reason: act.Reason, Result: act.Result,
	}})
}

// ruleLabel is the short name of a policy action's rule for the metrics:
// `file:12: reclaim rule "dead"` becomes "dead".
func ruleLabel(rule string) string {
	if i := strings.LastIndex(rule, ` "`); i >= 0 {
		if name, err := strconv.Unquote(rule[i+1:]); err == nil {
			return name
		}
	}
	return rule
}

// actKey is one planned action on one process lifetime; it is audited once
// and not again while the rule keeps planning it.
type actKey struct {
	rule  string
	pid   int
	start int64
	do    policy.Do
}

// procIdentity is a process lifetime across GPUs.
type procIdentity struct {
	pid   int
	start int64
}

// pendingKill is a SIGTERM whose grace runs: SIGKILL follows at at if the
// process is still alive then.
type pendingKill struct {
	id     proc.Identity
	gpu    int
	rule   string
	at     time.Time
	grace  time.Duration
	reason string
}

// enforcer is the policies' state across samples. It belongs to the
// sampling goroutine.
type enforcer struct {
	a       *actor
	seen    map[actKey]struct{}
	pending map[procIdentity]*pendingKill
	quota   policy.QuotaState
}

// step evaluates the policy on one sample's records and acts on what is
// new.
func (e *enforcer) step(now time.Time, records []sample.Process, pol *policy.Policy) {
	in := policy.FromProcesses(now, records)
	acts := pol.EvaluateReclaim(in)
	q, next := pol.EvaluateQuotas(in, e.quota)
	e.quota = next
	acts = append(acts, q...)
	byPID := make(map[int]policy.Process, len(in.Processes))
	for _, p := range in.Processes {
		byPID[p.PID] = p
	}
	cur := make(map[actKey]struct{}, len(acts))
	for _, act := range acts {
		p := byPID[act.PID]
		k := actKey{rule: act.Rule, pid: act.PID, do: act.Do}
		if !p.StartTime.IsZero() {
			k.start = p.StartTime.UnixNano()
		}
		cur[k] = struct{}{}
		if _, done := e.seen[k]; done {
			continue
		}
		e.act(now, act, p)
	}
	e.seen = cur
}

// act takes one planned action (or records that the dry run keeps it
// back) and audits it.
func (e *enforcer) act(now time.Time, act policy.Action, p policy.Process) {
	rec := store.Action{Time: now, Rule: act.Rule, PID: uint32(act.PID), StartTime: p.StartTime, Reason: strings.Join(act.Reasons, "; ")}
	label := ruleLabel(act.Rule)
	var sig syscall.Signal
	switch act.Do {
	case policy.DoTerm:
		sig = syscall.SIGTERM
	case policy.DoKill:
		sig = syscall.SIGKILL
	default: // report, warn
		rec.Action, rec.Result = string(act.Do), "logged"
		e.a.audit(act.Device, label, rec, resultLogged)
		return
	}
	rec.Action = proc.SignalName(sig)
	id := proc.Identity{PID: act.PID, StartTime: p.StartTime}
	// A dry run takes the same decisions as a live one; only the signal
	// is not sent.
	var class string
	switch {
	case p.Zombie:
		rec.Result, class = "refused: it has already exited; its memory goes when its parent reaps it or the driver finishes the teardown", resultRefused
	case p.NoSuchProcess:
		rec.Result, class = "refused: /proc has no such process (another PID namespace, or it exited), so its identity cannot be checked", resultRefused
	default:
		rec.Result, class = e.a.signal(id, sig, act.DryRun)
	}
	e.a.audit(act.Device, label, rec, class)
	if class == resultOK && sig == syscall.SIGTERM {
		k := procIdentity{act.PID, rec.StartTime.UnixNano()}
		if _, ok := e.pending[k]; !ok {
			e.pending[k] = &pendingKill{id: id, gpu: act.Device, rule: act.Rule, at: now.Add(act.Grace), grace: act.Grace, reason: rec.Reason}
		}
	}
}

// kills sends SIGKILL to the processes still alive at the end of their
// grace, checking their identity again, and audits each one.
func (e *enforcer) kills(now time.Time) {
	for k, pk := range e.pending {
		if now.Before(pk.at) {
			continue
		}
		delete(e.pending, k)
		rec := store.Action{Time: now, Rule: pk.rule, PID: uint32(pk.id.PID), StartTime: pk.id.StartTime, Action: "SIGKILL",
			Reason: fmt.Sprintf("still running %v after SIGTERM (%s)", pk.grace, pk.reason)}
		var class string
		alive, err := proc.Alive(e.a.st, pk.id)
		switch {
		case err != nil:
			rec.Result, class = "failed: "+err.Error(), resultFailed
		case !alive:
			rec.Result, class = "not sent: it exited within the grace", resultGone
		default:
			rec.Result, class = e.a.signal(pk.id, syscall.SIGKILL, false)
		}
		e.a.audit(pk.gpu, ruleLabel(pk.rule), rec, class)
	}
}
