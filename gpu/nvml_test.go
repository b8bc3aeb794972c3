package gpu

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/vramhq/vram/gpu/gputest"
)

const gib = 1 << 30

func mockServer(t testing.TB) *dgxa100.Server {
	t.Helper()
	return gputest.MockServer()
}

func TestNVMLHost(t *testing.T) {
	h, err := NewNVML(mockServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	info := h.Info()
	if info.Driver != "550.54.15" || info.CUDA != "12.4" || info.Simulated {
		t.Errorf("info = %+v", info)
	}
	devs, err := h.Devices()
	if err != nil || len(devs) != 8 {
		t.Fatalf("devices: %d, %v", len(devs), err)
	}
	id, err := devs[0].Identity()
	if err != nil || id.Index != 0 || id.Name != "Mock NVIDIA A100-SXM4-40GB" || len(id.UUID) < 10 {
		t.Errorf("identity = %+v, %v", id, err)
	}
	m, err := devs[0].Memory()
	if err != nil || !m.ReservedKnown || m.Used != 30*gib || m.Total != m.Used+m.Free+m.Reserved {
		t.Errorf("memory = %+v, %v", m, err)
	}
	ps, err := devs[0].Processes()
	if err != nil || len(ps) != 6 {
		t.Fatalf("processes = %+v, %v", ps, err)
	}
	if ps[0].PID != 1000 || ps[0].Kind != KindCompute|KindGraphics || ps[0].Memory != 12*gib {
		t.Errorf("merged process = %+v, want pid 1000 compute+graphics 12 GiB (not summed)", ps[0])
	}
	acc, err := devs[0].Accounting()
	if err != nil || len(acc) != 2 || acc[1].MaxMemory != 70*gib || acc[1].Running || acc[1].Duration != 5*time.Second {
		t.Errorf("accounting = %+v, %v", acc, err)
	}
}

func TestNVMLErrors(t *testing.T) {
	tests := []struct {
		name     string
		ret      nvml.Return
		noDriver bool
		want     string
	}{
		{"library missing", nvml.ERROR_LIBRARY_NOT_FOUND, true, "NVML library libnvidia-ml.so.1 not found: no NVIDIA driver on this host (nvmlInit: ERROR_LIBRARY_NOT_FOUND)"},
		{"driver not loaded", nvml.ERROR_DRIVER_NOT_LOADED, true, "NVIDIA kernel driver not loaded (libnvidia-ml.so.1 is installed, the nvidia module is not): nvmlInit: ERROR_DRIVER_NOT_LOADED"},
		{"no permission", nvml.ERROR_NO_PERMISSION, false, "no permission to open the NVIDIA devices (/dev/nvidia*): nvmlInit: ERROR_NO_PERMISSION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dgxa100.New()
			s.InitFunc = func() nvml.Return { return tt.ret }
			_, err := NewNVML(s)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if IsNoDriver(err) != tt.noDriver {
				t.Errorf("IsNoDriver = %v, want %v", !tt.noDriver, tt.noDriver)
			}
			if !errors.Is(err, tt.ret) {
				t.Errorf("error does not unwrap to %v", tt.ret)
			}
		})
	}
}

func TestMemoryFallsBackToV1(t *testing.T) {
	s := mockServer(t)
	dev := s.Devices[0].(*dgxa100.Device)
	dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	dev.MemoryInfo.Used, dev.MemoryInfo.Free = 10*gib, dev.MemoryInfo.Total-10*gib
	h, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := h.Devices()
	for i := 0; i < 2; i++ {
		m, err := devs[0].Memory()
		if err != nil || m.ReservedKnown || m.Used != 10*gib {
			t.Fatalf("memory = %+v, %v", m, err)
		}
	}
	if n := len(dev.GetMemoryInfo_v2Calls()); n != 1 {
		t.Errorf("v2 called %d times, want once (then remembered as unsupported)", n)
	}
}

func TestProcessMemoryNotAvailable(t *testing.T) {
	got := mergeProcesses([]nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: notAvailable}, {Pid: 2, UsedGpuMemory: 5}}, []nvml.ProcessInfo{{Pid: 2, UsedGpuMemory: 7}, {Pid: 3, UsedGpuMemory: 1}})
	want := []DriverProcess{
		{PID: 1, Kind: KindCompute},
		{PID: 2, Memory: 7, MemoryKnown: true, Kind: KindCompute | KindGraphics},
		{PID: 3, Memory: 1, MemoryKnown: true, Kind: KindGraphics},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}
