package serve

// History: the samples of each history_interval folded into one tick for
// the store.

import (
	"slices"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
)

// histAcc folds the samples of one history interval into one tick that
// keeps the peaks: per device the highest used memory (with the lowest
// free memory and the highest utilization), per process lifetime the most
// bytes and every flag it had (and the most its allocator had allocated
// and reserved, when it runs vram's). A process that existed for part of the
// interval is in the tick; a device whose queries failed at every sample
// is not. The tick is stamped with the time of its newest sample.
type histAcc struct {
	gen   uint64 // counts the intervals taken
	n     int    // samples folded
	time  time.Time
	devs  []store.DeviceSample
	devAt map[string]int
	procs []sample.Process
	// tracks[i] is procs[i]'s lifetime (nil: not tracked), which keeps the
	// record's peak and flags while the interval lasts (procTrack.histBytes,
	// histFlags): they are written into the records when the tick is taken,
	// so that a sample touches its tracks, not their records as well.
	tracks []*procTrack
}

// add folds one sample: its devices, and its processes with each one's
// track (tracks[i] is procs[i]'s lifetime, which remembers where it is
// in the interval; nil: not tracked, a row of its own). record makes the
// record of procs[i] the first time the interval sees it; later samples
// raise its peaks.
func (h *histAcc) add(at time.Time, devices []gpu.DeviceState, procs []gpu.Process, tracks []*procTrack, record func(r *sample.Process, i int)) {
	if h.devAt == nil {
		h.devAt = map[string]int{}
	}
	h.n++
	h.time = at
	for _, ds := range devices {
		if ds.Err != nil {
			continue
		}
		util := -1
		if ds.Utilization.Known {
			util = int(ds.Utilization.GPU)
		}
		i, ok := h.devAt[ds.UUID]
		if !ok {
			h.devAt[ds.UUID] = len(h.devs)
			h.devs = append(h.devs, store.DeviceSample{
				UUID: ds.UUID, Model: ds.Name, Used: ds.Memory.Used, Reserved: ds.Memory.Reserved,
				Free: ds.Memory.Free, Total: ds.Memory.Total, Util: util,
			})
			continue
		}
		s := &h.devs[i]
		s.Used, s.Free, s.Util = max(s.Used, ds.Memory.Used), min(s.Free, ds.Memory.Free), max(s.Util, util)
		s.Reserved, s.Total = ds.Memory.Reserved, ds.Memory.Total
	}
	for i := range procs {
		p, t := &procs[i], tracks[i]
		if t == nil || t.histGen != h.gen+1 {
			h.procs = append(h.procs, sample.Process{})
			h.tracks = append(h.tracks, t)
			r := &h.procs[len(h.procs)-1]
			record(r, i)
			ownAlloc(r)
			if t != nil {
				t.histGen, t.histAt = h.gen+1, len(h.procs)-1
				t.histBytes, t.histFlags = r.Bytes, r.Flags
			}
			continue
		}
		bytes := p.Memory
		if !p.MemoryKnown {
			bytes = 0 // as the record has it (sample.New)
		}
		t.histBytes, t.histFlags = max(t.histBytes, bytes), t.histFlags|p.Flags
		if p.Alloc != nil {
			foldAlloc(&h.procs[t.histAt], p.Alloc)
		}
	}
}

// take returns the folded tick and starts the next interval; ok is false
// when no sample was folded.
func (h *histAcc) take() (store.Tick, bool) {
	if h.n == 0 {
		return store.Tick{}, false
	}
	for i, t := range h.tracks {
		if t != nil {
			h.procs[i].Bytes, h.procs[i].Flags = t.histBytes, t.histFlags
		}
	}
	t := store.Tick{Time: h.time, Devices: h.devs, Processes: h.procs}
	// The tick keeps the records; the next interval's are made at the
	// size of this one's (plus some), in one allocation, and the tracks'
	// list is cleared for reuse.
	n := len(h.procs) + len(h.procs)/8
	clear(h.tracks) // no longer keeps dropped tracks alive
	*h = histAcc{gen: h.gen + 1, devAt: h.devAt, procs: make([]sample.Process, 0, n), tracks: slices.Grow(h.tracks[:0], n)}
	clear(h.devAt)
	return t, true
}

// history folds the sample and writes a tick when history_interval has
// passed since the last one (the first sample is written at once). Samples
// come on a ticker's schedule but are stamped when read, a few
// milliseconds late by varying amounts, so the comparison allows half a
// sample interval: otherwise a sample stamped just before the mark would
// push the tick to the next sample, and ticks would drift one sample
// interval further apart than configured.
func (d *Daemon) history(snap *gpu.Snapshot) {
	d.hist.add(snap.Time, snap.Devices, snap.Processes, d.tracks, func(r *sample.Process, i int) {
		if d.recordsAt == d.tickNo { // made already
			*r = d.records[i]
			return
		}
		d.makeRecord(r, &snap.Processes[i], d.tracks[i], d.latest.now)
	})
	if !d.lastHW.IsZero() && snap.Time.Sub(d.lastHW) < d.cfg.HistoryInterval-d.cfg.Interval/2 {
		return
	}
	if t, ok := d.hist.take(); ok {
		d.w.tick(t)
		d.lastHW = snap.Time
	}
}

// flushHistory writes the samples of the interval in progress (at
// shutdown).
func (d *Daemon) flushHistory() {
	if t, ok := d.hist.take(); ok {
		d.w.tick(t)
	}
}
