package job

import (
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
)

// result builds a finished one-device job whose last sample had the job at
// jobBytes and other processes at others.
func result(exit int, jobBytes uint64, others map[int]uint64, leak detect.Kind) *Result {
	r := &Result{
		ExitCode: exit, Memory: true,
		Devices:  []Device{{Index: 3, Total: 80 * gib}},
		Samples:  []Sample{{T: time.Second, Job: jobBytes, JobDev: []uint64{jobBytes}, Used: []uint64{jobBytes}}},
		Peak:     Peak{Bytes: jobBytes, Device: 0},
		Leak:     detect.Verdict{Kind: leak, Slope: 10 * mib, Reason: "floor rising"},
		treePIDs: map[int]bool{100: true},
	}
	for pid, b := range others {
		r.Others = append(r.Others, Proc{PID: pid, Command: "python serve.py", Devices: []int{0}, AtEnd: b, Peak: b})
	}
	return r
}

// noFigures is a failed job run without memory figures.
func noFigures() *Result {
	return &Result{ExitCode: 1, MemoryNote: "NVML library libnvidia-ml.so.1 not found", Peak: Peak{Device: -1}, treePIDs: map[int]bool{}}
}

func TestDiagnose(t *testing.T) {
	frag := Message{Framework: "pytorch", Tried: 2 * gib, Capacity: 80 * gib, Allocated: 60 * gib, Unallocated: 16 * gib, GPU: 0}
	demand := Message{Framework: "pytorch", Tried: 2 * gib, Capacity: 80 * gib, Allocated: 77 * gib, Unallocated: 100 * mib, GPU: 0}
	bare := Message{Framework: "cuda", GPU: -1}
	tests := []struct {
		name  string
		r     *Result
		msgs  []Message
		cause string
		text  string
	}{
		{"no message", result(1, gib, nil, detect.NoLeak), nil, "", ""},
		{"succeeded", result(0, gib, nil, detect.NoLeak), []Message{demand}, "", "caught"},
		{"fragmentation", result(1, 70*gib, nil, detect.NoLeak), []Message{frag}, CauseFragmentation, "expandable_segments:True"},
		{"demand", result(1, 78*gib, nil, detect.NoLeak), []Message{demand}, CauseDemand, "smaller batch"},
		{"bare message", result(1, 78*gib, nil, detect.NoLeak), []Message{bare}, CauseDemand, "reached 78.00 GiB"},
		{"leak", result(1, 78*gib, nil, detect.Leak), []Message{demand}, CauseLeak, "retain_graph"},
		{"other process", result(1, 40*gib, map[int]uint64{4242: 38 * gib}, detect.NoLeak), []Message{demand}, CauseOtherProcess, "pid 4242 (python serve.py) with 38.00 GiB"},
		{"small other process", result(1, 70*gib, map[int]uint64{4242: gib}, detect.NoLeak), []Message{demand}, CauseDemand, ""},
		{"bare message, no memory figures", noFigures(), []Message{bare}, CauseUnknown, "vram had no memory figures"},
		{"bare message, nothing held in the samples", result(1, 0, nil, detect.Insufficient), []Message{bare}, CauseUnknown, "held no GPU memory in vram's samples"},
		{"request size, no memory figures", noFigures(), []Message{{Framework: "jax", Tried: 16 * gib, GPU: -1}}, CauseDemand, "cannot tell whether other processes"},
		{"first message with figures", result(1, 70*gib, nil, detect.NoLeak), []Message{bare, frag}, CauseFragmentation, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := diagnose(tt.r, tt.msgs)
			if o.Cause != tt.cause {
				t.Errorf("cause %q, want %q (%s)", o.Cause, tt.cause, o.Explanation)
			}
			if got := o.Explanation + " " + o.Advice; !strings.Contains(got, tt.text) {
				t.Errorf("%q does not say %q", got, tt.text)
			}
			if o.Detected != (tt.cause != "") {
				t.Errorf("detected %v", o.Detected)
			}
			if o.Cause == CauseUnknown && strings.Contains(o.Advice, "smaller batch") {
				t.Errorf("advice without evidence: %q", o.Advice)
			}
		})
	}
}

func TestDiagnoseWithoutSamples(t *testing.T) {
	// No memory figures: the processes PyTorch lists that are not the
	// job's own name the holder.
	r := &Result{ExitCode: 1, Peak: Peak{Device: -1}, treePIDs: map[int]bool{100: true}}
	m := Message{Framework: "pytorch", Tried: gib, Capacity: 80 * gib, GPU: 0,
		Holders: []Holder{{PID: 100, Bytes: 30 * gib}, {PID: 777, Bytes: 45 * gib}}}
	o := diagnose(r, []Message{m})
	if o.Cause != CauseOtherProcess || o.Holder.PID != 777 {
		t.Errorf("cause %q holder %+v", o.Cause, o.Holder)
	}
}

func TestSteadyState(t *testing.T) {
	var ss []Sample
	for i := range 200 {
		// A sawtooth between 1 GiB and 1.5 GiB after a 1 s warm-up.
		v := uint64(gib + (i%10)*50*mib)
		if i < 20 {
			v = uint64(i) * 50 * mib
		}
		ss = append(ss, Sample{T: time.Duration(i) * 50 * time.Millisecond, Job: v})
	}
	got, ok := steadyState(ss, time.Second, 5*time.Second)
	if !ok || got != gib {
		t.Errorf("steady %d MiB %v, want 1024", got/mib, ok)
	}
	if _, ok := steadyState(ss[:4], 0, time.Second); ok {
		t.Error("steady state from 4 samples")
	}
}

func TestSparkline(t *testing.T) {
	if got := Sparkline([]uint64{0, 1, 2, 3, 4, 5, 6, 7}, 8); got != "▁▂▃▄▅▆▇█" {
		t.Errorf("ramp %q", got)
	}
	// A one-sample spike survives the bucketing.
	v := make([]uint64, 1000)
	v[501] = 9
	if got := Sparkline(v, 10); got != "▁▁▁▁▁█▁▁▁▁" {
		t.Errorf("spike %q", got)
	}
	if Sparkline(nil, 10) != "" {
		t.Error("empty input")
	}
}

// A command line with a newline and an escape sequence must not reach the
// terminal raw through the text report.
func TestReportCommandIsPrintable(t *testing.T) {
	cmd := "python3 -c 'import torch\nprint(1)' \x1b[2J"
	r := Result{Memory: true, Args: []string{"sh", "-c", "x\ny"}}
	r.Peak = Peak{Bytes: gib, Device: 0, PID: 7, Command: cmd, PIDDev: gib}
	r.Devices = []Device{{Index: 0, Name: "GPU", Total: 8 * gib}}
	r.Procs = []Proc{{PID: 7, Command: cmd, Peak: gib}, {PID: 8, Command: cmd, Peak: mib}}
	var b strings.Builder
	r.WriteText(&b)
	if out := b.String(); strings.ContainsAny(out, "\x1b") || strings.Contains(out, "torch\nprint") || strings.Contains(out, "x\ny") {
		t.Errorf("report carries raw control characters:\n%q", out)
	}
}
