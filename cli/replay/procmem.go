package replay

import (
	"fmt"
	"os"

	"github.com/vramhq/vram/gpu"
)

// processMemory returns a reader of the device memory this process holds
// on the GPU that CUDA calls device 0 (the first GPU the visible-devices
// variables leave), from NVML's per-process list, and a function that
// closes NVML; an error when NVML cannot give it, and the replay then
// compares the device's free memory instead (replay.Options.ProcessMemory).
func processMemory() (read func() (uint64, error), closeFn func(), err error) {
	o, err := gpu.Open(gpu.OpenOptions{ChannelDir: "off"})
	if err != nil {
		return nil, nil, err
	}
	closeFn = func() { o.Host.Close() }
	if len(o.Shown) == 0 {
		closeFn()
		return nil, nil, fmt.Errorf("the visible-devices variables leave no GPU")
	}
	devs, err := o.Host.Devices()
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	if o.Shown[0] >= len(devs) {
		closeFn()
		return nil, nil, fmt.Errorf("NVML lists %d GPUs, not GPU %d", len(devs), o.Shown[0])
	}
	return ownMemory(devs[o.Shown[0]], uint32(os.Getpid())), closeFn, nil
}

// ownMemory reads pid's device memory on d: 0 when the driver does not
// list the process (it holds no context there yet).
func ownMemory(d gpu.Device, pid uint32) func() (uint64, error) {
	return func() (uint64, error) {
		ps, err := d.Processes()
		if err != nil {
			return 0, err
		}
		for _, p := range ps {
			if p.PID != pid {
				continue
			}
			if !p.MemoryKnown {
				return 0, fmt.Errorf("the driver does not report this process's memory (MIG, or WDDM)")
			}
			return p.Memory, nil
		}
		return 0, nil
	}
}
