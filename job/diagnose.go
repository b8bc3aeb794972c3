package job

import (
	"fmt"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

// Causes of an out-of-memory failure, as Diagnose names them.
const (
	CauseDemand        = "demand"        // the job needs more than the GPU has
	CauseFragmentation = "fragmentation" // the cache held enough free bytes, not in one piece
	CauseOtherProcess  = "other-process" // another process held the memory
	CauseLeak          = "leak"          // the job's memory kept rising until it died
	CauseLimit         = "limit"         // vram's --limit ended the job (not an OOM)
	// CauseUnknown: nothing tells why, the message states no sizes and
	// vram saw none of the job's memory.
	CauseUnknown = "unknown"
)

// OOM is the out-of-memory verdict of a job.
type OOM struct {
	// Detected: the job failed and its output says it ran out of GPU memory.
	Detected bool
	// Caught: the output has an OOM message but the job succeeded (it
	// caught the error, as batch-size finders do).
	Caught bool
	// Cause is one of the Cause constants ("" when not Detected, except
	// CauseLimit when vram's limit ended the job).
	Cause string
	// Explanation says why, with the figures; Advice what to do.
	Explanation, Advice string
	Message             *Message
	// Holder is the other process for CauseOtherProcess.
	Holder *Proc
	// Slope is the leak's rate before death for CauseLeak, bytes/s.
	Slope float64
}

// The thresholds of the causes (see doc.go, "OOM diagnosis").
const (
	// otherShare: processes outside the job hold at least this share of
	// the GPU (and at least the failed request) for CauseOtherProcess.
	otherShare = 0.10
	// fragShare: PyTorch's reserved-but-unallocated memory is at least
	// the failed request and at least this share of the capacity for
	// CauseFragmentation.
	fragShare = 1.0 / 32
)

// diagnose names the cause of an OOM from the messages, the samples and
// the leak verdict.
func diagnose(r *Result, msgs []Message) OOM {
	var o OOM
	if r.Limit.Hit {
		o.Cause = CauseLimit
		o.Explanation = fmt.Sprintf("vram ended the job: it held %s on GPU %d, its limit is %s",
			units.FormatBytes(r.Limit.Bytes), r.Devices[r.Limit.Device].Index, units.FormatBytes(r.Limit.Cap))
		o.Advice = "raise --limit, or make the job use less memory (a smaller batch: vram fit)"
		return o
	}
	best, found := bestMessage(msgs)
	if !found {
		return o
	}
	o.Message = &best
	if !r.Failed() {
		o.Caught = true
		o.Explanation = "the job printed an out-of-memory error but exited with status 0 (it caught the error)"
		return o
	}
	o.Detected = true
	dev := r.oomDevice(best)
	capacity := best.Capacity
	if capacity == 0 && dev >= 0 {
		capacity = r.Devices[dev].Total
	}

	// 1. Another process held a large share of the GPU.
	if h, held := r.otherHolder(dev, best); h != nil && capacity > 0 &&
		float64(held) >= otherShare*float64(capacity) && held >= best.Tried {
		o.Cause, o.Holder = CauseOtherProcess, h
		o.Explanation = fmt.Sprintf("other processes held %s of the GPU's %s when the job died; the largest is pid %d (%s) with %s",
			units.FormatBytes(held), units.FormatBytes(capacity), h.PID, gpu.Printable(orUnknown(h.Command)), units.FormatBytes(h.AtEnd))
		o.Advice = fmt.Sprintf("free the GPU (pid %d), or run the job on another GPU (CUDA_VISIBLE_DEVICES)", h.PID)
		return o
	}
	// 2. The job's memory kept rising.
	if r.Leak.Kind == detect.Leak {
		o.Cause, o.Slope = CauseLeak, r.Leak.Slope
		o.Explanation = fmt.Sprintf("the job's memory floor rose at %.1f MiB/min until it died (%s)", r.Leak.MiBPerMin(), r.Leak.Reason)
		o.Advice = "look for tensors kept across steps: a loss summed without .item(), outputs appended to a list, retain_graph=True, caches that only grow"
		return o
	}
	// 3. vram's allocator inside the job published its own figures: they
	// say whether its cache held the bytes in pieces, and what bound it.
	if a := r.Allocator; a != nil && best.Tried > 0 {
		allocatorCause(&o, a, best.Tried, capacity)
		return o
	}
	// 3. The allocator's cache had the bytes, not in one piece.
	if best.Tried > 0 && best.Unallocated >= best.Tried && capacity > 0 &&
		float64(best.Unallocated) >= fragShare*float64(capacity) {
		o.Cause = CauseFragmentation
		o.Explanation = fmt.Sprintf("PyTorch held %s reserved but unallocated, more than the %s it failed to allocate: the free memory was fragmented",
			units.FormatBytes(best.Unallocated), units.FormatBytes(best.Tried))
		o.Advice = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (or call torch.cuda.empty_cache() between phases of different shapes)"
		return o
	}
	// 4. Nothing tells: the message states no sizes and vram saw none of
	// the job's memory (no NVML, or the job held nothing in the samples).
	// Calling that demand would send the user after a smaller batch
	// without evidence.
	if best.Tried == 0 && best.Capacity == 0 && r.Peak.Bytes == 0 {
		o.Cause = CauseUnknown
		if !r.Memory {
			o.Explanation = "the message states no sizes and vram had no memory figures: nothing tells whether the job needed more than the GPU has, another process held the memory, or it was fragmented"
			o.Advice = "to find out, run it where vram can read GPU memory (a host with the NVIDIA driver: the samples show the job's peak and the other processes on the GPU), " + sizesAdvice
		} else {
			o.Explanation = "the message states no sizes and the job held no GPU memory in vram's samples: nothing tells whether it needed more than the GPU has, another process held the memory, or it was fragmented"
			o.Advice = "to find out, sample more often (--interval 10ms) to see the job's memory before it fails, " + sizesAdvice
		}
		return o
	}
	// 5. The job needs more than there is.
	o.Cause = CauseDemand
	switch {
	case best.Tried > 0 && best.Capacity > 0:
		o.Explanation = fmt.Sprintf("the job had %s allocated and asked for %s more on a GPU of %s (%s free)",
			units.FormatBytes(best.Allocated), units.FormatBytes(best.Tried), units.FormatBytes(best.Capacity), units.FormatBytes(best.Free))
	case best.Tried > 0:
		o.Explanation = fmt.Sprintf("the job asked for %s more than the GPU could give", units.FormatBytes(best.Tried))
	case r.Peak.Bytes > 0:
		o.Explanation = fmt.Sprintf("the job reached %s before it failed", units.FormatBytes(r.Peak.Bytes))
	default:
		o.Explanation = fmt.Sprintf("the job ran out of memory on a GPU of %s with %s free", units.FormatBytes(best.Capacity), units.FormatBytes(best.Free))
	}
	if !r.Memory && len(best.Holders) == 0 {
		o.Explanation += "; without memory figures vram cannot tell whether other processes held part of the GPU"
	}
	o.Advice = "use a smaller batch (vram fit finds the largest that fits), mixed precision or activation checkpointing, or a larger GPU"
	return o
}

// allocatorCause names the cause from vram's allocator's figures at the
// last sample that had them (published at once after the failure): its
// free cache held the request but no block of it is fragmentation; a
// reservation at its cap is the cap; anything else is demand.
func allocatorCause(o *OOM, a *AllocatorFigures, tried, capacity uint64) {
	f := a.Last
	free, largest := uint64(f.FreeCached), uint64(f.LargestFree)
	figures := fmt.Sprintf("vram's allocator had %s allocated and %s reserved, %s of it free in blocks of at most %s",
		units.FormatBytes(uint64(f.Allocated)), units.FormatBytes(uint64(f.Reserved)), units.FormatBytes(free), units.FormatBytes(largest))
	if free >= tried && largest < tried {
		o.Cause = CauseFragmentation
		o.Explanation = fmt.Sprintf("%s, when it failed to allocate %s: the free memory was fragmented", figures, units.FormatBytes(tried))
		o.Advice = "use --alloc-conf page_mapped:true (idle pages are remapped where a request needs them), or max_split_size_mb:N so that large blocks are not split"
		return
	}
	o.Cause = CauseDemand
	o.Explanation = fmt.Sprintf("%s, when the job asked for %s more", figures, units.FormatBytes(tried))
	capB := uint64(f.Cap)
	if capB > 0 && (capacity == 0 || capB < capacity) && uint64(f.Reserved)+tried > capB {
		o.Explanation += fmt.Sprintf("; the allocator's cap of %s (--limit, max_bytes or max_fraction) was the bound", units.FormatBytes(capB))
		o.Advice = "raise the cap (--limit or --alloc-conf max_bytes), or use a smaller batch (vram fit finds the largest that fits)"
		return
	}
	o.Advice = "use a smaller batch (vram fit finds the largest that fits), mixed precision or activation checkpointing, or a larger GPU"
}

// sizesAdvice says where the sizes of an OOM come from when vram cannot
// measure them.
const sizesAdvice = "or let the framework state the sizes (PyTorch's torch.OutOfMemoryError message does; a bare CUDA error does not)"

func orUnknown(s string) string {
	if s == "" {
		return "command unknown"
	}
	return s
}

// bestMessage is the first message that states figures, else the first.
func bestMessage(msgs []Message) (Message, bool) {
	if len(msgs) == 0 {
		return Message{}, false
	}
	for _, m := range msgs {
		if m.Tried > 0 || m.Capacity > 0 {
			return m, true
		}
	}
	return msgs[0], true
}

// oomDevice is the position of the device the OOM happened on: the only
// device the job used, or the one the message names when the job used
// several (CUDA ordinals count the devices visible to the job, in order),
// else the device of the job's peak. -1 without memory figures.
func (r *Result) oomDevice(m Message) int {
	used := r.UsedDevices()
	switch {
	case len(used) == 1:
		return used[0]
	case len(used) > 1 && m.GPU >= 0 && m.GPU < len(used):
		return used[m.GPU]
	case r.Peak.Device >= 0 && r.Peak.Device < len(r.Devices):
		return r.Peak.Device
	case len(r.Devices) == 1:
		return 0
	}
	return -1
}

// otherHolder returns the largest process outside the job on device dev at
// the last sample where the job held memory, and what all of them held.
// Without samples it falls back to the processes the message lists that
// are not in the job's tree.
func (r *Result) otherHolder(dev int, m Message) (*Proc, uint64) {
	var best *Proc
	var held uint64
	if dev >= 0 {
		for i := range r.Others {
			o := &r.Others[i]
			on := false
			for _, d := range o.Devices {
				on = on || d == dev
			}
			if !on || o.AtEnd == 0 {
				continue
			}
			held += o.AtEnd
			if best == nil || o.AtEnd > best.AtEnd {
				best = o
			}
		}
		if best != nil || r.Memory {
			return best, held
		}
	}
	for _, h := range m.Holders {
		if h.PID == 0 || r.treePIDs[h.PID] {
			continue
		}
		held += h.Bytes
		if best == nil || h.Bytes > best.AtEnd {
			best = &Proc{PID: h.PID, AtEnd: h.Bytes, Peak: h.Bytes}
		}
	}
	return best, held
}
