package alert

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
)

const gib = 1 << 30

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// h200 is GPU i with used bytes of 100 GiB (a round total for readable figures).
func h200(i int, used uint64) Device {
	return Device{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H200", Total: 100 * gib, Used: used, Healthy: true}
}

var started = t0.Add(-time.Hour)

func proc(gpuIndex int, pid uint32, bytes uint64) sample.Process {
	return sample.Process{GPU: fmt.Sprintf("GPU-%d", gpuIndex), PID: pid, StartTime: started, Display: "python train.py", Bytes: bytes}
}

func leaking(p sample.Process, slope float64) sample.Process {
	p.Leak, p.Slope = true, slope
	return p
}

func flagged(p sample.Process, f gpu.Flags) sample.Process {
	p.Flags = f
	return p
}

// step is one sample of a fake timeline and the transitions it must give,
// each written by line.
type step struct {
	at   time.Duration // since t0
	devs []Device
	proc []sample.Process
	want []string
}

func line(a api.Alert) string {
	s := fmt.Sprintf("%s %s %s", a.State, a.Rule, a.Severity)
	if a.GPU != "" {
		s += " " + a.GPU
	}
	if a.PID != 0 {
		s += fmt.Sprintf(" pid %d", a.PID)
	}
	return s + ": " + a.Message
}

// run feeds a timeline to e and checks every sample's transitions.
func run(t *testing.T, e *Engine, steps []step) {
	t.Helper()
	for _, s := range steps {
		now := t0.Add(s.at)
		got := e.Evaluate(Input{Time: now, Devices: s.devs, Processes: s.proc})
		var lines []string
		for _, a := range got {
			lines = append(lines, line(a))
			if !a.Time.Equal(now) {
				t.Errorf("at %s: alert time %s, want the sample's", s.at, a.Time)
			}
		}
		if !slices.Equal(lines, s.want) {
			t.Errorf("at %s:\ngot  %s\nwant %s", s.at, strings.Join(lines, "\n     "), strings.Join(s.want, "\n     "))
		}
	}
}

func TestEngine(t *testing.T) {
	full := Rule{Name: "full", When: WhenUsedAbove, Severity: SeverityWarning, Percent: 90, For: 5 * time.Minute}
	tests := []struct {
		name  string
		rules []Rule
		steps []step
	}{
		{"used_above waits For, then fires and resolves", []Rule{full}, []step{
			{0, []Device{h200(0, 92*gib)}, nil, nil},
			{4*time.Minute + 59*time.Second, []Device{h200(0, 95*gib)}, nil, nil},
			{5 * time.Minute, []Device{h200(0, 92*gib+gib/2)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 92.5% used (92.50 GiB of 100.00 GiB) for 5m0s"}},
			{6 * time.Minute, []Device{h200(0, 99*gib)}, nil, nil},
			{7 * time.Minute, []Device{h200(0, 89*gib+gib/2)}, nil, []string{
				"resolved full warning GPU-0: GPU 0 (NVIDIA H200): 89.5% used (89.50 GiB of 100.00 GiB), under 90% again"}},
			{8 * time.Minute, []Device{h200(0, 89*gib)}, nil, nil},
		}},
		{"one sample under the threshold resets a pending alert", []Rule{full}, []step{
			{0, []Device{h200(0, 91*gib)}, nil, nil},
			{3 * time.Minute, []Device{h200(0, 80*gib)}, nil, nil},
			{3*time.Minute + time.Second, []Device{h200(0, 91*gib)}, nil, nil},
			{5 * time.Minute, []Device{h200(0, 91*gib)}, nil, nil},
			{8 * time.Minute, []Device{h200(0, 91*gib)}, nil, nil},
			{8*time.Minute + time.Second, []Device{h200(0, 90*gib)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 90% used (90.00 GiB of 100.00 GiB) for 5m0s"}},
		}},
		{"keep_firing_for holds a resolution back", []Rule{{Name: "full", When: WhenUsedAbove, Percent: 90, KeepFiringFor: 30 * time.Second}}, []step{
			{0, []Device{h200(0, 95*gib)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB)"}},
			{10 * time.Second, []Device{h200(0, 85*gib)}, nil, nil},
			{30 * time.Second, []Device{h200(0, 91*gib)}, nil, nil}, // back above: the clock restarts
			{40 * time.Second, []Device{h200(0, 85*gib)}, nil, nil},
			{69 * time.Second, []Device{h200(0, 85*gib)}, nil, nil},
			{70 * time.Second, []Device{h200(0, 84*gib)}, nil, []string{
				"resolved full warning GPU-0: GPU 0 (NVIDIA H200): 84% used (84.00 GiB of 100.00 GiB), under 90% again"}},
		}},
		{"a GPU without figures keeps its alert", []Rule{{Name: "full", When: WhenUsedAbove, Percent: 90}}, []step{
			{0, []Device{h200(0, 95*gib)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB)"}},
			{time.Second, []Device{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", Error: "GPU is lost"}}, nil, nil},
			{2 * time.Second, []Device{h200(0, 50*gib)}, nil, []string{
				"resolved full warning GPU-0: GPU 0 (NVIDIA H200): 50% used (50.00 GiB of 100.00 GiB), under 90% again"}},
		}},
		{"a GPU without figures starts a pending alert over", []Rule{full}, []step{
			{0, []Device{h200(0, 95*gib)}, nil, nil},
			{2 * time.Minute, []Device{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200"}}, nil, nil},
			{5 * time.Minute, []Device{h200(0, 95*gib)}, nil, nil},
			{10 * time.Minute, []Device{h200(0, 95*gib)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB) for 5m0s"}},
		}},
		{"a GPU that leaves the sample resolves", []Rule{{Name: "full", When: WhenUsedAbove, Percent: 90}}, []step{
			{0, []Device{h200(0, 95*gib), h200(1, 99*gib)}, nil, []string{
				"firing full warning GPU-0: GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB)",
				"firing full warning GPU-1: GPU 1 (NVIDIA H200): 99% used (99.00 GiB of 100.00 GiB)"}},
			{time.Second, []Device{h200(0, 95*gib)}, nil, []string{
				"resolved full warning GPU-1: GPU 1 (NVIDIA H200) is no longer in the sample"}},
		}},
		{"leak: slope threshold, process exit", []Rule{{Name: "leak", When: WhenLeak, Severity: SeverityCritical, MinSlope: 1 << 20}}, []step{
			{0, []Device{h200(0, 0)}, []sample.Process{leaking(proc(0, 7, 10*gib), 512<<10), proc(0, 8, gib)}, nil},
			{time.Second, []Device{h200(0, 0)}, []sample.Process{leaking(proc(0, 7, 10*gib), 3<<20), proc(0, 8, gib)}, []string{
				"firing leak critical GPU-0 pid 7: process 7 (python train.py) on GPU 0 is leaking: grows 3.00 MiB/s, holds 10.00 GiB"}},
			{2 * time.Second, []Device{h200(0, 0)}, []sample.Process{leaking(proc(0, 7, 11*gib), 2<<20)}, nil},
			{3 * time.Second, []Device{h200(0, 0)}, nil, []string{
				"resolved leak critical GPU-0 pid 7: process 7 (python train.py) on GPU 0 is no longer listed on the GPU (it exited or released its memory)"}},
		}},
		{"leak: the verdict changes", []Rule{{Name: "leak", When: WhenLeak}}, []step{
			{0, nil, []sample.Process{leaking(proc(0, 7, 10*gib), 100)}, []string{
				"firing leak warning GPU-0 pid 7: process 7 (python train.py) on GPU GPU-0 is leaking: grows 100 B/s, holds 10.00 GiB"}},
			{time.Second, nil, []sample.Process{proc(0, 7, 10*gib)}, []string{
				"resolved leak warning GPU-0 pid 7: process 7 (python train.py) on GPU GPU-0 is no longer leaking (holds 10.00 GiB)"}},
		}},
		{"a reused PID is another process", []Rule{{Name: "leak", When: WhenLeak}}, []step{
			{0, []Device{h200(0, 0)}, []sample.Process{leaking(proc(0, 7, gib), 1<<20)}, []string{
				"firing leak warning GPU-0 pid 7: process 7 (python train.py) on GPU 0 is leaking: grows 1.00 MiB/s, holds 1.00 GiB"}},
			{time.Second, []Device{h200(0, 0)}, []sample.Process{func() sample.Process {
				p := leaking(proc(0, 7, 2*gib), 1<<20)
				p.StartTime, p.Display = t0, "python serve.py"
				return p
			}()}, []string{
				"resolved leak warning GPU-0 pid 7: process 7 (python train.py) on GPU 0 is no longer listed on the GPU (it exited or released its memory)",
				"firing leak warning GPU-0 pid 7: process 7 (python serve.py) on GPU 0 is leaking: grows 1.00 MiB/s, holds 2.00 GiB"}},
		}},
		{"orphan_holding", []Rule{{Name: "orphans", When: WhenOrphanHolding, Severity: SeverityCritical, MinBytes: gib}}, []step{
			{0, []Device{h200(0, 0), h200(1, 0)}, []sample.Process{
				flagged(proc(1, 9, 3*gib), gpu.FlagOrphaned),
				flagged(proc(0, 10, gib/2), gpu.FlagZombie), // under min_bytes
				flagged(proc(0, 11, 2*gib), gpu.FlagNoSuchProcess|gpu.FlagZombie),
				flagged(proc(0, 12, 5*gib), gpu.FlagIdle),
			}, []string{
				"firing orphans critical GPU-0 pid 11: process 11 (python train.py) on GPU 0 is gone from /proc, is a zombie and holds 2.00 GiB",
				"firing orphans critical GPU-1 pid 9: process 9 (python train.py) on GPU 1 is orphaned and holds 3.00 GiB"}},
			{time.Second, []Device{h200(0, 0), h200(1, 0)}, []sample.Process{
				proc(1, 9, 3*gib),
				flagged(proc(0, 11, gib/2), gpu.FlagNoSuchProcess),
			}, []string{
				"resolved orphans critical GPU-0 pid 11: process 11 (python train.py) on GPU 0 holds 512.00 MiB, under 1.00 GiB",
				"resolved orphans critical GPU-1 pid 9: process 9 (python train.py) on GPU 1 is no longer orphaned (holds 3.00 GiB)"}},
		}},
		{"orphan_holding without min_bytes needs some memory", []Rule{{Name: "orphans", When: WhenOrphanHolding}}, []step{
			{0, nil, []sample.Process{flagged(proc(0, 9, 0), gpu.FlagOrphaned), flagged(proc(0, 10, 1), gpu.FlagOrphaned)}, []string{
				"firing orphans warning GPU-0 pid 10: process 10 (python train.py) on GPU GPU-0 is orphaned and holds 1 B"}},
			{time.Second, nil, []sample.Process{flagged(proc(0, 10, 0), gpu.FlagOrphaned)}, []string{
				"resolved orphans warning GPU-0 pid 10: process 10 (python train.py) on GPU GPU-0 no longer holds GPU memory"}},
		}},
		{"unattributed_above", []Rule{{Name: "unattributed", When: WhenUnattributedAbove, MinBytes: 2 * gib, For: 2 * time.Minute}}, []step{
			{0, []Device{func() Device { d := h200(0, 40*gib); d.Unattributed = 3 * gib; return d }()}, nil, nil},
			{2 * time.Minute, []Device{func() Device { d := h200(0, 40*gib); d.Unattributed = 2 * gib; return d }()}, nil, []string{
				"firing unattributed warning GPU-0: GPU 0 (NVIDIA H200): 2.00 GiB in use by no listed process (40.00 GiB used in all) for 2m0s"}},
			{3 * time.Minute, []Device{func() Device { d := h200(0, 40*gib); d.Unattributed = gib; return d }()}, nil, []string{
				"resolved unattributed warning GPU-0: GPU 0 (NVIDIA H200): memory used by no listed process down to 1.00 GiB, under 2.00 GiB"}},
		}},
		{"device_unhealthy", []Rule{{Name: "unhealthy", When: WhenDeviceUnhealthy, Severity: SeverityCritical}}, []step{
			{0, []Device{h200(0, 0), {Index: 1, UUID: "GPU-1", Name: "NVIDIA H200", Error: "Xid 79: fallen off the bus\n"}}, nil, []string{
				`firing unhealthy critical GPU-1: GPU 1 (NVIDIA H200) is unhealthy: Xid 79: fallen off the bus\n`}},
			{time.Second, []Device{h200(0, 0), {Index: 1, UUID: "GPU-1"}}, nil, nil},
			{2 * time.Second, []Device{h200(0, 0), h200(1, 0)}, nil, []string{
				"resolved unhealthy critical GPU-1: GPU 1 (NVIDIA H200) is healthy again"}},
		}},
		{"order: rules as given, then GPU index and PID", []Rule{
			{Name: "z-orphans", When: WhenOrphanHolding},
			{Name: "a-full", When: WhenUsedAbove, Percent: 50},
		}, []step{
			{0, []Device{h200(1, 60*gib), h200(0, 60*gib)}, []sample.Process{
				flagged(proc(1, 3, gib), gpu.FlagOrphaned),
				flagged(proc(0, 5, gib), gpu.FlagOrphaned),
				flagged(proc(0, 4, gib), gpu.FlagOrphaned),
			}, []string{
				"firing z-orphans warning GPU-0 pid 4: process 4 (python train.py) on GPU 0 is orphaned and holds 1.00 GiB",
				"firing z-orphans warning GPU-0 pid 5: process 5 (python train.py) on GPU 0 is orphaned and holds 1.00 GiB",
				"firing z-orphans warning GPU-1 pid 3: process 3 (python train.py) on GPU 1 is orphaned and holds 1.00 GiB",
				"firing a-full warning GPU-0: GPU 0 (NVIDIA H200): 60% used (60.00 GiB of 100.00 GiB)",
				"firing a-full warning GPU-1: GPU 1 (NVIDIA H200): 60% used (60.00 GiB of 100.00 GiB)"}},
		}},
		{"a process listed twice counts once", []Rule{{Name: "leak", When: WhenLeak}}, []step{
			{0, nil, []sample.Process{leaking(proc(0, 7, gib), 10), leaking(proc(0, 7, gib), 10)}, []string{
				"firing leak warning GPU-0 pid 7: process 7 (python train.py) on GPU GPU-0 is leaking: grows 10 B/s, holds 1.00 GiB"}},
		}},
		{"a rule of unknown condition never fires", []Rule{{Name: "x", When: "hot"}}, []step{
			{0, []Device{{Index: 0, UUID: "GPU-0"}}, []sample.Process{leaking(proc(0, 7, gib), 10)}, nil},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, NewEngine(tc.rules), tc.steps)
		})
	}
}

func TestFiring(t *testing.T) {
	e := NewEngine([]Rule{
		{Name: "full", When: WhenUsedAbove, Percent: 90, For: time.Minute},
		{Name: "leak", When: WhenLeak},
	})
	if f := e.Firing(); len(f) != 0 {
		t.Fatalf("Firing before any sample = %v", f)
	}
	p := leaking(proc(0, 7, gib), 1<<20)
	e.Evaluate(Input{Time: t0, Devices: []Device{h200(0, 95*gib)}, Processes: []sample.Process{p}})
	e.Evaluate(Input{Time: t0.Add(time.Minute), Devices: []Device{h200(0, 96*gib)}, Processes: []sample.Process{p}})
	e.Evaluate(Input{Time: t0.Add(3 * time.Minute), Devices: []Device{h200(0, 97*gib)}, Processes: []sample.Process{p}})
	f := e.Firing()
	if len(f) != 2 {
		t.Fatalf("Firing = %v", f)
	}
	// The time it started firing, the latest figures.
	if a := f[0]; a.Rule != "full" || !a.Time.Equal(t0.Add(time.Minute)) || a.State != StateFiring ||
		a.Message != "GPU 0 (NVIDIA H200): 97% used (97.00 GiB of 100.00 GiB) for 3m0s" {
		t.Errorf("Firing()[0] = %+v", a)
	}
	if a := f[1]; a.Rule != "leak" || a.PID != 7 || !a.StartTime.Equal(started) || !a.Time.Equal(t0) {
		t.Errorf("Firing()[1] = %+v", a)
	}
	// Firing returns copies.
	f[0].Message = "changed"
	if e.Firing()[0].Message == "changed" {
		t.Error("Firing shares its alerts with the engine")
	}
}

func TestSetRules(t *testing.T) {
	full := Rule{Name: "full", When: WhenUsedAbove, Percent: 90, For: 2 * time.Minute, Line: 3}
	leak := Rule{Name: "leak", When: WhenLeak, Line: 8}
	unhealthy := Rule{Name: "unhealthy", When: WhenDeviceUnhealthy}
	e := NewEngine([]Rule{full, leak, unhealthy})
	sick := Device{Index: 1, UUID: "GPU-1", Name: "NVIDIA H200", Error: "Xid 48"}
	devs := []Device{h200(0, 95*gib), sick}
	procs := []sample.Process{leaking(proc(0, 7, gib), 100)}
	run(t, e, []step{{0, devs, procs, []string{
		"firing leak warning GPU-0 pid 7: process 7 (python train.py) on GPU 0 is leaking: grows 100 B/s, holds 1.00 GiB",
		"firing unhealthy warning GPU-1: GPU 1 (NVIDIA H200) is unhealthy: Xid 48"}}})

	// Reload: full moved in the file (unchanged), leak removed, unhealthy
	// now critical (changed), a new rule.
	moved := full
	moved.Line = 20
	critical := unhealthy
	critical.Severity = SeverityCritical
	e.SetRules([]Rule{{Name: "orphans", When: WhenOrphanHolding}, moved, critical})
	run(t, e, []step{
		{time.Minute, devs, procs, []string{
			"resolved leak warning GPU-0 pid 7: the rule was removed or changed by a reload (process 7 (python train.py) on GPU 0 is leaking: grows 100 B/s, holds 1.00 GiB)",
			"resolved unhealthy warning GPU-1: the rule was removed or changed by a reload (GPU 1 (NVIDIA H200) is unhealthy: Xid 48)",
			"firing unhealthy critical GPU-1: GPU 1 (NVIDIA H200) is unhealthy: Xid 48"}},
		// full kept its pending time from t0: it fires at 2m, not 3m.
		{2 * time.Minute, devs, procs, []string{
			"firing full warning GPU-0: GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB) for 2m0s"}},
	})
	// A reload with the same rules changes nothing.
	e.SetRules([]Rule{{Name: "orphans", When: WhenOrphanHolding}, moved, critical})
	run(t, e, []step{{3 * time.Minute, devs, procs, nil}})
	if n := len(e.Firing()); n != 2 {
		t.Errorf("%d alerts firing after a reload that changed nothing, want 2", n)
	}
	// Removing every rule resolves everything.
	e.SetRules(nil)
	run(t, e, []step{{4 * time.Minute, devs, procs, []string{
		"resolved full warning GPU-0: the rule was removed or changed by a reload (GPU 0 (NVIDIA H200): 95% used (95.00 GiB of 100.00 GiB) for 3m0s)",
		"resolved unhealthy critical GPU-1: the rule was removed or changed by a reload (GPU 1 (NVIDIA H200) is unhealthy: Xid 48)"}}})
	if n := len(e.Firing()); n != 0 {
		t.Errorf("%d alerts firing without rules", n)
	}
}

func TestDuplicateRuleNames(t *testing.T) {
	e := NewEngine([]Rule{
		{Name: "a", When: WhenUsedAbove, Percent: 99},
		{Name: "a", When: WhenUsedAbove, Percent: 10},
	})
	run(t, e, []step{{0, []Device{h200(0, 50*gib)}, nil, nil}})
}

func TestMessageHelpers(t *testing.T) {
	for in, want := range map[float64]string{92: "92%", 92.04: "92%", 92.56: "92.5%", 89.99: "89.9%", 100: "100%", 0: "0%"} {
		if got := percent(in); got != want {
			t.Errorf("percent(%v) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("x", 100)
	if got := command(long); len([]rune(got)) != maxCommand || !strings.HasSuffix(got, "…") {
		t.Errorf("command(100 x) = %q", got)
	}
	if got := command("a\x1b[31mb\nc"); got != `a\x1b[31mb\nc` {
		t.Errorf("command with escapes = %q", got)
	}
	if got := command("  "); got != "unknown command" {
		t.Errorf("command(blank) = %q", got)
	}
	if got := rate(-2048); got != "-2.00 KiB/s" {
		t.Errorf("rate(-2048) = %q", got)
	}
}

// TestEvaluateDeterministic: the same timeline gives the same alerts, whatever
// the order of map iteration inside the engine.
func TestEvaluateDeterministic(t *testing.T) {
	rules := []Rule{{Name: "orphans", When: WhenOrphanHolding}, {Name: "full", When: WhenUsedAbove, Percent: 1}}
	var devs []Device
	var procs []sample.Process
	for i := range 8 {
		devs = append(devs, h200(i, 50*gib))
		for pid := range 20 {
			procs = append(procs, flagged(proc(i, uint32(100*i+pid+1), gib), gpu.FlagOrphaned))
		}
	}
	var first []string
	for try := range 5 {
		e := NewEngine(rules)
		var got []string
		for _, a := range e.Evaluate(Input{Time: t0, Devices: devs, Processes: procs}) {
			got = append(got, line(a))
		}
		for _, a := range e.Evaluate(Input{Time: t0.Add(time.Second)}) {
			got = append(got, line(a))
		}
		if len(got) != 2*(8+160) {
			t.Fatalf("%d transitions, want %d", len(got), 2*(8+160))
		}
		if try == 0 {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("try %d differs from the first", try)
		}
	}
}

// TestEngineRandomTimelines: on random samples (GPUs filling and emptying,
// processes coming, going, leaking and being orphaned, reloads), the
// transitions of every instance alternate firing, resolved, firing..., and
// Firing always lists exactly the instances whose last transition was firing.
func TestEngineRandomTimelines(t *testing.T) {
	rules := []Rule{
		{Name: "leak", When: WhenLeak, MinSlope: 10},
		{Name: "full", When: WhenUsedAbove, Percent: 80, For: 3 * time.Second, KeepFiringFor: 2 * time.Second},
		{Name: "orphans", When: WhenOrphanHolding, MinBytes: gib},
		{Name: "unattributed", When: WhenUnattributedAbove, MinBytes: gib, For: time.Second},
		{Name: "unhealthy", When: WhenDeviceUnhealthy, Severity: SeverityCritical},
	}
	states := map[string]int{} // rule+state -> count, to check the timelines exercise every rule
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		e := NewEngine(rules)
		type id struct {
			rule, gpu string
			pid       uint32
			start     time.Time
		}
		firing := map[id]bool{}
		for step := range 300 {
			now := t0.Add(time.Duration(step) * time.Second)
			if rng.IntN(50) == 0 { // a reload dropping or changing a rule now and then
				rs := slices.Clone(rules)
				rs[rng.IntN(len(rs))].Severity = SeverityCritical
				if rng.IntN(2) == 0 {
					rs = rs[1:]
				}
				e.SetRules(rs)
			}
			var in Input
			in.Time = now
			for i := range 1 + rng.IntN(3) {
				d := h200(i, uint64(70+rng.IntN(31))*gib)
				d.Unattributed = uint64(rng.IntN(3)) * gib
				d.Healthy = rng.IntN(10) != 0
				if rng.IntN(20) == 0 {
					d.Total = 0
				}
				in.Devices = append(in.Devices, d)
			}
			for pid := range uint32(1 + rng.IntN(6)) {
				p := proc(rng.IntN(3), pid+1, uint64(rng.IntN(3))*gib)
				p.StartTime = started.Add(time.Duration(rng.IntN(2)) * time.Second) // PIDs are reused
				p.Leak, p.Slope = rng.IntN(3) == 0, float64(rng.IntN(30))
				p.Flags = gpu.Flags(rng.IntN(8)) // orphaned, zombie, gone
				in.Processes = append(in.Processes, p)
			}
			for _, a := range e.Evaluate(in) {
				k := id{a.Rule, a.GPU, a.PID, a.StartTime}
				states[a.Rule+" "+a.State]++
				if a.Message == "" || strings.ContainsAny(a.Message, "\n\r") || !a.Time.Equal(now) {
					t.Fatalf("seed %d step %d: alert %+v", seed, step, a)
				}
				switch a.State {
				case StateFiring:
					if firing[k] {
						t.Fatalf("seed %d step %d: fires twice: %s", seed, step, line(a))
					}
					firing[k] = true
				case StateResolved:
					if !firing[k] {
						t.Fatalf("seed %d step %d: resolves what does not fire: %s", seed, step, line(a))
					}
					delete(firing, k)
				default:
					t.Fatalf("seed %d step %d: state %q", seed, step, a.State)
				}
			}
			now2 := e.Firing()
			if len(now2) != len(firing) {
				t.Fatalf("seed %d step %d: Firing lists %d, transitions say %d", seed, step, len(now2), len(firing))
			}
			for _, a := range now2 {
				if !firing[id{a.Rule, a.GPU, a.PID, a.StartTime}] {
					t.Fatalf("seed %d step %d: Firing lists %s", seed, step, line(a))
				}
			}
		}
	}
	for _, r := range rules {
		for _, s := range []string{StateFiring, StateResolved} {
			if states[r.Name+" "+s] < 10 {
				t.Errorf("%s %s only %d times: the timelines do not exercise it", r.Name, s, states[r.Name+" "+s])
			}
		}
	}
	t.Logf("transitions: %v", states)
}

// TestReadsProcesses: ReadsProcesses is true exactly when a rule observes
// the sample's processes, so that the daemon may leave them out otherwise.
func TestReadsProcesses(t *testing.T) {
	in := Input{
		Devices:   []Device{{Index: 0, UUID: "GPU-a", Total: 100, Used: 90, Healthy: true}},
		Processes: []sample.Process{{GPU: "GPU-a", PID: 7, Bytes: 1}},
	}
	for _, c := range conditions {
		rule := Rule{Name: "r", When: c}
		readsProcs := false
		for _, o := range observe(nil, &rule, in) {
			readsProcs = readsProcs || o.proc != nil
		}
		if got := NewEngine([]Rule{rule}).ReadsProcesses(); got != readsProcs {
			t.Errorf("%s: ReadsProcesses %v, its observations read processes: %v", c, got, readsProcs)
		}
	}
	if NewEngine(nil).ReadsProcesses() {
		t.Error("no rules: ReadsProcesses true")
	}
}
