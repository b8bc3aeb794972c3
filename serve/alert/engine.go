package alert

// Evaluating rules on samples. See doc.go for an overview.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/sample"
)

// Input is one sample of the node, as the daemon hands it to Evaluate.
type Input struct {
	Time      time.Time
	Devices   []Device
	Processes []sample.Process // the daemon's records of the sample
}

// Device is one GPU in an Input. Sizes are bytes. Total is 0 when the
// daemon could not read the GPU's memory; the memory rules then leave the
// GPU's alerts as they are until it can.
type Device struct {
	Index        int
	UUID         string
	Name         string // model name, for messages ("NVIDIA H200"); may be empty
	Total, Used  uint64
	Unattributed uint64 // used by no listed process
	Healthy      bool
	Error        string // why it is not healthy
}

// Engine turns samples into alert transitions. It holds, for every rule and
// subject (GPU or process) whose condition holds, an instance that is pending
// (the condition holds, not yet for Rule.For) or firing. Its methods are safe
// for concurrent use; it starts no goroutines and reads no clock: time is
// Input.Time.
type Engine struct {
	mu      sync.Mutex
	rules   []Rule // duplicates of an earlier name removed
	order   map[string]int
	inst    map[key]*instance
	retired []*instance // firing alerts of rules a SetRules removed or changed
	gen     uint64      // counts Evaluate calls; instance.seen is the last that saw it
	obs     []observation
}

// key identifies an instance: the rule, and the GPU and process it is about
// (empty and zero when the rule is not about one). start is the process's
// start time in Unix nanoseconds, so that a reused PID is a new instance.
type key struct {
	rule  string
	gpu   string
	pid   uint32
	start int64
}

type instance struct {
	key      key
	gpuIndex int    // for ordering; -1 when the GPU is not in the sample
	subject  string // "GPU 0 (NVIDIA H200)", "process 12 (python) on GPU 0"
	seen     uint64 // the Evaluate call that last saw the subject
	since    time.Time
	firing   bool
	cleared  time.Time // when the condition stopped holding while firing
	alert    api.Alert // the firing alert, Message kept current
	severity string
}

// NewEngine returns an Engine evaluating rules. Names must be unique (Decode
// ensures it); a rule whose name repeats an earlier one is ignored.
func NewEngine(rules []Rule) *Engine {
	e := &Engine{inst: map[key]*instance{}}
	e.setRules(rules)
	return e
}

func (e *Engine) setRules(rules []Rule) {
	e.rules = e.rules[:0:0]
	e.order = map[string]int{}
	for _, r := range rules {
		if _, dup := e.order[r.Name]; dup {
			continue
		}
		e.order[r.Name] = len(e.rules)
		e.rules = append(e.rules, r)
	}
}

// SetRules replaces the rules (a configuration reload). Instances of rules
// that are unchanged (same name, same fields but Line) are kept, so a reload
// neither re-fires nor forgets how long a condition has held. Firing alerts of
// rules that were removed or changed resolve at the next Evaluate; a changed
// rule then starts over.
func (e *Engine) SetRules(rules []Rule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := map[string]Rule{}
	for _, r := range e.rules {
		old[r.Name] = r
	}
	e.setRules(rules)
	for k, in := range e.inst {
		if i, ok := e.order[k.rule]; ok && sameRule(old[k.rule], e.rules[i]) {
			continue
		}
		delete(e.inst, k)
		if in.firing {
			e.retired = append(e.retired, in)
		}
	}
}

func sameRule(a, b Rule) bool {
	a.Line, b.Line = 0, 0
	return a == b
}

// Evaluate takes one sample and returns the alerts that start firing
// (State "firing") and those that resolve ("resolved") at in.Time, ordered by
// rule (in the rules' order), then GPU index, PID and start time. Resolutions
// of rules removed by SetRules come first.
func (e *Engine) Evaluate(in Input) []api.Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []transition
	for _, old := range e.retired {
		a := old.alert
		a.Time, a.State = in.Time, StateResolved
		a.Message = "the rule was removed or changed by a reload (" + old.alert.Message + ")"
		out = append(out, transition{rule: -1, in: old, alert: a})
	}
	e.retired = nil
	devs := make(map[string]*Device, len(in.Devices))
	for i := range in.Devices {
		d := &in.Devices[i]
		if _, dup := devs[d.UUID]; !dup {
			devs[d.UUID] = d
		}
	}
	e.gen++
	for ri := range e.rules {
		rule := &e.rules[ri]
		e.obs = observe(e.obs[:0], rule, in)
		for i := range e.obs {
			if t, ok := e.step(rule, &e.obs[i], in.Time, devs); ok {
				t.rule = ri
				out = append(out, t)
			}
		}
	}
	clear(e.obs) // drop the sample's pointers
	// Instances whose GPU or process is no longer in the sample.
	for k, inst := range e.inst {
		if inst.seen == e.gen {
			continue
		}
		delete(e.inst, k)
		if !inst.firing {
			continue
		}
		a := inst.alert
		a.Time, a.State = in.Time, StateResolved
		if k.pid != 0 {
			a.Message = inst.subject + " is no longer listed on the GPU (it exited or released its memory)"
		} else {
			a.Message = inst.subject + " is no longer in the sample"
		}
		out = append(out, transition{rule: e.order[k.rule], in: inst, alert: a})
	}
	slices.SortFunc(out, func(a, b transition) int {
		return cmp.Or(cmp.Compare(a.rule, b.rule), compareInstances(a.in, b.in))
	})
	alerts := make([]api.Alert, len(out))
	for i, t := range out {
		alerts[i] = t.alert
	}
	return alerts
}

type transition struct {
	rule  int
	in    *instance
	alert api.Alert
}

func compareInstances(a, b *instance) int {
	return cmp.Or(
		cmp.Compare(a.gpuIndex, b.gpuIndex),
		strings.Compare(a.key.gpu, b.key.gpu),
		cmp.Compare(a.key.pid, b.key.pid),
		cmp.Compare(a.key.start, b.key.start),
		strings.Compare(a.key.rule, b.key.rule))
}

// step advances one instance by one observation and returns its transition,
// if any. Messages are written only for an instance that exists or starts:
// on most samples nothing holds and step allocates nothing.
func (e *Engine) step(rule *Rule, o *observation, now time.Time, devs map[string]*Device) (transition, bool) {
	inst := e.inst[o.key]
	if inst != nil {
		if inst.seen == e.gen {
			return transition{}, false // the same process listed twice: the first counts
		}
		inst.seen = e.gen
	}
	switch {
	case o.unknown && inst != nil && !inst.firing:
		delete(e.inst, o.key) // pending: the condition was not seen holding throughout
		return transition{}, false
	case o.unknown:
		return transition{}, false // a firing alert stays as it is
	case o.holds:
		if inst == nil {
			inst = &instance{key: o.key, since: now, seen: e.gen}
			e.inst[o.key] = inst
		}
		m := o.messages(rule, devs)
		inst.gpuIndex, inst.subject = m.gpuIndex, m.subject
		inst.cleared = time.Time{}
		held := now.Sub(inst.since)
		msg := m.firing
		if rule.For > 0 {
			msg += " for " + held.Round(time.Second).String()
		}
		if inst.firing {
			inst.alert.Message = msg
			return transition{}, false
		}
		if held < rule.For {
			return transition{}, false // pending
		}
		inst.firing = true
		inst.alert = api.Alert{
			Time:     now,
			Rule:     rule.Name,
			Severity: severity(rule),
			State:    StateFiring,
			GPU:      o.key.gpu,
			PID:      o.key.pid,
			Message:  msg,
		}
		if o.key.start != 0 {
			inst.alert.StartTime = time.Unix(0, o.key.start).UTC()
		}
		return transition{in: inst, alert: inst.alert}, true
	case inst == nil:
		return transition{}, false
	case !inst.firing:
		delete(e.inst, o.key) // pending, and no longer holds: start over
		return transition{}, false
	}
	if inst.cleared.IsZero() {
		inst.cleared = now
	}
	if now.Sub(inst.cleared) < rule.KeepFiringFor {
		return transition{}, false
	}
	m := o.messages(rule, devs)
	inst.gpuIndex, inst.subject = m.gpuIndex, m.subject
	delete(e.inst, o.key)
	a := inst.alert
	a.Time, a.State, a.Message = now, StateResolved, m.resolved
	return transition{in: inst, alert: a}, true
}

func severity(r *Rule) string {
	if r.Severity == "" {
		return SeverityWarning
	}
	return r.Severity
}

// Firing returns the alerts firing now, in Evaluate's order. Each has the
// time it started firing and a message with the latest sample's figures.
func (e *Engine) Firing() []api.Alert {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []transition
	for k, inst := range e.inst {
		if inst.firing {
			ts = append(ts, transition{rule: e.order[k.rule], in: inst, alert: inst.alert})
		}
	}
	slices.SortFunc(ts, func(a, b transition) int {
		return cmp.Or(cmp.Compare(a.rule, b.rule), compareInstances(a.in, b.in))
	})
	out := make([]api.Alert, len(ts))
	for i, t := range ts {
		out[i] = t.alert
	}
	return out
}

// observation is what one sample says about one rule's subject: a GPU or a
// process of the sample.
type observation struct {
	key     key
	dev     *Device
	proc    *sample.Process
	unknown bool // no figures this sample: a pending instance starts over, a firing one stays
	holds   bool // the condition holds
}

// observe appends to out the observations of rule on every subject of the
// sample it applies to.
func observe(out []observation, rule *Rule, in Input) []observation {
	switch rule.When {
	case WhenUsedAbove, WhenUnattributedAbove, WhenDeviceUnhealthy:
		for i := range in.Devices {
			d := &in.Devices[i]
			o := observation{key: key{rule: rule.Name, gpu: d.UUID}, dev: d}
			switch rule.When {
			case WhenUsedAbove:
				o.unknown = d.Total == 0
				o.holds = !o.unknown && 100*float64(d.Used)/float64(d.Total) >= rule.Percent
			case WhenUnattributedAbove:
				o.unknown = d.Total == 0
				o.holds = !o.unknown && d.Unattributed >= rule.MinBytes
			case WhenDeviceUnhealthy:
				o.holds = !d.Healthy
			}
			out = append(out, o)
		}
	case WhenLeak, WhenOrphanHolding, WhenFragmentationAbove, WhenAllocatorOOM:
		for i := range in.Processes {
			p := &in.Processes[i]
			o := observation{key: key{rule: rule.Name, gpu: p.GPU, pid: p.PID}, proc: p}
			if !p.StartTime.IsZero() {
				o.key.start = p.StartTime.UnixNano()
			}
			switch rule.When {
			case WhenLeak:
				o.holds = p.Leak && (rule.MinSlope == 0 || p.Slope >= rule.MinSlope)
			case WhenOrphanHolding:
				o.holds = p.Flags&orphanFlags != 0 && p.Bytes > 0 && p.Bytes >= rule.MinBytes
			case WhenFragmentationAbove, WhenAllocatorOOM:
				o.unknown, o.holds = allocatorHolds(rule, p)
			}
			out = append(out, o)
		}
	}
	return out
}

// aboutProcesses says whether the rule's subjects are the sample's
// processes (observe's second case); the others' are its GPUs.
func (r *Rule) aboutProcesses() bool {
	switch r.When {
	case WhenLeak, WhenOrphanHolding, WhenFragmentationAbove, WhenAllocatorOOM:
		return true
	}
	return false
}

// ReadsProcesses says whether a rule is about processes. Without one,
// Evaluate does not read Input.Processes, which the caller may then
// leave out (the daemon makes its records only for those who read them).
func (e *Engine) ReadsProcesses() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.rules, func(r Rule) bool { return r.aboutProcesses() })
}

// Flags that make a process's memory an orphan's for WhenOrphanHolding.
const orphanFlags = gpu.FlagOrphaned | gpu.FlagZombie | gpu.FlagNoSuchProcess

// messages is what an alert says about an observation.
type messages struct {
	gpuIndex int    // -1 when the process's GPU is not in the sample
	subject  string // "GPU 0 (NVIDIA H200)", "process 12 (python) on GPU 0"
	firing   string // while the condition holds (without " for ...")
	resolved string // once it no longer holds
}

func (o *observation) messages(rule *Rule, devs map[string]*Device) messages {
	if d := o.dev; d != nil {
		m := messages{gpuIndex: d.Index, subject: deviceName(d)}
		switch rule.When {
		case WhenUsedAbove:
			pct := 100 * float64(d.Used) / float64(d.Total)
			figures := fmt.Sprintf("%s: %s used (%s of %s)", m.subject, percent(pct), units.FormatBytes(d.Used), units.FormatBytes(d.Total))
			m.firing = figures
			m.resolved = figures + ", under " + percent(rule.Percent) + " again"
		case WhenUnattributedAbove:
			m.firing = fmt.Sprintf("%s: %s in use by no listed process (%s used in all)", m.subject, units.FormatBytes(d.Unattributed), units.FormatBytes(d.Used))
			m.resolved = fmt.Sprintf("%s: memory used by no listed process down to %s, under %s", m.subject, units.FormatBytes(d.Unattributed), units.FormatBytes(rule.MinBytes))
		case WhenDeviceUnhealthy:
			why := "no reason given"
			if d.Error != "" {
				why = gpu.Printable(d.Error)
			}
			m.firing = m.subject + " is unhealthy: " + why
			m.resolved = m.subject + " is healthy again"
		}
		return m
	}
	p := o.proc
	m := messages{gpuIndex: -1}
	on := "GPU " + gpu.Printable(p.GPU)
	if d := devs[p.GPU]; d != nil {
		m.gpuIndex, on = d.Index, fmt.Sprintf("GPU %d", d.Index)
	}
	m.subject = fmt.Sprintf("process %d (%s) on %s", p.PID, command(p.Display), on)
	held := units.FormatBytes(p.Bytes)
	switch rule.When {
	case WhenLeak:
		slope := rate(p.Slope)
		m.firing = fmt.Sprintf("%s is leaking: grows %s, holds %s", m.subject, slope, held)
		if p.Leak {
			m.resolved = fmt.Sprintf("%s grows %s, under %s (holds %s)", m.subject, slope, rate(rule.MinSlope), held)
		} else {
			m.resolved = fmt.Sprintf("%s is no longer leaking (holds %s)", m.subject, held)
		}
	case WhenFragmentationAbove, WhenAllocatorOOM:
		allocatorMessages(&m, rule, p)
	case WhenOrphanHolding:
		m.firing = fmt.Sprintf("%s %s and holds %s", m.subject, orphanState(p.Flags), held)
		switch {
		case p.Flags&orphanFlags == 0:
			m.resolved = fmt.Sprintf("%s is no longer orphaned (holds %s)", m.subject, held)
		case p.Bytes == 0:
			m.resolved = m.subject + " no longer holds GPU memory"
		default:
			m.resolved = fmt.Sprintf("%s holds %s, under %s", m.subject, held, units.FormatBytes(max(rule.MinBytes, 1)))
		}
	}
	return m
}

// orphanState says why a process's memory counts as an orphan's.
func orphanState(f gpu.Flags) string {
	var s []string
	if f&gpu.FlagNoSuchProcess != 0 {
		s = append(s, "is gone from /proc")
	}
	if f&gpu.FlagZombie != 0 {
		s = append(s, "is a zombie")
	}
	if f&gpu.FlagOrphaned != 0 {
		s = append(s, "is orphaned")
	}
	return strings.Join(s, ", ")
}

func deviceName(d *Device) string {
	if d.Name == "" {
		return fmt.Sprintf("GPU %d", d.Index)
	}
	return fmt.Sprintf("GPU %d (%s)", d.Index, gpu.Printable(d.Name))
}

// maxCommand bounds the command line in a message, in runes.
const maxCommand = 60

func command(s string) string {
	s = gpu.Printable(strings.TrimSpace(s))
	if s == "" {
		return "unknown command"
	}
	if utf8.RuneCountInString(s) <= maxCommand {
		return s
	}
	r := []rune(s)
	return string(r[:maxCommand-1]) + "…"
}

// percent writes a share with at most one decimal, truncated so that a
// figure shown never reads as above a threshold it is under: 92, 92.5.
func percent(p float64) string {
	t := float64(int64(p*10)) / 10
	return strings.TrimSuffix(fmt.Sprintf("%.1f", t), ".0") + "%"
}

// rate writes bytes per second in human units.
func rate(bps float64) string {
	if bps < 0 {
		return "-" + units.FormatBytes(uint64(-bps)) + "/s"
	}
	return units.FormatBytes(uint64(bps)) + "/s"
}
