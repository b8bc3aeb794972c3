// Package policy reads vram's policy files and evaluates their rules.
//
// A policy file is YAML. It holds two kinds of rules for the processes that
// hold GPU memory on a node:
//
//   - reclaim rules: a process that is dead (zombie, or listed by the driver
//     with no such process in /proc), orphaned, or idle, for long enough and
//     while holding enough memory, is reported, terminated (SIGTERM, then
//     SIGKILL after a grace period) or killed;
//   - quotas: the processes of a user, a container, a cgroup or a command
//     pattern may hold at most so many bytes; over it, the quota warns, then
//     terminates the largest holders after a delay, then kills them after the
//     grace period.
//
// A file looks like this (every field is listed in docs/reclaim.md):
//
//	version: 1
//	dry_run: true          # the default: plan and report, never signal
//	grace: 10s             # SIGTERM to SIGKILL
//	reclaim:
//	  - name: dead-or-orphaned
//	    when: [zombie, no_such_process, orphaned]
//	    older_than: 10m
//	    min_bytes: 256MiB
//	    action: term
//	  - name: idle-notebooks
//	    when: [idle_jupyter]
//	    idle_for: 30m
//	    min_bytes: 1GiB
//	quotas:
//	  - name: per-user
//	    per: user
//	    max_bytes: 40GiB
//	    action: term
//	    after: 5m
//
// # Reading
//
// Parse decodes the YAML into a node tree and walks it against the schema
// itself rather than through reflection, so that decoding is strict (a
// field the schema does not know is an error, as is a duplicate key or a
// value of the wrong kind) and every error names the file, the line and the
// field ("policy.yaml:7: reclaim[0].min_bytes: ..."). dry_run defaults to
// true: a file has to say dry_run: false before any rule may send a signal.
//
// # Evaluation
//
// Evaluation is a pure function: a Sample (the processes on the node at one
// instant, with the facts the rules test) goes in, planned Actions with
// their reasons come out. Nothing is signalled here; the caller (vram reclaim
// today, the node daemon later) acts on the plan, re-checking each process's
// identity right before each signal (package proc). Quotas escalate over
// time, so their evaluation also takes and returns a QuotaState, the time
// each group went over its quota; the function stays pure.
package policy

import (
	"fmt"
	"strings"
	"time"
)

// Version is the only policy file version this package reads.
const Version = 1

// DefaultGrace is the time between SIGTERM and SIGKILL when a file does not
// set grace.
const DefaultGrace = 10 * time.Second

// Policy is a parsed and validated policy file.
type Policy struct {
	File    string // the name errors and reasons use
	Version int
	// DryRun is true unless the file says dry_run: false: the rules are
	// evaluated and reported, and nothing is signalled.
	DryRun  bool
	Grace   time.Duration
	Reclaim []Rule
	Quotas  []Quota
}

// Condition is one state a reclaim rule looks for.
type Condition string

// The conditions a reclaim rule may list under when; a process meets the
// rule when it is in any of them.
const (
	// CondZombie: the process is a zombie or exiting (gpu.FlagZombie).
	CondZombie Condition = "zombie"
	// CondNoSuchProcess: the driver lists the PID, /proc has no such
	// process (another PID namespace, or it exited between the reads).
	CondNoSuchProcess Condition = "no_such_process"
	// CondDead is zombie or no_such_process.
	CondDead Condition = "dead"
	// CondOrphaned: the process's starter is gone (gpu.FlagOrphaned).
	CondOrphaned Condition = "orphaned"
	// CondIdle: no GPU activity for at least idle_for.
	CondIdle Condition = "idle"
	// CondIdleJupyter: a notebook kernel idle for at least idle_for.
	CondIdleJupyter Condition = "idle_jupyter"
)

var conditions = []Condition{CondZombie, CondNoSuchProcess, CondDead, CondOrphaned, CondIdle, CondIdleJupyter}

// Do is what an action does.
type Do string

// The actions. Term means SIGTERM, then SIGKILL after the grace period if
// the process is still alive.
const (
	DoReport Do = "report" // reclaim rules: list the process only
	DoWarn   Do = "warn"   // quotas: warn only
	DoTerm   Do = "term"
	DoKill   Do = "kill"
)

// Match selects processes; an empty field matches everything, and a
// process must match every field that is set. Patterns are globs where *
// matches any run of characters (slashes included) and ? any one character.
type Match struct {
	User      string // user name
	Cgroup    string // cgroup path
	Container string // container ID (the 64 hex digits) or pod UID
	Command   string // command line joined with spaces
}

// Empty reports whether m matches every process.
func (m Match) Empty() bool { return m == Match{} }

// Rule is a reclaim rule.
type Rule struct {
	Name string
	Line int // where the rule starts in the file
	When []Condition
	// OlderThan: the process started at least this long ago (a process
	// whose start time is unknown, one with no such process, passes).
	OlderThan time.Duration
	// IdleFor: how long idle and idle_jupyter need the process to have
	// been idle.
	IdleFor  time.Duration
	MinBytes uint64
	Match    Match
	Action   Do // report, term or kill; default term
	Grace    time.Duration
}

// Quota caps the memory of a group of processes.
type Quota struct {
	Name string
	Line int
	// Per groups the matching processes: "user", "container", "cgroup",
	// "process" (each process alone) or "all" (all matching processes
	// together). Default "process".
	Per      string
	Match    Match
	MaxBytes uint64
	// Action is the furthest the quota escalates: warn, term or kill.
	Action Do
	// After is how long a group stays over the quota, warned, before its
	// largest processes are signalled.
	After time.Duration
	Grace time.Duration
}

var perKeys = []string{"process", "user", "container", "cgroup", "all"}

// where names a rule in reasons and errors.
func where(file string, line int, kind, name string) string {
	if line == 0 { // rules that come from elsewhere than a file (flags)
		return fmt.Sprintf("%s: %s %q", file, kind, name)
	}
	return fmt.Sprintf("%s:%d: %s %q", file, line, kind, name)
}

func joinConds(cs []Condition) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}
