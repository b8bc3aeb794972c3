package policy

// Evaluation of the rules against a sample. See policy.go for an overview.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vramhq/vram/internal/units"
)

// Process is what the rules know of one process holding GPU memory.
type Process struct {
	PID       int
	Device    int       // NVML index
	StartTime time.Time // zero when unknown
	User      string
	Cgroup    string
	Container string // container ID, or pod UID when only that is known
	Command   string
	Bytes     uint64

	Zombie, NoSuchProcess, Orphaned, Jupyter bool
	// IdleFor is how long the process is known to have been idle (no GPU
	// activity); 0 when it is busy or nobody watched it long enough.
	IdleFor time.Duration
}

// Sample is the processes holding GPU memory at one instant.
type Sample struct {
	Time      time.Time
	Processes []Process
}

// Action is one planned step for one process.
type Action struct {
	PID    int
	Device int
	Do     Do
	// Grace is the wait between SIGTERM and SIGKILL for DoTerm.
	Grace time.Duration
	// Rule names the rule or quota that planned it ("file:line: reclaim
	// rule \"name\"").
	Rule string
	// Reasons are the facts that made the rule apply, one per condition.
	Reasons []string
	// DryRun is the policy's dry_run: report the action, do not take it.
	DryRun bool
}

// Age is how long ago p started, or -1 when unknown.
func (p Process) Age(now time.Time) time.Duration {
	if p.StartTime.IsZero() {
		return -1
	}
	return now.Sub(p.StartTime)
}

// EvaluateReclaim applies the reclaim rules to s: for each process, the
// first rule (in file order) whose every test passes plans one action.
// Processes no rule selects are left out. The result is in the sample's
// order.
func (p *Policy) EvaluateReclaim(s Sample) []Action {
	var out []Action
	for _, proc := range s.Processes {
		for _, rule := range p.Reclaim {
			reasons, ok := rule.Applies(proc, s.Time)
			if !ok {
				continue
			}
			out = append(out, Action{
				PID: proc.PID, Device: proc.Device, Do: rule.Action, Grace: rule.Grace,
				Rule: where(p.File, rule.Line, "reclaim rule", rule.Name), Reasons: reasons, DryRun: p.DryRun,
			})
			break
		}
	}
	return out
}

// Applies reports whether the rule selects proc at time now, with the facts
// that made it do so.
func (r Rule) Applies(proc Process, now time.Time) ([]string, bool) {
	var reasons []string
	met := false
	for _, c := range r.When {
		var why string
		switch c {
		case CondZombie:
			if proc.Zombie {
				why = "zombie (exited or exiting; its memory goes when its parent reaps it or the driver finishes the teardown)"
			}
		case CondNoSuchProcess:
			if proc.NoSuchProcess {
				why = "no such process in /proc (another PID namespace, or it exited between the reads)"
			}
		case CondDead:
			switch {
			case proc.Zombie:
				why = "dead: zombie"
			case proc.NoSuchProcess:
				why = "dead: no such process in /proc"
			}
		case CondOrphaned:
			if proc.Orphaned {
				why = "orphaned (its starter is gone)"
			}
		case CondIdle, CondIdleJupyter:
			if c == CondIdleJupyter && !proc.Jupyter {
				continue
			}
			if proc.IdleFor > 0 && proc.IdleFor >= r.IdleFor {
				what := "idle"
				if c == CondIdleJupyter {
					what = "idle notebook kernel"
				}
				why = fmt.Sprintf("%s for %v (rule: %v)", what, proc.IdleFor.Round(time.Second), r.IdleFor)
			}
		}
		if why != "" {
			met = true
			reasons = append(reasons, why)
			break
		}
	}
	if !met {
		return nil, false
	}
	if proc.Bytes < r.MinBytes {
		return nil, false
	}
	if r.MinBytes > 0 {
		reasons = append(reasons, fmt.Sprintf("holds %s (rule: at least %s)", units.FormatBytes(proc.Bytes), units.FormatBytes(r.MinBytes)))
	}
	if r.OlderThan > 0 {
		age := proc.Age(now)
		if age >= 0 && age < r.OlderThan {
			return nil, false
		}
		if age >= 0 {
			reasons = append(reasons, fmt.Sprintf("started %v ago (rule: older than %v)", age.Round(time.Second), r.OlderThan))
		}
	}
	if !r.Match.Empty() {
		if !r.Match.Matches(proc) {
			return nil, false
		}
		reasons = append(reasons, "matches "+r.Match.String())
	}
	return reasons, true
}

// Matches reports whether proc matches every set field of m.
func (m Match) Matches(proc Process) bool {
	return (m.User == "" || Glob(m.User, proc.User)) &&
		(m.Cgroup == "" || Glob(m.Cgroup, proc.Cgroup)) &&
		(m.Container == "" || Glob(m.Container, proc.Container)) &&
		(m.Command == "" || Glob(m.Command, proc.Command))
}

func (m Match) String() string {
	var parts []string
	for _, f := range []struct{ k, v string }{{"user", m.User}, {"cgroup", m.Cgroup}, {"container", m.Container}, {"command", m.Command}} {
		if f.v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", f.k, f.v))
		}
	}
	return strings.Join(parts, " ")
}

// Glob matches s against pattern, where * is any run of characters
// (including /) and ? is any one character; every other character stands
// for itself. It runs in O(len(pattern)·len(s)) at worst.
func Glob(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	pi, ti := 0, 0
	star, mark := -1, 0
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ti
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// QuotaState is what quota evaluation remembers between samples: since when
// each group has been over its quota. The zero value is empty; Evaluate
// returns a new state and never changes the one passed in.
type QuotaState struct {
	Over map[string]time.Time // key: quota name + "\x00" + group
}

// groupKey names a process's group under a quota.
func (q Quota) groupKey(proc Process) string {
	switch q.Per {
	case "user":
		return "user=" + proc.User
	case "container":
		return "container=" + proc.Container
	case "cgroup":
		return "cgroup=" + proc.Cgroup
	case "all":
		return "all"
	}
	return fmt.Sprintf("pid=%d", proc.PID)
}

// EvaluateQuotas applies the quotas to s. A group over its quota is warned
// (one DoWarn per process of the group) from the first sample that sees it
// over; once it has stayed over for After and the quota's action is term
// or kill, its largest processes are planned for that action, largest
// first, until the rest fit under the quota. A group that falls back under
// is forgotten. Processes with no known user, container or cgroup are not
// grouped under a quota per that key.
func (p *Policy) EvaluateQuotas(s Sample, prev QuotaState) ([]Action, QuotaState) {
	next := QuotaState{Over: map[string]time.Time{}}
	var out []Action
	for _, q := range p.Quotas {
		groups := map[string][]Process{}
		var keys []string
		for _, proc := range s.Processes {
			if !q.Match.Empty() && !q.Match.Matches(proc) {
				continue
			}
			k := q.groupKey(proc)
			if strings.HasSuffix(k, "=") {
				continue // the key is unknown for this process
			}
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], proc)
		}
		sort.Strings(keys)
		rule := where(p.File, q.Line, "quota", q.Name)
		for _, k := range keys {
			procs := groups[k]
			var total uint64
			for _, proc := range procs {
				total += proc.Bytes
			}
			if total <= q.MaxBytes {
				continue
			}
			stateKey := q.Name + "\x00" + k
			since, ok := prev.Over[stateKey]
			if !ok {
				since = s.Time
			}
			next.Over[stateKey] = since
			over := s.Time.Sub(since)
			head := fmt.Sprintf("%s holds %s over the quota of %s (over for %v)", k, units.FormatBytes(total), units.FormatBytes(q.MaxBytes), over.Round(time.Second))
			slices.SortStableFunc(procs, func(a, b Process) int {
				switch {
				case a.Bytes > b.Bytes:
					return -1
				case a.Bytes < b.Bytes:
					return 1
				}
				return a.PID - b.PID
			})
			escalate := q.Action != DoWarn && over >= q.After
			left := total
			for _, proc := range procs {
				a := Action{PID: proc.PID, Device: proc.Device, Do: DoWarn, Grace: q.Grace, Rule: rule, DryRun: p.DryRun,
					Reasons: []string{head, fmt.Sprintf("this process holds %s", units.FormatBytes(proc.Bytes))}}
				if escalate && left > q.MaxBytes {
					a.Do = q.Action
					a.Reasons = append(a.Reasons, fmt.Sprintf("over for %v, at least the %v the quota allows before acting", over.Round(time.Second), q.After))
					left -= proc.Bytes
				}
				out = append(out, a)
			}
		}
	}
	return out, next
}
