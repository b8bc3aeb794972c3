package cmdutil

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/gpu/gputest"
	"github.com/vramhq/vram/proc"
)

func TestHostFlagsCheck(t *testing.T) {
	tests := []struct {
		name string
		h    HostFlags
		idle bool // --idle-window registered
		want string
	}{
		{"defaults", HostFlags{}, false, ""},
		{"simulated", HostFlags{Simulate: MaxSimulate}, false, ""},
		{"negative simulate", HostFlags{Simulate: -1}, false, "--simulate -1: must be between 1 and 64 GPUs (0: the real driver)"},
		{"too many", HostFlags{Simulate: MaxSimulate + 1}, false, "--simulate 65"},
		{"both selections", HostFlags{GPUs: []int{0}, AllGPUs: true}, false, "--gpu and --all-gpus: choose one"},
		{"zero idle window", HostFlags{}, true, "--idle-window 0s: must be positive"},
		{"negative idle window", HostFlags{IdleWindow: -time.Second}, false, "--idle-window -1s: must be positive"},
		{"idle window set by the command", HostFlags{IdleWindow: 5 * time.Second}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.h.idleWindow = tt.idle
			err := tt.h.Check()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || ExitCode(err) != ExitUsage {
				t.Errorf("error %v (exit %d), want a usage error with %q", err, ExitCode(err), tt.want)
			}
		})
	}
}

// fakeSignaller stands for the kernel; Open only says it was used.
type fakeSignaller struct{ opened *int }

func (f fakeSignaller) Open(int) (proc.Handle, error) { *f.opened++; return nil, errors.New("fake") }

func testFactory(vars map[string]string) *Factory {
	f := New()
	f.OpenNVML = func() (gpu.Host, error) { return gpu.NewNVML(gputest.MockServer()) }
	f.ProcRoot = "../../gpu/testdata/proc"
	f.LookupUser = func(uid uint32) (string, error) { return fmt.Sprint(uid), nil }
	f.Getenv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	f.Hostname = func() (string, error) { return "node-7", nil }
	f.Now = func() time.Time { return time.Unix(1780000000, 0) }
	return f
}

func TestHostFlagsOpen(t *testing.T) {
	opened := 0
	cmd := &cobra.Command{Use: "top"}
	(&cobra.Command{Use: "vram"}).AddCommand(cmd)
	tests := []struct {
		name   string
		h      HostFlags
		vars   map[string]string
		broken func(f *Factory)
		shown  []int
		signal string // "real", "none" (simulated) or "nil"
		err    string
		usage  bool
	}{
		{name: "real host", shown: []int{0, 1, 2, 3, 4, 5, 6, 7}, signal: "real"},
		{name: "--gpu", h: HostFlags{GPUs: []int{3, 1}}, shown: []int{3, 1}, signal: "real"},
		{name: "--gpu out of range", h: HostFlags{GPUs: []int{9}}, err: "--gpu 9: this host has 8 GPUs (0-7)", usage: true},
		{name: "simulated", h: HostFlags{Simulate: 2}, shown: []int{0, 1}, signal: "none"},
		{name: "simulated --gpu out of range", h: HostFlags{Simulate: 2, GPUs: []int{2}}, err: "--gpu 2: this host has 2 GPUs (0-1)", usage: true},
		{name: "no GPU selected", vars: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, err: "CUDA_VISIBLE_DEVICES= selects no GPU; --all-gpus shows every GPU"},
		{name: "no GPU selected, allowed", h: HostFlags{AllowNoGPU: true}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, shown: []int{}, signal: "real"},
		{name: "unreadable /proc", broken: func(f *Factory) { f.ProcRoot = "/nonexistent" }, shown: []int{0, 1, 2, 3, 4, 5, 6, 7}, signal: "nil"},
		{name: "no driver", broken: func(f *Factory) {
			f.OpenNVML = func() (gpu.Host, error) {
				return nil, fmt.Errorf("NVML library libnvidia-ml.so.1 not found (%w)", gpu.ErrNoDriver)
			}
		}, err: "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver); `vram top --simulate N` runs on a simulated host of N GPUs"},
		{name: "driver error", broken: func(f *Factory) {
			f.OpenNVML = func() (gpu.Host, error) { return nil, errors.New("nvmlInit: ERROR_UNKNOWN") }
		}, err: "nvmlInit: ERROR_UNKNOWN"},
		{name: "bad flags before opening", h: HostFlags{Simulate: -3}, err: "--simulate -3", usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFactory(tt.vars)
			f.Signaller = fakeSignaller{&opened}
			if tt.broken != nil {
				tt.broken(f)
			}
			tt.h.cmd = cmd
			h, err := tt.h.Open(f)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err && !strings.Contains(err.Error(), tt.err) || IsUsage(err) != tt.usage {
					t.Fatalf("error %v (usage %v), want %q (usage %v)", err, IsUsage(err), tt.err, tt.usage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if fmt.Sprint(h.Shown) != fmt.Sprint(tt.shown) {
				t.Errorf("shown %v, want %v", h.Shown, tt.shown)
			}
			if h.Simulated != (tt.h.Simulate > 0) || h.Simulated != h.Info().Simulated {
				t.Errorf("simulated %v", h.Simulated)
			}
			switch tt.signal {
			case "nil":
				if h.Signaller != nil || h.ProcErr == nil {
					t.Errorf("signaller %v with /proc error %v", h.Signaller, h.ProcErr)
				}
			case "none":
				before := opened
				hd, err := h.Signaller.Open(1234)
				if err != nil || hd.Signal(9) != nil || hd.Close() != nil || opened != before {
					t.Errorf("the simulated host's signaller reached the real one (%v)", err)
				}
			case "real":
				before := opened
				h.Signaller.Open(1234)
				if opened != before+1 {
					t.Error("the real host does not signal through the factory's signaller")
				}
			}
		})
	}
}
