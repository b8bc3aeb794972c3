package policy_test

import (
	"fmt"
	"time"

	"github.com/vramhq/vram/policy"
)

func Example() {
	p, err := policy.Parse("node.yaml", []byte(`version: 1
reclaim:
  - name: orphans
    when: [orphaned]
    min_bytes: 1GiB
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	plan := p.EvaluateReclaim(policy.Sample{Time: now, Processes: []policy.Process{
		{PID: 4242, Orphaned: true, Bytes: 3 << 30},
		{PID: 4243, Bytes: 8 << 30},
	}})
	for _, a := range plan {
		fmt.Println(a.PID, a.Do, a.DryRun, a.Rule, a.Reasons)
	}
	// Output:
	// 4242 term true node.yaml:3: reclaim rule "orphans" [orphaned (its starter is gone) holds 3.00 GiB (rule: at least 1.00 GiB)]
}

func ExampleParse_error() {
	_, err := policy.Parse("node.yaml", []byte("version: 1\nreclaim:\n  - name: a\n    when: [dead]\n    min_byte: 1GiB\n"))
	fmt.Println(err)
	// Output:
	// node.yaml:5: reclaim[0].min_byte: unknown field (known here: name, when, older_than, idle_for, min_bytes, match, action, grace)
}
