package sim

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
)

// Fault describes calls that must fail. A call matches when its kind is
// Kind, its size is at least MinSize and When (if set) returns true. Faults
// are deterministic: they depend only on the sequence of calls.
type Fault struct {
	Kind Kind
	// Nth makes the fault fire on the Nth matching call after Inject (1 is
	// the next one) and then retire. Zero fires on every matching call.
	Nth uint64
	// MinSize restricts the fault to calls of at least this many bytes.
	MinSize uint64
	// When, if set, must also return true for the call to match. It runs
	// with the device locked and must not call the device.
	When func(Call) bool
}

// FaultError is the error of an injected fault. Faults on Malloc and
// MemCreate are out-of-memory faults and unwrap to
// alloc.ErrDeviceOutOfMemory; the others unwrap to ErrInjected.
type FaultError struct {
	Call Call
}

func (e *FaultError) Error() string {
	if e.oom() {
		return fmt.Sprintf("sim: injected fault: %s #%d of %d bytes: %v",
			e.Call.Kind, e.Call.N, e.Call.Size, alloc.ErrDeviceOutOfMemory)
	}
	return fmt.Sprintf("sim: injected fault: %s #%d (size %d, address %#x)",
		e.Call.Kind, e.Call.N, e.Call.Size, e.Call.Addr)
}

func (e *FaultError) oom() bool { return e.Call.Kind == KindMalloc || e.Call.Kind == KindMemCreate }

// Unwrap returns alloc.ErrDeviceOutOfMemory or ErrInjected.
func (e *FaultError) Unwrap() error {
	if e.oom() {
		return alloc.ErrDeviceOutOfMemory
	}
	return ErrInjected
}

type fault struct {
	Fault
	seen    uint64 // matching calls so far
	retired bool
}

// Inject installs a fault and returns a function that removes it.
func (d *Device) Inject(f Fault) (remove func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ft := &fault{Fault: f}
	d.faults = append(d.faults, ft)
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, x := range d.faults {
			if x == ft {
				d.faults = append(d.faults[:i], d.faults[i+1:]...)
				return
			}
		}
	}
}

// FailNth makes the nth call of kind k from now on fail (1 is the next).
func (d *Device) FailNth(k Kind, n uint64) (remove func()) {
	return d.Inject(Fault{Kind: k, Nth: max(n, 1)})
}

// FailAbove makes every call of kind k for size bytes or more fail, as a
// device whose largest free block is smaller would.
func (d *Device) FailAbove(k Kind, size uint64) (remove func()) {
	return d.Inject(Fault{Kind: k, MinSize: size})
}

// FailWhen makes every call of kind k for which pred returns true fail.
func (d *Device) FailWhen(k Kind, pred func(Call) bool) (remove func()) {
	return d.Inject(Fault{Kind: k, When: pred})
}

// injectLocked returns the error of the first fault the call triggers. Every
// matching fault counts the call, so that Nth faults stay independent.
func (d *Device) injectLocked(c Call) error {
	var err error
	for _, f := range d.faults {
		if f.retired || f.Kind != c.Kind || c.Size < f.MinSize || (f.When != nil && !f.When(c)) {
			continue
		}
		f.seen++
		fire := f.Nth == 0 || f.seen == f.Nth
		if f.Nth != 0 && f.seen >= f.Nth {
			f.retired = true
		}
		if fire && err == nil {
			err = &FaultError{Call: c}
		}
	}
	return err
}
