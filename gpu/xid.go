package gpu

// Xid events: the driver's reports of GPU faults.
//
// An Xid is an error the NVIDIA kernel driver logs for a GPU (a page fault
// of a program, an ECC error, a GPU that fell off the bus, ...); the number
// says which. NVML delivers the critical ones to programs that register for
// them: nvmlEventSetCreate, nvmlDeviceRegisterEvents with
// nvmlEventTypeXidCriticalError on each device, then nvmlEventSetWait
// returns one event at a time, blocking up to a timeout. This file wraps
// that behind XidSource so that the node daemon can mark a device unhealthy
// without knowing NVML, and tests feed it events from go-nvml's mock.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// XidEvent is one Xid error the driver reported for a device.
type XidEvent struct {
	Time  time.Time // when it was received
	Index int       // NVML index; -1 when the device could not be identified
	UUID  string
	Xid   uint64
}

// XidSource delivers Xid events. It is used by one goroutine at a time.
type XidSource interface {
	// Wait returns the next event, waiting at most timeout; ok is false
	// when none came in time.
	Wait(timeout time.Duration) (ev XidEvent, ok bool, err error)
	// Close releases the source.
	Close() error
}

// XidWatcher is implemented by hosts that can deliver Xid events (NVML;
// the simulated host cannot).
type XidWatcher interface {
	// XidEvents registers for the Xid events of the devices with these
	// NVML indices. Devices that do not support the events are skipped
	// and named in skipped; the error wraps ErrNotSupported when none
	// does.
	XidEvents(indices []int) (src XidSource, skipped []string, err error)
}

var _ XidWatcher = (*NVML)(nil)

// XidEvents registers for the critical Xid events of the devices with
// these NVML indices (all of them when indices is nil).
func (h *NVML) XidEvents(indices []int) (XidSource, []string, error) {
	devs, err := h.Devices()
	if err != nil {
		return nil, nil, err
	}
	if indices == nil {
		for i := range devs {
			indices = append(indices, i)
		}
	}
	set, r := h.lib.EventSetCreate()
	if r != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("xid events: %w", nvmlErr("nvmlEventSetCreate", r))
	}
	src := &nvmlXid{set: set, now: time.Now}
	var skipped []string
	for _, i := range indices {
		if i < 0 || i >= len(devs) {
			set.Free()
			return nil, nil, &IndexError{Index: i, Count: len(devs)}
		}
		d := devs[i].(*nvmlDevice)
		id, err := d.Identity()
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		if r := d.dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); r != nvml.SUCCESS {
			skipped = append(skipped, fmt.Sprintf("GPU %d: %v", i, nvmlErr("nvmlDeviceRegisterEvents", r)))
			continue
		}
		src.devs = append(src.devs, xidDevice{handle: d.dev, id: id})
	}
	if len(src.devs) == 0 {
		set.Free()
		return nil, skipped, fmt.Errorf("xid events: no device accepts them (%v): %w", skipped, ErrNotSupported)
	}
	return src, skipped, nil
}

type xidDevice struct {
	handle nvml.Device
	id     Identity
}

// nvmlXid is an XidSource on an NVML event set.
type nvmlXid struct {
	set  nvml.EventSet
	devs []xidDevice
	now  func() time.Time
}

func (x *nvmlXid) Wait(timeout time.Duration) (XidEvent, bool, error) {
	ms := timeout.Milliseconds()
	switch {
	case ms < 0:
		ms = 0
	case ms > math.MaxUint32:
		ms = math.MaxUint32
	}
	data, r := x.set.Wait(uint32(ms))
	switch r {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return XidEvent{}, false, nil
	default:
		return XidEvent{}, false, nvmlErr("nvmlEventSetWait", r)
	}
	if data.EventType&nvml.EventTypeXidCriticalError == 0 {
		return XidEvent{}, false, nil // not registered for; ignore
	}
	ev := XidEvent{Time: x.now(), Index: -1, Xid: data.EventData}
	for _, d := range x.devs {
		if sameHandle(d.handle, data.Device) {
			ev.Index, ev.UUID = d.id.Index, d.id.UUID
			return ev, true, nil
		}
	}
	// A handle that does not compare equal: identify it by its UUID.
	if data.Device != nil {
		if uuid, r := data.Device.GetUUID(); r == nvml.SUCCESS {
			ev.UUID = uuid
			for _, d := range x.devs {
				if d.id.UUID == uuid {
					ev.Index = d.id.Index
				}
			}
		}
	}
	return ev, true, nil
}

// sameHandle compares two device handles without panicking on handle types
// that are not comparable.
func sameHandle(a, b nvml.Device) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

func (x *nvmlXid) Close() error {
	if x.set == nil {
		return errors.New("xid events: closed twice")
	}
	r := x.set.Free()
	x.set = nil
	return nvmlErr("nvmlEventSetFree", r)
}

// XidMeaning names the commonest critical Xids in a few words, for
// messages; "" for the others (the driver's documentation lists them all).
func XidMeaning(xid uint64) string {
	switch xid {
	case 13:
		return "graphics engine exception"
	case 31:
		return "GPU memory page fault"
	case 43:
		return "GPU stopped processing"
	case 45:
		return "preemptive cleanup after a previous error"
	case 48:
		return "double-bit ECC error"
	case 61, 62:
		return "internal micro-controller error"
	case 63, 64:
		return "ECC page retirement or row remapping event"
	case 74:
		return "NVLink error"
	case 79:
		return "GPU has fallen off the bus"
	case 92:
		return "high single-bit ECC error rate"
	case 94:
		return "contained ECC error"
	case 95:
		return "uncontained ECC error"
	case 119, 120:
		return "GSP error"
	}
	return ""
}
