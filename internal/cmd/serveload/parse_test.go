package main

import (
	"strings"
	"testing"
	"time"
)

func TestReadUsage(t *testing.T) {
	u, err := readUsage("testdata/proc", 4242)
	if err != nil {
		t.Fatal(err)
	}
	// utime 1234 + stime 567 ticks of 10 ms; the command name holds ") ".
	if want := 18010 * time.Millisecond; u.CPU != want {
		t.Errorf("CPU %v, want %v", u.CPU, want)
	}
	if u.RSS != 86852<<10 || u.HWM != 102000<<10 {
		t.Errorf("RSS %d, HWM %d", u.RSS, u.HWM)
	}
	if _, err := readUsage("testdata/proc", 4243); err == nil || !strings.Contains(err.Error(), "read CPU time") {
		t.Errorf("missing process: %v", err)
	}
	l, err := loadAvg("testdata/proc")
	if err != nil || l != 2.94 {
		t.Errorf("load average %v, %v", l, err)
	}
}

func TestParseStatCPU(t *testing.T) {
	tail := " 0 0 0 0 20 0 1 0 100 0 0"
	tests := []struct {
		name, in string
		want     time.Duration
		err      string
	}{
		{"plain", "1 (vram) S 0 1 1 0 -1 0 0 0 0 0 250 50" + tail, 3 * time.Second, ""},
		{"spaces and parentheses in the name", "1 (a) b) (c) S 0 1 1 0 -1 0 0 0 0 0 1 2" + tail, 30 * time.Millisecond, ""},
		{"no name", "1 vram S 0", 0, "no ')'"},
		{"short", "1 (vram) S 0 1 1", 0, "fields after the command name"},
		{"not a number", "1 (vram) S 0 1 1 0 -1 0 0 0 0 0 x 2" + tail, 0, "field 14"},
		{"negative", "1 (vram) S 0 1 1 0 -1 0 0 0 0 0 1 -2" + tail, 0, "field 15"},
		{"overflow", "1 (vram) S 0 1 1 0 -1 0 0 0 0 0 18446744073709551615 1" + tail, 0, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestParseStatusMemory(t *testing.T) {
	tests := []struct {
		name, in string
		rss, hwm uint64
		err      string
	}{
		{"both", "Name:\tx\nVmHWM:\t  10 kB\nVmRSS:\t   8 kB\n", 8 << 10, 10 << 10, ""},
		{"kernel thread", "Name:\tkthreadd\nState:\tS\n", 0, 0, "no VmRSS"},
		{"only RSS", "VmRSS:\t8 kB\n", 0, 0, "no VmRSS or VmHWM"},
		{"other unit", "VmHWM:\t10 MB\nVmRSS:\t8 kB\n", 0, 0, "VmHWM"},
		{"not a number", "VmHWM:\t10 kB\nVmRSS:\tlots kB\n", 0, 0, "VmRSS"},
		{"huge", "VmHWM:\t10 kB\nVmRSS:\t99999999999999999 kB\n", 0, 0, "VmRSS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rss, hwm, err := parseStatusMemory([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || rss != tt.rss || hwm != tt.hwm {
				t.Errorf("got %d, %d, %v; want %d, %d", rss, hwm, err, tt.rss, tt.hwm)
			}
		})
	}
}

func TestParseGCTrace(t *testing.T) {
	tests := []struct {
		name, in string
		ok       bool
		want     gcLine
		err      string
	}{
		{"go 1.26", "gc 12 @3.104s 2%: 0.010+1.2+0.003 ms clock, 0.020+0.5/1.0/0+0.006 ms cpu, 45->46->23 MB, 47 MB goal, 0 MB stacks, 0 MB globals, 2 P",
			true, gcLine{N: 12, At: 3.104, Start: 45, End: 46, Live: 23, Goal: 47}, ""},
		{"forced", "gc 3 @10.5s 0%: 0.1+2+0.01 ms clock, 0.2+0/1/0+0.02 ms cpu, 5->5->4 MB, 9 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)",
			true, gcLine{N: 3, At: 10.5, Start: 5, End: 5, Live: 4, Goal: 9}, ""},
		{"a log line", `time=2026-11-30T02:20:04Z level=INFO msg="vram serve started"`, false, gcLine{}, ""},
		{"starts with gc but is not a trace", "gc is a word", false, gcLine{}, ""},
		{"format changed", "gc 4 @1.0s 1%: 0.1+2+0.01 ms clock, 5 MiB heap", true, gcLine{}, "no heap sizes"},
		{"bad number", "gc x @1.0s 1%: ...", true, gcLine{}, "collection number"},
		{"bad heap", "gc 4 @1.0s 1%: a, 5->x->3 MB, 9 MB goal", true, gcLine{}, "heap sizes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, ok, err := parseGCTrace(tt.in)
			if ok != tt.ok {
				t.Fatalf("ok %v, want %v", ok, tt.ok)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || g != tt.want {
				t.Errorf("got %+v, %v; want %+v", g, err, tt.want)
			}
		})
	}
}

func TestHeapWatch(t *testing.T) {
	var out strings.Builder
	h := &heapWatch{out: &out}
	in := "time=x level=INFO msg=started\n" +
		"gc 1 @0.1s 1%: 0+0+0 ms clock, 0+0/0/0+0 ms cpu, 4->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"gc 2 @0.2s 1%: 0+0+0 ms clock, 0+0/0/0+0 ms cpu, 9->10->7 MB, 8 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"gc 3 @0.3s 1%: 0+0+0 ms clock, 0+0/0/0+0 ms cpu, 12->12->5 MB, 14 MB goal, 0 MB stacks, 0 MB globals, 2 P\n"
	// Written in pieces that split lines, as a pipe delivers them.
	for i := 0; i < len(in); i += 7 {
		h.Write([]byte(in[i:min(i+7, len(in))]))
	}
	if out.String() != in {
		t.Error("the log was not copied whole")
	}
	s := h.stats()
	if s.GCs != 3 || s.LastLive != 5 || s.PeakLive != 7 || s.PeakEnd != 12 || len(s.Errors) != 0 {
		t.Errorf("%+v", s)
	}
}

func TestScalars(t *testing.T) {
	body := `# HELP vram_daemon_samples_total Samples taken by the daemon.
# TYPE vram_daemon_samples_total counter
vram_daemon_samples_total 151
# HELP vram_scrape_duration_seconds How long the latest GPU sample took.
# TYPE vram_scrape_duration_seconds gauge
vram_scrape_duration_seconds 0.004444415
# HELP vram_gpu_healthy 1 when the GPU answers.
# TYPE vram_gpu_healthy gauge
vram_gpu_healthy{gpu="0"} 1
`
	m, err := scalars([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if m["vram_daemon_samples_total"] != 151 || m["vram_scrape_duration_seconds"] != 0.004444415 {
		t.Errorf("%v", m)
	}
	if _, ok := m["vram_gpu_healthy"]; ok {
		t.Error("a labelled series was kept")
	}
	if _, err := scalars([]byte("vram_x{ 1\n")); err == nil {
		t.Error("broken exposition accepted")
	}
}

func TestQuantile(t *testing.T) {
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := quantile(xs, tt.q); got != tt.want {
			t.Errorf("q%v = %v, want %v", tt.q, got, tt.want)
		}
	}
	if xs[0] != 100*time.Millisecond {
		t.Error("quantile sorted its argument")
	}
	if quantile(nil, 0.5) != 0 || quantileF(nil, 0.5) != 0 || quantileF([]float64{3, 1, 2}, 0.5) != 2 {
		t.Error("empty or float quantile")
	}
}

func TestMaxGap(t *testing.T) {
	g, n := maxGap([]int64{0, 1000, 2000, 5500, 6500}, 2*time.Second)
	if g != 3500*time.Millisecond || n != 1 {
		t.Errorf("gap %v, %d long", g, n)
	}
	if g, n := maxGap(nil, time.Second); g != 0 || n != 0 {
		t.Error("no ticks, a gap")
	}
}

func FuzzParseGCTrace(f *testing.F) {
	f.Add("gc 12 @3.104s 2%: 0.010+1.2+0.003 ms clock, 0.020+0.5/1.0/0+0.006 ms cpu, 45->46->23 MB, 47 MB goal, 0 MB stacks, 0 MB globals, 2 P")
	f.Add("gc 1 @0s 0%: 1->2->3 MB, 4 MB goal")
	f.Add("gc -1 @-1s x")
	f.Fuzz(func(t *testing.T, line string) {
		g, ok, err := parseGCTrace(line)
		if err == nil && ok && (g.Live < 0 || g.Start < 0 || g.Goal < 0) {
			t.Errorf("negative heap accepted: %+v", g)
		}
		if !ok && err != nil {
			t.Errorf("not a trace line, yet an error: %v", err)
		}
	})
}

func FuzzParseProc(f *testing.F) {
	f.Add([]byte("1 (vram) S 0 1 1 0 -1 0 0 0 0 0 250 50 0 0"), []byte("VmHWM:\t10 kB\nVmRSS:\t8 kB\n"))
	f.Add([]byte("1 ((((( S"), []byte("VmRSS:"))
	f.Fuzz(func(t *testing.T, stat, status []byte) {
		if cpu, err := parseStatCPU(stat); err == nil && cpu < 0 {
			t.Errorf("negative CPU time %v", cpu)
		}
		if rss, hwm, err := parseStatusMemory(status); err == nil && (rss > 1<<63 || hwm > 1<<63) {
			t.Errorf("RSS %d, HWM %d", rss, hwm)
		}
	})
}
