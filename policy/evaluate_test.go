package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvaluateReclaim(t *testing.T) {
	p := mustParse(t, `version: 1
reclaim:
  - name: dead
    when: [dead, orphaned]
    older_than: 10m
    min_bytes: 256MiB
  - name: notebooks
    when: [idle_jupyter]
    idle_for: 30m
    action: report
    match:
      user: "al*"
`)
	procs := []Process{
		{PID: 10, Zombie: true, Bytes: 1 << 30, StartTime: now.Add(-time.Hour)},                                                         // dead
		{PID: 11, Orphaned: true, Bytes: 1 << 30, StartTime: now.Add(-time.Minute)},                                                     // too young
		{PID: 12, Orphaned: true, Bytes: 100 << 20, StartTime: now.Add(-time.Hour)},                                                     // too small
		{PID: 13, NoSuchProcess: true, Bytes: 2 << 30},                                                                                  // unknown age passes
		{PID: 14, Jupyter: true, IdleFor: time.Hour, User: "alice", Bytes: 1 << 30},                                                     // notebook
		{PID: 15, Jupyter: true, IdleFor: 10 * time.Minute, User: "alice", Bytes: 1 << 30},                                              // not idle long enough
		{PID: 16, Jupyter: true, IdleFor: time.Hour, User: "bob", Bytes: 1 << 30},                                                       // other user
		{PID: 17, IdleFor: time.Hour, User: "alice", Bytes: 1 << 30},                                                                    // not a notebook
		{PID: 18, Orphaned: true, Jupyter: true, IdleFor: time.Hour, User: "alice", Bytes: 1 << 30, StartTime: now.Add(-2 * time.Hour)}, // first rule wins
	}
	got := p.EvaluateReclaim(Sample{Time: now, Processes: procs})
	var summary []string
	for _, a := range got {
		summary = append(summary, fmt.Sprintf("%d:%s:%s", a.PID, a.Do, a.Rule))
		if !a.DryRun {
			t.Errorf("PID %d: dry run by default", a.PID)
		}
	}
	want := []string{
		`10:term:p.yaml:3: reclaim rule "dead"`,
		`13:term:p.yaml:3: reclaim rule "dead"`,
		`14:report:p.yaml:7: reclaim rule "notebooks"`,
		`18:term:p.yaml:3: reclaim rule "dead"`,
	}
	if strings.Join(summary, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(summary, "\n"), strings.Join(want, "\n"))
	}
	if r := strings.Join(got[0].Reasons, "; "); !strings.Contains(r, "dead: zombie") || !strings.Contains(r, "holds 1.00 GiB") || !strings.Contains(r, "started 1h0m0s ago") {
		t.Errorf("reasons of PID 10: %s", r)
	}
	if r := strings.Join(got[2].Reasons, "; "); !strings.Contains(r, "idle notebook kernel for 1h0m0s") || !strings.Contains(r, `user="al*"`) {
		t.Errorf("reasons of PID 14: %s", r)
	}
}

func TestEvaluateQuotas(t *testing.T) {
	p := mustParse(t, `version: 1
dry_run: false
quotas:
  - name: per-user
    per: user
    max_bytes: 10GiB
    action: term
    after: 5m
`)
	procs := []Process{
		{PID: 1, User: "alice", Bytes: 6 << 30},
		{PID: 2, User: "alice", Bytes: 5 << 30},
		{PID: 3, User: "alice", Bytes: 1 << 30},
		{PID: 4, User: "bob", Bytes: 9 << 30},
		{PID: 5, Bytes: 50 << 30}, // no user known: not grouped
	}
	do := func(acts []Action) string {
		var s []string
		for _, a := range acts {
			s = append(s, fmt.Sprintf("%d:%s", a.PID, a.Do))
		}
		return strings.Join(s, " ")
	}
	acts, st := p.EvaluateQuotas(Sample{Time: now, Processes: procs}, QuotaState{})
	if got := do(acts); got != "1:warn 2:warn 3:warn" {
		t.Fatalf("first sample: %s", got)
	}
	acts, st = p.EvaluateQuotas(Sample{Time: now.Add(4 * time.Minute), Processes: procs}, st)
	if got := do(acts); got != "1:warn 2:warn 3:warn" {
		t.Fatalf("before after: %s", got)
	}
	acts, st = p.EvaluateQuotas(Sample{Time: now.Add(5 * time.Minute), Processes: procs}, st)
	if got := do(acts); got != "1:term 2:warn 3:warn" {
		t.Fatalf("after 5m: %s (the largest goes first, until the rest fit)", got)
	}
	if acts[0].DryRun || !strings.Contains(acts[0].Reasons[0], "user=alice holds 12.00 GiB over the quota of 10.00 GiB") {
		t.Errorf("action: %+v", acts[0])
	}
	// Back under: forgotten, and the clock restarts.
	acts, st = p.EvaluateQuotas(Sample{Time: now.Add(6 * time.Minute), Processes: procs[1:]}, st)
	if len(acts) != 0 || len(st.Over) != 0 {
		t.Fatalf("under quota: %v %v", acts, st)
	}
	acts, _ = p.EvaluateQuotas(Sample{Time: now.Add(7 * time.Minute), Processes: procs}, st)
	if got := do(acts); got != "1:warn 2:warn 3:warn" {
		t.Fatalf("over again: %s", got)
	}
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true},
		{"*", "/a/b", true},
		{"python*train*", "python /x/train.py --bs 8", true},
		{"python*train*", "torchrun train.py", false},
		{"/kubepods/*/pod?", "/kubepods/burstable/pod1", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*a*a*a*b", strings.Repeat("a", 200), false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	} {
		if got := Glob(tt.p, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}
