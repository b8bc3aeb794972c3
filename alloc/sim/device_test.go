package sim

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

func newDev(t *testing.T, cfg Config) *Device {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero value", Config{}, ""},
		{"granularity not power of two", Config{Granularity: 3 * mib}, "not a power of two"},
		{"granularity too small", Config{Granularity: 256}, "below 512"},
		{"unaligned base", Config{Base: 0x7f0000001000}, "not aligned"},
		{"overflowing space", Config{Base: 1 << 63, AddressSpace: 1 << 63}, "overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.wantErr)) {
				t.Fatalf("New: err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestMallocRoundingAndAlignment(t *testing.T) {
	tests := []struct {
		n        uint64
		rounded  uint64
		alignBit uint64
	}{
		{1, 512, 512},
		{512, 512, 512},
		{513, 1024, 512},
		{1*mib + 1, 1*mib + 512, 512},
		{2*mib - 1, 2 * mib, 512},
		{2 * mib, 2 * mib, 2 * mib},
		{2*mib + 1, 4 * mib, 2 * mib},
		{20 * mib, 20 * mib, 2 * mib},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			d := newDev(t, Config{Capacity: gib})
			// A small allocation first, so the next one must be aligned on purpose.
			if _, err := d.Malloc(512); err != nil {
				t.Fatal(err)
			}
			addr, err := d.Malloc(tt.n)
			if err != nil {
				t.Fatalf("Malloc(%d): %v", tt.n, err)
			}
			if addr%tt.alignBit != 0 {
				t.Errorf("Malloc(%d) = %#x, not aligned to %d", tt.n, addr, tt.alignBit)
			}
			if addr < DefaultBase {
				t.Errorf("Malloc(%d) = %#x, below the base %#x", tt.n, addr, uint64(DefaultBase))
			}
			if got := d.Stats().MallocBytes; got != 512+tt.rounded {
				t.Errorf("MallocBytes = %d, want %d", got, 512+tt.rounded)
			}
		})
	}
}

func TestMallocReusesFreedRanges(t *testing.T) {
	d := newDev(t, Config{Capacity: gib})
	a, _ := d.Malloc(4 * mib)
	b, _ := d.Malloc(4 * mib)
	c, _ := d.Malloc(4 * mib)
	if b != a+4*mib || c != b+4*mib {
		t.Fatalf("addresses %#x %#x %#x are not consecutive", a, b, c)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.Malloc(2 * mib); got != b {
		t.Errorf("first fit: got %#x, want the freed %#x", got, b)
	}
	if got, _ := d.Malloc(2 * mib); got != b+2*mib {
		t.Errorf("first fit: got %#x, want %#x", got, b+2*mib)
	}
	// Freeing everything coalesces the space: a 12 MiB request fits at a.
	for _, p := range []uint64{a, b, b + 2*mib, c} {
		if err := d.Free(p); err != nil {
			t.Fatalf("Free(%#x): %v", p, err)
		}
	}
	if got, _ := d.Malloc(12 * mib); got != a {
		t.Errorf("after coalescing: got %#x, want %#x", got, a)
	}
}

func TestCapacityAndMemInfo(t *testing.T) {
	d := newDev(t, Config{Capacity: 100 * mib, ReservedByOthers: 20 * mib})
	free, total, err := d.MemInfo()
	if err != nil || free != 80*mib || total != 100*mib {
		t.Fatalf("MemInfo = %d, %d, %v; want 80 MiB, 100 MiB", free, total, err)
	}
	a, err := d.Malloc(60 * mib)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Malloc(30 * mib)
	if !errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Fatalf("Malloc past capacity: err = %v, want ErrDeviceOutOfMemory", err)
	}
	if free, _, _ := d.MemInfo(); free != 20*mib {
		t.Errorf("free = %d, want 20 MiB", free)
	}
	d.SetReservedByOthers(50 * mib)
	if free, _, _ := d.MemInfo(); free != 0 {
		t.Errorf("free with others holding more = %d, want 0", free)
	}
	if _, err := d.Malloc(512); !errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Errorf("Malloc when others hold the rest: err = %v", err)
	}
	d.SetReservedByOthers(0)
	if err := d.Free(a); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Malloc(100 * mib); err != nil {
		t.Errorf("Malloc of the whole device: %v", err)
	}
	s := d.Stats()
	if s.Peak != 100*mib || s.InUse != 100*mib {
		t.Errorf("InUse, Peak = %d, %d; want 100 MiB both", s.InUse, s.Peak)
	}
}

func TestFreeErrors(t *testing.T) {
	d := newDev(t, Config{})
	a, _ := d.Malloc(kib)
	r, _ := d.AddressReserve(2 * mib)
	tests := []struct {
		name string
		addr uint64
	}{
		{"zero", 0},
		{"interior pointer", a + 512},
		{"reservation", r},
		{"never allocated", DefaultBase + 1<<40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := d.Free(tt.addr); !errors.Is(err, ErrInvalidValue) {
				t.Errorf("Free(%#x): err = %v, want ErrInvalidValue", tt.addr, err)
			}
		})
	}
	if err := d.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := d.Free(a); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("double free: err = %v, want ErrInvalidValue", err)
	}
	if _, err := d.Malloc(0); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("Malloc(0): err = %v, want ErrInvalidValue", err)
	}
}

func TestContents(t *testing.T) {
	d := newDev(t, Config{})
	const n = 200 * kib // spans several 64 KiB chunks
	a, err := d.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	pattern := make([]byte, n)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>16)
	}
	if err := d.CopyHtoD(a, pattern); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := d.CopyDtoH(got, a); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern) {
		t.Fatal("read back differs from the pattern written")
	}
	// Memset a middle piece, then copy the whole to a second allocation.
	if err := d.Memset(a+1000, 0xAB, 70*kib); err != nil {
		t.Fatal(err)
	}
	for i := 1000; i < 1000+70*kib; i++ {
		pattern[i] = 0xAB
	}
	b, _ := d.Malloc(n)
	if err := d.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern) {
		t.Fatal("copy of the memset pattern differs")
	}
	// Unwritten memory reads as zero and costs no backing.
	c, _ := d.Malloc(gib)
	small := make([]byte, 16)
	if err := d.CopyDtoH(small, c+gib-16); err != nil || !bytes.Equal(small, make([]byte, 16)) {
		t.Errorf("unwritten memory = %v, %v; want zeros", small, err)
	}
	if err := d.Memset(c, 0, gib); err != nil {
		t.Fatal(err)
	}
	if bb := d.Stats().BackingBytes; bb > 2*n+2*chunkSize {
		t.Errorf("BackingBytes = %d after touching 1 GiB with zeros, want ≤ %d", bb, 2*n+2*chunkSize)
	}
}

func TestCopyDtoDOverlap(t *testing.T) {
	d := newDev(t, Config{})
	const n = 3*copyPiece + 100
	a, _ := d.Malloc(n + 1000)
	src := make([]byte, n+1000)
	for i := range src {
		src[i] = byte(i % 251)
	}
	for _, shift := range []int64{+1000, -1000} {
		t.Run(fmt.Sprint(shift), func(t *testing.T) {
			if err := d.CopyHtoD(a, src); err != nil {
				t.Fatal(err)
			}
			from, to := a, a+uint64(shift)
			want := append([]byte(nil), src...)
			if shift < 0 {
				from, to = a-uint64(shift), a
				copy(want[0:n], src[-shift:])
			} else {
				copy(want[shift:], src[0:n])
			}
			if err := d.CopyDtoD(to, from, n); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n+1000)
			if err := d.CopyDtoH(got, a); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Error("overlapping copy is not a memmove")
			}
		})
	}
}

func TestIllegalAccess(t *testing.T) {
	d := newDev(t, Config{})
	a, _ := d.Malloc(1000) // rounded to 1024, but only 1000 are usable
	b, _ := d.Malloc(1000)
	r, _ := d.AddressReserve(4 * mib)
	h, _ := d.MemCreate(2 * mib)
	if err := d.MemMap(r, 2*mib, h); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr uint64
		n    uint64
	}{
		{"before the base", DefaultBase - 4096, 16},
		{"past requested size", a + 990, 20},
		{"into the next allocation", a + 500, 1000},
		{"freed gap", b + 2048, 1},
		{"mapped without access", r, 16},
		{"unmapped page of a reservation", r + 2*mib, 16},
		{"wrapping range", a, ^uint64(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := make([]byte, min(tt.n, 1<<12))
			errs := []error{d.Memset(tt.addr, 1, tt.n), d.CopyDtoD(tt.addr, a, tt.n), d.CopyDtoD(a, tt.addr, tt.n)}
			if tt.n <= 1<<12 {
				errs = append(errs, d.CopyHtoD(tt.addr, buf), d.CopyDtoH(buf, tt.addr))
			}
			for i, err := range errs {
				if !errors.Is(err, ErrIllegalAddress) {
					t.Errorf("access %d: err = %v, want ErrIllegalAddress", i, err)
				}
			}
		})
	}
	if err := d.Memset(a, 1, 0); err != nil {
		t.Errorf("zero-length memset: %v", err)
	}
}

func TestVirtualMemory(t *testing.T) {
	d := newDev(t, Config{Capacity: 16 * mib})
	g, err := d.Granularity()
	if err != nil || g != DefaultGranularity {
		t.Fatalf("Granularity = %d, %v", g, err)
	}
	r, err := d.AddressReserve(8 * mib)
	if err != nil {
		t.Fatal(err)
	}
	if r%g != 0 {
		t.Fatalf("reservation %#x is not aligned", r)
	}
	h1, _ := d.MemCreate(2 * mib)
	h2, _ := d.MemCreate(4 * mib)
	if free, _, _ := d.MemInfo(); free != 10*mib {
		t.Fatalf("free after 6 MiB of handles = %d", free)
	}
	// Two handles mapped back to back form one contiguous accessible range.
	must(t, d.MemMap(r, 2*mib, h1))
	must(t, d.MemMap(r+2*mib, 4*mib, h2))
	must(t, d.MemSetAccess(r, 6*mib))
	pattern := bytes.Repeat([]byte("vram"), mib/4*3) // 3 MiB, straddles the two handles
	must(t, d.CopyHtoD(r+mib, pattern))

	// Remap h2 at the far end of a second reservation: its bytes follow it.
	must(t, d.MemUnmap(r+2*mib, 4*mib))
	r2, _ := d.AddressReserve(4 * mib)
	must(t, d.MemMap(r2, 4*mib, h2))
	must(t, d.MemSetAccess(r2, 4*mib))
	got := make([]byte, 2*mib)
	must(t, d.CopyDtoH(got, r2))
	if !bytes.Equal(got, pattern[mib:]) {
		t.Error("contents did not follow the physical handle")
	}

	// Partial unmap and partial access split the mappings.
	must(t, d.MemUnmap(r2+2*mib, 2*mib))
	if err := d.CopyDtoH(got[:1], r2+2*mib); !errors.Is(err, ErrIllegalAddress) {
		t.Errorf("read of unmapped half: %v", err)
	}
	must(t, d.CopyDtoH(got[:1], r2+2*mib-1))
	if s := d.Stats(); s.MappedBytes != 4*mib || s.Handles != 2 || s.PhysBytes != 6*mib {
		t.Errorf("stats = %+v", s)
	}
	must(t, d.MemUnmap(r, 2*mib))
	must(t, d.MemUnmap(r2, 2*mib))
	must(t, d.MemRelease(h1))
	must(t, d.MemRelease(h2))
	must(t, d.AddressFree(r, 8*mib))
	must(t, d.AddressFree(r2, 4*mib))
	if s := d.Stats(); s.InUse != 0 || s.Reservations != 0 || s.MappedBytes != 0 || s.Handles != 0 {
		t.Errorf("after teardown stats = %+v", s)
	}
	// All address space came back: the next reservation lands where the first did.
	if r3, _ := d.AddressReserve(12 * mib); r3 != r {
		t.Errorf("reservation after teardown at %#x, want %#x", r3, r)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestVirtualMemoryMisuse(t *testing.T) {
	type env struct {
		d     *Device
		r     uint64 // an 8 MiB reservation, its first 2 MiB mapped to h
		h, h2 alloc.PhysHandle
	}
	tests := []struct {
		name string
		op   func(e env) error
		want error
	}{
		{"reserve unaligned size", func(e env) error { _, err := e.d.AddressReserve(mib); return err }, ErrInvalidValue},
		{"reserve zero", func(e env) error { _, err := e.d.AddressReserve(0); return err }, ErrInvalidValue},
		{"create unaligned size", func(e env) error { _, err := e.d.MemCreate(3 * mib); return err }, ErrInvalidValue},
		{"create too large", func(e env) error { _, err := e.d.MemCreate(64 * mib); return err }, alloc.ErrDeviceOutOfMemory},
		{"map unaligned address", func(e env) error { return e.d.MemMap(e.r+2*mib+4096, 2*mib, e.h2) }, ErrInvalidValue},
		{"map unaligned size", func(e env) error { return e.d.MemMap(e.r+2*mib, mib, e.h2) }, ErrInvalidValue},
		{"double map", func(e env) error { return e.d.MemMap(e.r, 2*mib, e.h2) }, ErrInvalidValue},
		{"overlapping map", func(e env) error { return e.d.MemMap(e.r-2*mib, 4*mib, e.h2) }, ErrInvalidValue},
		{"map larger than handle", func(e env) error { return e.d.MemMap(e.r+2*mib, 4*mib, e.h2) }, ErrInvalidValue},
		{"map past reservation", func(e env) error { return e.d.MemMap(e.r+8*mib, 2*mib, e.h2) }, ErrInvalidValue},
		{"map unknown handle", func(e env) error { return e.d.MemMap(e.r+2*mib, 2*mib, 99) }, ErrInvalidValue},
		{"unmap unmapped", func(e env) error { return e.d.MemUnmap(e.r+2*mib, 2*mib) }, ErrInvalidValue},
		{"unmap partly mapped", func(e env) error { return e.d.MemUnmap(e.r, 4*mib) }, ErrInvalidValue},
		{"access unmapped", func(e env) error { return e.d.MemSetAccess(e.r+4*mib, 2*mib) }, ErrInvalidValue},
		{"release mapped handle", func(e env) error { return e.d.MemRelease(e.h) }, ErrInvalidValue},
		{"release unknown handle", func(e env) error { return e.d.MemRelease(99) }, ErrInvalidValue},
		{"double release", func(e env) error { e.d.MemRelease(e.h2); return e.d.MemRelease(e.h2) }, ErrInvalidValue},
		{"free reservation with mappings", func(e env) error { return e.d.AddressFree(e.r, 8*mib) }, ErrInvalidValue},
		{"free part of reservation", func(e env) error { return e.d.AddressFree(e.r+2*mib, 2*mib) }, ErrInvalidValue},
		{"free a malloc address", func(e env) error { a, _ := e.d.Malloc(2 * mib); return e.d.AddressFree(a, 2*mib) }, ErrInvalidValue},
		{"malloc address is not a reservation", func(e env) error {
			a, _ := e.d.Malloc(2 * mib)
			return e.d.MemMap(a, 2*mib, e.h2)
		}, ErrInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(t, Config{Capacity: 32 * mib})
			r, _ := d.AddressReserve(8 * mib)
			h, _ := d.MemCreate(2 * mib)
			h2, _ := d.MemCreate(2 * mib)
			must(t, d.MemMap(r, 2*mib, h))
			err := tt.op(env{d, r, h, h2})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			// A failed call changes nothing.
			if s := d.Stats(); s.MappedBytes != 2*mib {
				t.Errorf("MappedBytes = %d after a failed call", s.MappedBytes)
			}
		})
	}
}

func TestAllowReleaseMapped(t *testing.T) {
	d := newDev(t, Config{Capacity: 8 * mib, AllowReleaseMapped: true})
	r, _ := d.AddressReserve(2 * mib)
	h, _ := d.MemCreate(2 * mib)
	must(t, d.MemMap(r, 2*mib, h))
	must(t, d.MemRelease(h))
	if d.Stats().PhysBytes != 2*mib {
		t.Fatal("released mapped handle freed before its unmap")
	}
	if err := d.MemMap(r, 2*mib, h); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("map of a released handle: %v", err)
	}
	must(t, d.MemUnmap(r, 2*mib))
	if s := d.Stats(); s.PhysBytes != 0 || s.Handles != 0 {
		t.Errorf("after last unmap stats = %+v", s)
	}
}

func TestEvents(t *testing.T) {
	d := newDev(t, Config{})
	s1, s2 := d.NewStream(), d.NewStream()
	ev, _ := d.EventCreate()
	if done, err := d.EventQuery(ev); !done || err != nil {
		t.Errorf("unrecorded event: done=%v err=%v", done, err)
	}
	must(t, d.EventRecord(ev, s1))
	if done, _ := d.EventQuery(ev); !done {
		t.Error("events complete at once by default")
	}

	d.HoldEvents(true)
	ev2, _ := d.EventCreate()
	must(t, d.EventRecord(ev, s1))
	must(t, d.EventRecord(ev2, s2))
	if n := d.PendingEvents(); n != 2 {
		t.Errorf("PendingEvents = %d, want 2", n)
	}
	if n := d.CompleteStream(s2); n != 1 {
		t.Errorf("CompleteStream = %d, want 1", n)
	}
	if done, _ := d.EventQuery(ev2); !done {
		t.Error("ev2 pending after its stream completed")
	}
	if done, _ := d.EventQuery(ev); done {
		t.Error("ev completed with another stream")
	}
	if n := d.CompleteEvents(); n != 1 {
		t.Errorf("CompleteEvents = %d, want 1", n)
	}
	if done, _ := d.EventQuery(ev); !done {
		t.Error("ev pending after CompleteEvents")
	}
	must(t, d.EventDestroy(ev))
	must(t, d.EventDestroy(ev2))
	if d.LiveEvents() != 0 {
		t.Error("events leaked")
	}
	for name, err := range map[string]error{
		"query destroyed":  func() error { _, err := d.EventQuery(ev); return err }(),
		"record destroyed": d.EventRecord(ev, 0),
		"double destroy":   d.EventDestroy(ev),
	} {
		if !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestHostMemory(t *testing.T) {
	d := newDev(t, Config{HostCapacity: 10 * kib})
	b, err := d.HostAlloc(4 * kib)
	if err != nil || len(b) != 4*kib {
		t.Fatalf("HostAlloc = %d bytes, %v", len(b), err)
	}
	c, _ := d.HostAlloc(6 * kib)
	if _, err := d.HostAlloc(1); err == nil {
		t.Error("HostAlloc past HostCapacity succeeded")
	}
	if s := d.Stats(); s.HostBytes != 10*kib || s.HostAllocations != 2 {
		t.Errorf("stats = %+v", s)
	}
	if err := d.HostFree(b[1:]); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("HostFree of an interior slice: %v", err)
	}
	if err := d.HostFree(make([]byte, 8)); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("HostFree of foreign memory: %v", err)
	}
	must(t, d.HostFree(b))
	must(t, d.HostFree(c))
	if err := d.HostFree(c); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("double HostFree: %v", err)
	}
	if _, err := d.HostAlloc(0); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("HostAlloc(0): %v", err)
	}
	if s := d.Stats(); s.HostBytes != 0 {
		t.Errorf("HostBytes = %d after freeing all", s.HostBytes)
	}
}

func TestCalls(t *testing.T) {
	d := newDev(t, Config{})
	a, _ := d.Malloc(kib)
	d.Malloc(0) // fails, still counted
	d.Free(a)
	d.MemInfo()
	d.MemInfo()
	r, _ := d.AddressReserve(2 * mib)
	h, _ := d.MemCreate(2 * mib)
	d.MemMap(r, 2*mib, h)
	d.MemSetAccess(r, 2*mib)
	d.MemUnmap(r, 2*mib)
	d.MemRelease(h)
	d.AddressFree(r, 2*mib)
	want := Calls{Malloc: 2, Free: 1, MemInfo: 2, AddressReserve: 1, MemCreate: 1, MemMap: 1,
		MemSetAccess: 1, MemUnmap: 1, MemRelease: 1, AddressFree: 1}
	if got := d.Calls(); got != want {
		t.Errorf("Calls = %+v\nwant    %+v", got, want)
	}
	if got := d.Calls().Total(); got != 12 {
		t.Errorf("Total = %d, want 12", got)
	}
	if got := d.Calls().Allocation(); got != 10 {
		t.Errorf("Allocation = %d, want 10", got)
	}
	if got := d.Stats().Failures; got != 1 {
		t.Errorf("Failures = %d, want 1", got)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name    string
		inject  func(d *Device)
		calls   []uint64 // Malloc sizes, in order
		fail    []bool
		wantOOM bool
	}{
		{"second malloc", func(d *Device) { d.FailNth(KindMalloc, 2) },
			[]uint64{kib, kib, kib}, []bool{false, true, false}, true},
		{"next malloc", func(d *Device) { d.FailNth(KindMalloc, 1) },
			[]uint64{kib, kib}, []bool{true, false}, true},
		{"above a size", func(d *Device) { d.FailAbove(KindMalloc, 2*mib) },
			[]uint64{mib, 2 * mib, 3 * mib, kib}, []bool{false, true, true, false}, true},
		{"second large one", func(d *Device) { d.Inject(Fault{Kind: KindMalloc, MinSize: mib, Nth: 2}) },
			[]uint64{mib, kib, mib, mib}, []bool{false, false, true, false}, true},
		{"predicate", func(d *Device) { d.FailWhen(KindMalloc, func(c Call) bool { return c.N%2 == 0 }) },
			[]uint64{kib, kib, kib, kib}, []bool{false, true, false, true}, true},
		{"other kind untouched", func(d *Device) { d.FailNth(KindFree, 1) },
			[]uint64{kib, kib}, []bool{false, false}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(t, Config{})
			tt.inject(d)
			for i, n := range tt.calls {
				_, err := d.Malloc(n)
				if (err != nil) != tt.fail[i] {
					t.Fatalf("call %d (Malloc %d): err = %v, want failure %v", i+1, n, err, tt.fail[i])
				}
				if err != nil {
					var fe *FaultError
					if !errors.As(err, &fe) || fe.Call.Kind != KindMalloc || fe.Call.Size != n {
						t.Errorf("err = %#v, want a FaultError naming the call", err)
					}
					if errors.Is(err, alloc.ErrDeviceOutOfMemory) != tt.wantOOM {
						t.Errorf("err = %v, OOM kind want %v", err, tt.wantOOM)
					}
				}
			}
			if s := d.Stats(); s.Allocations != countFalse(tt.fail) {
				t.Errorf("a faulted call allocated: %d allocations", s.Allocations)
			}
		})
	}
}

func countFalse(b []bool) int {
	n := 0
	for _, x := range b {
		if !x {
			n++
		}
	}
	return n
}

func TestFaultKinds(t *testing.T) {
	d := newDev(t, Config{})
	remove := d.FailNth(KindMemCreate, 1)
	if _, err := d.MemCreate(2 * mib); !errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Errorf("MemCreate fault: %v, want ErrDeviceOutOfMemory", err)
	}
	remove()
	d.FailNth(KindMemMap, 1)
	r, _ := d.AddressReserve(2 * mib)
	h, _ := d.MemCreate(2 * mib)
	err := d.MemMap(r, 2*mib, h)
	if !errors.Is(err, ErrInjected) || errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		t.Errorf("MemMap fault: %v, want ErrInjected only", err)
	}
	must(t, d.MemMap(r, 2*mib, h))
	off := d.FailAbove(KindMalloc, 0)
	if _, err := d.Malloc(1); err == nil {
		t.Error("fault on every Malloc did not fire")
	}
	off()
	if _, err := d.Malloc(1); err != nil {
		t.Errorf("Malloc after removing the fault: %v", err)
	}
}

func TestLatency(t *testing.T) {
	d := newDev(t, Config{Latency: AnchorLatency})
	a, _ := d.Malloc(512)
	b, _ := d.Malloc(1 << 30)
	d.Free(a)
	d.Free(b)
	d.MemInfo()
	want := 2400*time.Nanosecond + 137*time.Microsecond + 2*(2400*time.Nanosecond) + 2*137*time.Microsecond
	if got := d.Stats().DriverTime; got != want {
		t.Errorf("DriverTime = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		size uint64
		want time.Duration
	}{
		{1, 2400 * time.Nanosecond}, {mib, 24 * time.Microsecond}, {2 * mib, 40 * time.Microsecond},
		{20 * mib, 47 * time.Microsecond}, {gib, 137 * time.Microsecond}, {64 * gib, 137 * time.Microsecond},
	} {
		if got := AnchorLatency(Call{Kind: KindMalloc, Size: tt.size}); got != tt.want {
			t.Errorf("AnchorLatency(Malloc %d) = %v, want %v", tt.size, got, tt.want)
		}
	}
	mid := AnchorLatency(Call{Kind: KindMalloc, Size: 4 * mib})
	if mid <= 40*time.Microsecond || mid >= 47*time.Microsecond {
		t.Errorf("AnchorLatency(4 MiB) = %v, want between the 2 and 20 MiB anchors", mid)
	}
}

func TestDeterminism(t *testing.T) {
	run := func() []uint64 {
		d := newDev(t, Config{Capacity: 64 * mib})
		var out, live []uint64
		for i := range 200 {
			n := uint64(i*7919%(3*mib) + 1)
			if a, err := d.Malloc(n); err == nil {
				out = append(out, a)
				live = append(live, a)
			}
			if i%3 == 0 && len(live) > 0 {
				d.Free(live[len(live)/2])
				live = append(live[:len(live)/2], live[len(live)/2+1:]...)
			}
		}
		return out
	}
	a, b := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("two runs of the same calls returned different addresses")
	}
}

func TestConcurrentUse(t *testing.T) {
	d := newDev(t, Config{Capacity: gib})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4*kib)
			for i := range 200 {
				a, err := d.Malloc(uint64(4*kib + i))
				if err != nil {
					t.Error(err)
					return
				}
				for j := range buf {
					buf[j] = byte(g + i)
				}
				if err := d.CopyHtoD(a, buf); err != nil {
					t.Error(err)
				}
				got := make([]byte, len(buf))
				if err := d.CopyDtoH(got, a); err != nil || got[len(got)-1] != byte(g+i) {
					t.Errorf("read back %v, %v", got[len(got)-1], err)
				}
				if err := d.Free(a); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if s := d.Stats(); s.InUse != 0 || s.Allocations != 0 {
		t.Errorf("after all frees: %+v", s)
	}
	if c := d.Calls(); c.Malloc != 1600 || c.Free != 1600 {
		t.Errorf("calls = %+v", c)
	}
}
