package gpu

// Fault injection on the simulated host, for tests of code that must keep
// going when a GPU fails (the node daemon marks it unhealthy).

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// FailDevice makes the memory, utilization and process queries of the
// simulated device with this index fail until RestoreDevice, the way a
// real device fails when it falls off the bus. The queries' error wraps
// err; a nil err stands for NVML's ERROR_GPU_IS_LOST.
func (s *Sim) FailDevice(index int, err error) error {
	if index < 0 || index >= len(s.devs) {
		return &IndexError{Index: index, Count: len(s.devs)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faults == nil {
		s.faults = map[int]error{}
	}
	s.faults[index] = err
	return nil
}

// RestoreDevice undoes FailDevice: the device answers again.
func (s *Sim) RestoreDevice(index int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults, index)
}

// fault returns the injected failure of the device for the query fn, or nil.
func (d *simDevice) fault(fn string) error {
	d.sim.mu.Lock()
	err, failed := d.sim.faults[d.index]
	d.sim.mu.Unlock()
	switch {
	case !failed:
		return nil
	case err == nil:
		return fmt.Errorf("device %d: %w", d.index, nvmlErr(fn, nvml.ERROR_GPU_IS_LOST))
	}
	return fmt.Errorf("device %d: %s: %w", d.index, fn, err)
}
