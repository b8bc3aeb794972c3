package gpu

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// xidMock sets up the event functions of a mock server: Wait hands out the
// queued results one by one, then times out.
func xidMock(t *testing.T, s *dgxa100.Server, unsupported map[int]bool, queue []func() (nvml.EventData, nvml.Return)) (registered *[]uint64, freed *int, waits *[]uint32) {
	t.Helper()
	var regs []uint64
	var timeouts []uint32
	var nfree int
	set := &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			timeouts = append(timeouts, ms)
			if len(queue) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			next := queue[0]
			queue = queue[1:]
			return next()
		},
		FreeFunc: func() nvml.Return { nfree++; return nvml.SUCCESS },
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.RegisterEventsFunc = func(types uint64, es nvml.EventSet) nvml.Return {
			if es != set {
				t.Errorf("device %d registered on another set", i)
			}
			if unsupported[i] {
				return nvml.ERROR_NOT_SUPPORTED
			}
			regs = append(regs, types)
			return nvml.SUCCESS
		}
	}
	return &regs, &nfree, &timeouts
}

func TestXidEvents(t *testing.T) {
	s := mockServer(t)
	other := dgxa100.NewDevice(9) // a handle that is not one of the registered ones
	uuid2, _ := s.Devices[2].GetUUID()
	other.GetUUIDFunc = func() (string, nvml.Return) { return uuid2, nvml.SUCCESS }
	regs, freed, waits := xidMock(t, s, map[int]bool{1: true}, []func() (nvml.EventData, nvml.Return){
		func() (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
		},
		func() (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: s.Devices[0], EventType: nvml.EventTypeClock}, nvml.SUCCESS
		},
		func() (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: other, EventType: nvml.EventTypeXidCriticalError, EventData: 48}, nvml.SUCCESS
		},
		func() (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST },
	})
	h, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	src, skipped, err := h.XidEvents([]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(*regs) != 2 || (*regs)[0] != nvml.EventTypeXidCriticalError {
		t.Errorf("registered %v, want the Xid type on GPUs 0 and 2", *regs)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "GPU 1") || !strings.Contains(skipped[0], "ERROR_NOT_SUPPORTED") {
		t.Errorf("skipped = %q, want GPU 1 not supported", skipped)
	}
	x := src.(*nvmlXid)
	at := time.Unix(1000, 0)
	x.now = func() time.Time { return at }

	ev, ok, err := src.Wait(1500 * time.Millisecond)
	if err != nil || !ok || ev.Index != 2 || ev.UUID != uuid2 || ev.Xid != 79 || !ev.Time.Equal(at) {
		t.Errorf("first event = %+v %v %v, want Xid 79 on GPU 2", ev, ok, err)
	}
	if (*waits)[0] != 1500 {
		t.Errorf("waited %d ms, want 1500", (*waits)[0])
	}
	if _, ok, err := src.Wait(time.Second); ok || err != nil {
		t.Errorf("a clock event was delivered as an Xid: %v %v", ok, err)
	}
	ev, ok, err = src.Wait(time.Second)
	if err != nil || !ok || ev.Index != 2 || ev.Xid != 48 {
		t.Errorf("event from an unequal handle = %+v %v %v, want GPU 2 found by UUID", ev, ok, err)
	}
	_, _, err = src.Wait(time.Second)
	var ne *NVMLError
	if !errors.As(err, &ne) || ne.Func != "nvmlEventSetWait" || ne.Return != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("lost GPU: err = %v", err)
	}
	if _, ok, err := src.Wait(-time.Second); ok || err != nil {
		t.Errorf("timeout: %v %v", ok, err)
	}
	if (*waits)[len(*waits)-1] != 0 {
		t.Errorf("a negative timeout waited %d ms", (*waits)[len(*waits)-1])
	}
	if err := src.Close(); err != nil || *freed != 1 {
		t.Errorf("close: %v, freed %d", err, *freed)
	}
	if err := src.Close(); err == nil {
		t.Error("second close succeeded")
	}
}

func TestXidEventsErrors(t *testing.T) {
	t.Run("nothing supported", func(t *testing.T) {
		s := mockServer(t)
		all := map[int]bool{}
		for i := range s.Devices {
			all[i] = true
		}
		_, freed, _ := xidMock(t, s, all, nil)
		h, err := NewNVML(s)
		if err != nil {
			t.Fatal(err)
		}
		_, skipped, err := h.XidEvents(nil)
		if !errors.Is(err, ErrNotSupported) || len(skipped) != len(s.Devices) || *freed != 1 {
			t.Errorf("err %v, skipped %d, freed %d", err, len(skipped), *freed)
		}
	})
	t.Run("bad index", func(t *testing.T) {
		s := mockServer(t)
		_, freed, _ := xidMock(t, s, nil, nil)
		h, err := NewNVML(s)
		if err != nil {
			t.Fatal(err)
		}
		var ie *IndexError
		if _, _, err := h.XidEvents([]int{0, 8}); !errors.As(err, &ie) || ie.Index != 8 || *freed != 1 {
			t.Errorf("err %v, freed %d", err, *freed)
		}
	})
	t.Run("create fails", func(t *testing.T) {
		s := mockServer(t)
		s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		h, err := NewNVML(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.XidEvents(nil); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "nvmlEventSetCreate") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestXidMeaning(t *testing.T) {
	if XidMeaning(79) != "GPU has fallen off the bus" || XidMeaning(1) != "" {
		t.Errorf("79: %q, 1: %q", XidMeaning(79), XidMeaning(1))
	}
}
