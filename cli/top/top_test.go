package top

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
)

func TestValidate(t *testing.T) {
	ok := Options{Interval: time.Second, Window: 5 * time.Minute, HostFlags: cmdutil.HostFlags{IdleWindow: 30 * time.Second}, Width: 120, Height: 40}
	tests := []struct {
		name    string
		mod     func(o *Options)
		samples int
		err     string
	}{
		{name: "defaults", mod: func(*Options) {}, samples: 300},
		{name: "fast", mod: func(o *Options) { o.Interval = 10 * time.Millisecond }, samples: maxWindowSamples},
		{name: "short window", mod: func(o *Options) { o.Window = 3 * time.Second }, samples: minWindowSamples},
		{name: "interval too short", mod: func(o *Options) { o.Interval = time.Millisecond }, err: "--interval 1ms out of range"},
		{name: "interval too long", mod: func(o *Options) { o.Interval = 2 * time.Hour; o.Window = 3 * time.Hour }, err: "--interval 2h0m0s out of range"},
		{name: "window below interval", mod: func(o *Options) { o.Window = time.Millisecond * 500 }, err: "--window 500ms is shorter"},
		{name: "negative simulate", mod: func(o *Options) { o.Simulate = -1 }, err: "--simulate -1"},
		{name: "too many simulated", mod: func(o *Options) { o.Simulate = 65 }, err: "--simulate 65"},
		{name: "idle window", mod: func(o *Options) { o.IdleWindow = -time.Second }, err: "--idle-window -1s"},
		{name: "GPUs twice", mod: func(o *Options) { o.GPUs, o.AllGPUs = []int{0}, true }, err: "--gpu and --all-gpus: choose one"},
		{name: "negative frame", mod: func(o *Options) { o.Frame = -2 }, err: "--frame -2"},
		{name: "frame 0 given", mod: func(o *Options) { o.frameGiven = true }, err: "--frame 0: must be the number of samples before the frame (1 or more); without --frame, vram top runs interactively"},
		{name: "tiny frame", mod: func(o *Options) { o.Frame = 1; o.Width = 20 }, err: "a frame needs at least 60x12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := ok
			tt.mod(&o)
			n, err := o.validate()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !cmdutil.IsUsage(err) {
					t.Errorf("error %v, want a usage error containing %q", err, tt.err)
				}
				return
			}
			if err != nil || n != tt.samples {
				t.Errorf("got %d samples, %v; want %d", n, err, tt.samples)
			}
		})
	}
}

// testFactory has no real host, no /proc and a fixed clock.
func testFactory(vars map[string]string) *cmdutil.Factory {
	f := cmdutil.New()
	f.OpenNVML = func() (gpu.Host, error) { return nil, errors.New("no real host in tests") }
	f.ProcRoot = "/nonexistent"
	f.Getenv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	f.Hostname = func() (string, error) { return "testhost", nil }
	f.Now = func() time.Time { return t0 }
	return f
}

func TestOpenNoDriver(t *testing.T) {
	f := testFactory(nil)
	f.OpenNVML = func() (gpu.Host, error) {
		return nil, fmt.Errorf("NVML library libnvidia-ml.so.1 not found: no NVIDIA driver on this host (%w)", gpu.ErrNoDriver)
	}
	o := &Options{HostFlags: cmdutil.HostFlags{IdleWindow: time.Second}}
	_, err := open(o, f)
	if err == nil || !gpu.IsNoDriver(err) || !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") || !strings.Contains(err.Error(), "--simulate N") {
		t.Errorf("no-driver error: %v", err)
	}
	f.OpenNVML = func() (gpu.Host, error) { return nil, errors.New("nvmlInit: ERROR_UNKNOWN") }
	if _, err := open(o, f); err == nil || !strings.Contains(err.Error(), "ERROR_UNKNOWN") {
		t.Errorf("other open error: %v", err)
	}
}

func TestOpenSelectsGPUs(t *testing.T) {
	tests := []struct {
		name string
		o    cmdutil.HostFlags
		vars map[string]string
		want []int
		note string
		err  string
	}{
		{name: "all by default", o: cmdutil.HostFlags{Simulate: 4}, want: []int{0, 1, 2, 3}},
		{name: "CUDA_VISIBLE_DEVICES", o: cmdutil.HostFlags{Simulate: 4}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3,1"}, want: []int{1, 3}, note: "showing GPUs 3,1 of 4 (CUDA_VISIBLE_DEVICES=3,1); --all-gpus shows all"},
		{name: "--all-gpus ignores it", o: cmdutil.HostFlags{Simulate: 4, AllGPUs: true}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3,1"}, want: []int{0, 1, 2, 3}},
		{name: "--gpu wins", o: cmdutil.HostFlags{Simulate: 4, GPUs: []int{2}}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3,1"}, want: []int{2}, note: "(--gpu)"},
		{name: "--gpu out of range", o: cmdutil.HostFlags{Simulate: 2, GPUs: []int{5}}, err: "--gpu 5: this host has 2 GPUs (0-1)"},
		{name: "none visible", o: cmdutil.HostFlags{Simulate: 2}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, err: "CUDA_VISIBLE_DEVICES= selects no GPU"},
		{name: "bad entry warns", o: cmdutil.HostFlags{Simulate: 2}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "1,7"}, want: []int{1}, note: "no device with index 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.IdleWindow = 30 * time.Second
			src, err := open(&Options{HostFlags: tt.o}, testFactory(tt.vars))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			var got []int
			for _, id := range src.Sampler.Devices() {
				got = append(got, id.Index)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("GPUs %v, want %v", got, tt.want)
			}
			if !strings.Contains(src.note, tt.note) {
				t.Errorf("note %q, want it to contain %q", src.note, tt.note)
			}
			if src.Hostname != "simulated" || src.Signaller == nil || src.Procs == nil {
				t.Errorf("simulated source incomplete: %+v", src)
			}
		})
	}
}

func TestRenderFrame(t *testing.T) {
	o := &Options{HostFlags: cmdutil.HostFlags{Simulate: 2, Seed: 1, IdleWindow: 30 * time.Second}}
	now := t0
	f := testFactory(nil)
	f.Now = func() time.Time { return now }
	src, err := open(o, f)
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Interval: time.Second, Window: 30, Hostname: src.Hostname, Note: src.note}, src.Sampler.Sample)
	frame, err := renderFrame(context.Background(), m, 20, 100, 30, func(d time.Duration) { now = now.Add(d) })
	if err != nil {
		t.Fatal(err)
	}
	checkFrame(t, frame, 100, 30)
	if !strings.Contains(frame, "SIMULATED seed 1") || !strings.Contains(frame, "12:00:19") || !strings.Contains(frame, "window 30s") {
		t.Errorf("frame after 20 samples:\n%s", frame)
	}
	failing := New(Config{Interval: time.Second}, func() (*gpu.Snapshot, error) { return nil, errors.New("GPU is lost") })
	if _, err := renderFrame(context.Background(), failing, 3, 100, 30, func(time.Duration) {}); err == nil || !strings.Contains(err.Error(), "GPU is lost") {
		t.Errorf("a frame with no sample: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := renderFrame(ctx, m, 3, 100, 30, func(time.Duration) {}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestCommandFrame(t *testing.T) {
	cmd := NewCmd(cmdutil.New())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--simulate", "1", "--frame", "3", "--interval", "10ms", "--width", "90", "--height", "20", "--read-only"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "\x1b[") {
		t.Error("a frame written to a file carries colour escapes")
	}
	if !strings.Contains(s, "SIMULATED") || !strings.Contains(s, "read-only") {
		t.Errorf("frame:\n%s", s)
	}
	checkFrame(t, strings.TrimSuffix(s, "\n"), 90, 20)
}

// When --window does not fit the history's range of lengths at the
// interval, the footer says what the window is and what was asked.
func TestFooterSaysWhenTheWindowChanged(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--interval", "50ms"}, "window 3m24.8s (5m0s asked; at most 4096 samples)"},
		{[]string{"--interval", "1s", "--window", "5s"}, "window 16s (5s asked; at least 16 samples)"},
		{[]string{"--interval", "50ms", "--width", "80"}, "window 3m24.8s (5m0s asked) "},
		{[]string{"--interval", "1s", "--window", "2m"}, "window 2m0s  "},
	} {
		cmd := NewCmd(cmdutil.New())
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(append([]string{"--simulate", "1", "--frame", "1", "--height", "20"}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if footer := lines[len(lines)-1]; !strings.Contains(footer, tc.want) {
			t.Errorf("%v: footer %q, want it to contain %q", tc.args, footer, tc.want)
		}
	}
}

// Without a terminal the interactive screen says what it needs and what
// works instead, rather than failing inside the terminal library.
func TestNeedsATerminal(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, tc := range []struct {
		name string
		in   io.Reader
		out  io.Writer
		not  string
	}{
		{"a pipe and a buffer", strings.NewReader(""), &bytes.Buffer{}, "stdin and stdout are not terminals;"},
		{"/dev/null", devNull, devNull, "stdin and stdout are not terminals;"},
		{"output to /dev/null", strings.NewReader(""), devNull, "stdin and stdout are not terminals;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			o := &Options{HostFlags: cmdutil.HostFlags{Simulate: 1, IdleWindow: 30 * time.Second}, Interval: time.Second, Window: time.Minute}
			err := run(ctx, cmdutil.New(), o, tc.in, tc.out)
			if err == nil || !strings.Contains(err.Error(), "top is interactive and needs a terminal, but "+tc.not) ||
				!strings.Contains(err.Error(), "`vram watch`") || !strings.Contains(err.Error(), "--frame N") {
				t.Errorf("error %v", err)
			}
			if err != nil && (strings.Contains(err.Error(), "cancelable") || strings.Contains(err.Error(), "\n")) {
				t.Errorf("error %q shows the terminal library's internals or spans lines", err)
			}
		})
	}
	if err := needTerminal(cmdutil.IsTerminal, strings.NewReader(""), os.Stdout); cmdutil.IsTerminal(os.Stdout) && (err == nil || !strings.Contains(err.Error(), "but stdin is not a terminal;")) {
		t.Errorf("only stdin is not a terminal: %v", err)
	}
}
