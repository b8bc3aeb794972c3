package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	p, err := ReadFile("testdata/node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.DryRun || p.Grace != 15*time.Second || len(p.Reclaim) != 2 || len(p.Quotas) != 2 {
		t.Fatalf("policy = %+v", p)
	}
	r := p.Reclaim[1]
	if r.Name != "idle-notebooks" || r.Line != 11 || r.IdleFor != 30*time.Minute || r.MinBytes != 1<<30 ||
		r.Action != DoReport || r.Grace != 15*time.Second || r.Match.Cgroup != "/user.slice/*" {
		t.Errorf("reclaim[1] = %+v", r)
	}
	q := p.Quotas[0]
	if q.Per != "user" || q.MaxBytes != 40<<30 || q.Action != DoTerm || q.After != 5*time.Minute || q.Grace != 30*time.Second {
		t.Errorf("quotas[0] = %+v", q)
	}
	if q := p.Quotas[1]; q.Action != DoWarn || q.Per != "all" || q.Grace != 15*time.Second {
		t.Errorf("quotas[1] = %+v", q)
	}
}

func TestDefaults(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\nreclaim:\n  - name: r\n    when: [dead]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.DryRun {
		t.Error("dry_run must default to true")
	}
	if p.Grace != DefaultGrace || p.Reclaim[0].Action != DoTerm || p.Reclaim[0].Grace != DefaultGrace {
		t.Errorf("defaults: %+v", p)
	}
}

// TestInvalid: every error names the file, the line and the field.
func TestInvalid(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // the first error, exactly
	}{
		{"empty", "", "p.yaml: empty file: a policy needs at least version: 1"},
		{"syntax", "version: 1\nreclaim: [\n", "p.yaml:2: not valid YAML: did not find expected node content"},
		{"not a mapping", "- 1\n", "p.yaml:1: want a mapping (key: value lines), found a list"},
		{"no version", "dry_run: true\n", "p.yaml:1: version: missing: the file must start with version: 1"},
		{"bad version", "version: 2\n", `p.yaml:1: version: "2" is not a version this vram reads (want 1)`},
		{"unknown top", "version: 1\ndryrun: false\n", "p.yaml:2: dryrun: unknown field (known here: version, dry_run, grace, reclaim, quotas)"},
		{"duplicate key", "version: 1\ngrace: 1s\ngrace: 2s\n", "p.yaml:3: grace: set twice (first on line 2)"},
		{"bad bool", "version: 1\ndry_run: yes\n", `p.yaml:2: dry_run: want true or false, found "yes"`},
		{"bad grace", "version: 1\ngrace: 10\n", `p.yaml:2: grace: want a duration such as 90s, 10m or 1h30m, found "10"`},
		{"negative grace", "version: 1\ngrace: -1s\n", "p.yaml:2: grace: -1s is negative"},
		{"reclaim not list", "version: 1\nreclaim: {}\n", "p.yaml:2: reclaim: want a list (lines starting with -), found a mapping"},
		{"unknown rule field", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    min_byte: 1GiB\n",
			"p.yaml:5: reclaim[0].min_byte: unknown field (known here: name, when, older_than, idle_for, min_bytes, match, action, grace)"},
		{"no name", "version: 1\nreclaim:\n  - when: [dead]\n", "p.yaml:3: reclaim[0].name: missing: every rule needs a name (it appears in reports)"},
		{"no when", "version: 1\nreclaim:\n  - name: a\n", "p.yaml:3: reclaim[0].when: missing: list the conditions"},
		{"empty when", "version: 1\nreclaim:\n  - name: a\n    when: []\n", "p.yaml:4: reclaim[0].when: empty: list the conditions"},
		{"bad condition", "version: 1\nreclaim:\n  - name: a\n    when: [dead, sleeping]\n", `p.yaml:4: reclaim[0].when[1]: unknown condition "sleeping"`},
		{"twice condition", "version: 1\nreclaim:\n  - name: a\n    when: [dead, dead]\n", `p.yaml:4: reclaim[0].when[1]: "dead" listed twice`},
		{"idle without idle_for", "version: 1\nreclaim:\n  - name: a\n    when: [idle]\n", "p.yaml:3: reclaim[0].idle_for: missing: idle and idle_jupyter need"},
		{"idle_for without idle", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    idle_for: 5m\n", "p.yaml:5: reclaim[0].idle_for: set, but when lists neither idle nor idle_jupyter"},
		{"bad bytes", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    min_bytes: lots\n", "p.yaml:5: reclaim[0].min_bytes: want a size such as 512MiB or 40GiB:"},
		{"bad action", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    action: warn\n", `p.yaml:5: reclaim[0].action: "warn" is not an action here (want one of report, term, kill)`},
		{"unknown match field", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    match:\n      uid: 0\n", "p.yaml:6: reclaim[0].match.uid: unknown field (known here: user, cgroup, container, command)"},
		{"empty pattern", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    match:\n      user: \"\"\n", "p.yaml:6: reclaim[0].match.user: empty pattern"},
		{"duplicate names", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n  - name: a\n    when: [orphaned]\n", `p.yaml:5: reclaim[1].name: "a" already names the rule on line 3`},
		{"quota no max", "version: 1\nquotas:\n  - name: q\n    per: user\n", "p.yaml:3: quotas[0].max_bytes: missing"},
		{"quota zero max", "version: 1\nquotas:\n  - name: q\n    max_bytes: 0\n", "p.yaml:4: quotas[0].max_bytes: 0 bytes would flag every process"},
		{"quota bad per", "version: 1\nquotas:\n  - name: q\n    per: team\n    max_bytes: 1GiB\n", `p.yaml:4: quotas[0].per: "team": want one of process, user, container, cgroup, all`},
		{"quota report", "version: 1\nquotas:\n  - name: q\n    max_bytes: 1GiB\n    action: report\n", `p.yaml:5: quotas[0].action: "report" is not an action here (want one of warn, term, kill)`},
		{"alias", "version: 1\nreclaim:\n  - &r {name: a, when: [dead]}\n  - *r\n", "p.yaml:4: reclaim[1]: aliases (*name) are not allowed"},
		{"merge key", "version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    <<: {older_than: 1h}\n", "p.yaml:5: reclaim[0]: merge keys (<<) are not allowed"},
		{"two documents", "version: 1\n---\nversion: 1\n", "p.yaml:2: a second YAML document"},
		{"value is a list", "version: 1\ngrace: [1s]\n", "p.yaml:2: grace: want a value, found a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.yaml))
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("err = %v, want policy errors", err)
			}
			if got := es[0].Error(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("first error\n got %s\nwant %s...", got, tt.want)
			}
		})
	}
}

func TestAllErrorsReported(t *testing.T) {
	_, err := Parse("p.yaml", []byte("version: 1\ngrace: x\nreclaim:\n  - name: a\n    when: [nope]\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 || es[0].Line != 2 || es[1].Line != 5 {
		t.Fatalf("errors = %v", err)
	}
}

func TestReadFileErrors(t *testing.T) {
	if _, err := ReadFile("testdata/missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	big := t.TempDir() + "/big.yaml"
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	seed, _ := os.ReadFile("testdata/node.yaml")
	f.Add(seed)
	f.Add([]byte("version: 1\nreclaim:\n  - &r {name: a, when: [dead]}\n  - *r\n"))
	f.Add([]byte("version: 1\nquotas:\n  - {name: q, max_bytes: 1GiB, per: user}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error of the wrong type: %T %v", err, err)
			}
			for _, e := range es {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error without file or message: %+v", e)
				}
			}
			return
		}
		if p.Version != Version {
			t.Fatalf("accepted without version: %+v", p)
		}
		for _, r := range p.Reclaim {
			if len(r.When) == 0 || r.Name == "" || r.Line == 0 {
				t.Fatalf("accepted rule is incomplete: %+v", r)
			}
		}
		for _, q := range p.Quotas {
			if q.MaxBytes == 0 || q.Name == "" {
				t.Fatalf("accepted quota is incomplete: %+v", q)
			}
		}
	})
}

// TestEveryMistakeInLineOrder: a file with many mistakes gets all of them,
// duplicate names included (even of rules that have other mistakes), sorted
// by line, whatever order the checks run in.
func TestEveryMistakeInLineOrder(t *testing.T) {
	want := []string{
		`testdata/mistakes.yaml:2: grace: want a duration such as 90s, 10m or 1h30m, found "soon"`,
		`testdata/mistakes.yaml:5: reclaim[0].when[1]: unknown condition "sleeping"`,
		`testdata/mistakes.yaml:7: reclaim[0].match.user: empty pattern`,
		`testdata/mistakes.yaml:8: reclaim[0].match.command: empty pattern`,
		`testdata/mistakes.yaml:9: reclaim[0].match.cgroup: empty pattern`,
		`testdata/mistakes.yaml:10: reclaim[0].match.container: empty pattern`,
		`testdata/mistakes.yaml:11: reclaim[1].name: "orphans" already names the rule on line 4`,
		`testdata/mistakes.yaml:13: reclaim[1].min_bytes: want a size such as 512MiB or 40GiB`,
		`testdata/mistakes.yaml:17: reclaim[3].name: "idle-notebooks" already names the rule on line 14`,
		`testdata/mistakes.yaml:21: quotas[0].per: "team": want one of`,
		`testdata/mistakes.yaml:23: quotas[1].name: "big" already names the quota on line 20`,
	}
	// The match fields are kept in a map: run a few times so that an order
	// that depends on the map's iteration shows.
	for range 20 {
		_, err := ReadFile("testdata/mistakes.yaml")
		var es Errors
		if !errors.As(err, &es) {
			t.Fatalf("err = %v, want policy errors", err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.Error())
		}
		ok := len(got) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = strings.HasPrefix(got[i], want[i])
		}
		if !ok {
			t.Fatalf("errors:\n%s\nwant, in this order:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestDuplicateNameOnTheNameLine: the duplicate is reported where its name
// is, also when the name is not a rule's first key.
func TestDuplicateNameOnTheNameLine(t *testing.T) {
	_, err := Parse("p.yaml", []byte("version: 1\nreclaim:\n  - name: a\n    when: [dead]\n  - when: [orphaned]\n    name: a\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Error() != `p.yaml:6: reclaim[1].name: "a" already names the rule on line 3` {
		t.Fatalf("errors = %v", err)
	}
}
