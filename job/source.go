package job

import (
	"errors"
	"fmt"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
)

// Source reads GPU memory for the supervisor: each device's used memory and
// the memory of every process the driver lists. NewGPUSource reads it
// through package gpu (NVML); tests use a fake keyed by PID (jobtest).
type Source interface {
	// Devices lists the devices, in the order Read reports them.
	Devices() []Device
	// Read fills r with one reading. A device whose query fails is
	// reported in err (joined) and its figures are left unchanged.
	Read(r *Reading) error
}

// Device is one GPU as the supervisor knows it.
type Device struct {
	Index int    `json:"gpu_index"` // NVML index
	UUID  string `json:"gpu_uuid"`
	Name  string `json:"name"`
	Total uint64 `json:"total_bytes"`
	// Reserved is what the driver keeps for itself (never available to
	// programs); 0 when unknown.
	Reserved uint64 `json:"reserved_bytes"`
}

// Usable is the memory programs can allocate on the device.
func (d Device) Usable() uint64 { return d.Total - min(d.Reserved, d.Total) }

// Reading is one sample of the devices and their processes.
type Reading struct {
	Used  []uint64     // per device (position in Devices), bytes
	Procs []ProcMemory // every process the driver lists, on every device
}

// ProcMemory is one process's memory on one device.
type ProcMemory struct {
	PID    int
	Device int // position in Devices
	Bytes  uint64
	// Alloc is what vram's allocator inside the process publishes for
	// this device (its statistics channel), nil when it does not run it.
	// It is valid until the next Read.
	Alloc *statchan.Figures
}

// gpuSource is a Source over a gpu.Host.
type gpuSource struct {
	devs []gpu.Device
	info []Device
	ch   gpu.ChannelReader
	sim  bool
	recs []statchan.Record
}

// NewGPUSource reads memory from h (NVML, or gpu's simulated host). The
// devices' identities and totals are read once.
func NewGPUSource(h gpu.Host) (Source, error) { return NewGPUSourceChannel(h, nil) }

// NewGPUSourceChannel is NewGPUSource that also reads the statistics
// channel of vram's allocator (ProcMemory.Alloc) through ch; nil reads
// none.
func NewGPUSourceChannel(h gpu.Host, ch gpu.ChannelReader) (Source, error) {
	devs, err := h.Devices()
	if err != nil {
		return nil, fmt.Errorf("list GPUs: %w", err)
	}
	s := &gpuSource{devs: devs, ch: ch, sim: h.Info().Simulated}
	for _, d := range devs {
		id, err := d.Identity()
		if err != nil {
			return nil, fmt.Errorf("identify GPU: %w", err)
		}
		m, err := d.Memory()
		if err != nil {
			return nil, fmt.Errorf("GPU %d memory: %w", id.Index, err)
		}
		s.info = append(s.info, Device{Index: id.Index, UUID: id.UUID, Name: id.Name, Total: m.Total, Reserved: m.Reserved})
	}
	if len(s.info) == 0 {
		return nil, errors.New("the driver lists no GPU")
	}
	return s, nil
}

func (s *gpuSource) Devices() []Device { return s.info }

func (s *gpuSource) Read(r *Reading) error {
	if len(r.Used) != len(s.devs) {
		r.Used = make([]uint64, len(s.devs))
	}
	r.Procs = r.Procs[:0]
	var errs []error
	var allocs gpu.AllocIndex
	if s.ch != nil {
		var err error
		if s.recs, err = s.ch.Read(s.recs); err != nil {
			errs = append(errs, err)
		}
		allocs = gpu.NewAllocIndex(s.recs, s.sim)
	}
	for i, d := range s.devs {
		m, err := d.Memory()
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: %w", s.info[i].Index, err))
			continue
		}
		r.Used[i] = m.Used
		ps, err := d.Processes()
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %d processes: %w", s.info[i].Index, err))
			continue
		}
		for _, p := range ps {
			if p.MemoryKnown {
				pm := ProcMemory{PID: int(p.PID), Device: i, Bytes: p.Memory}
				if rec := allocs.Lookup(p.PID, s.info[i].Index, s.info[i].UUID); rec != nil {
					pm.Alloc = &rec.Figures
				}
				r.Procs = append(r.Procs, pm)
			}
		}
	}
	return errors.Join(errs...)
}
