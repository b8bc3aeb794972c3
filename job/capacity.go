package job

// What the trials of a batch search say about the memory the job can use.
// See Fit.

// MessageCapacity is the memory the process that printed m could have held
// on its GPU, in the terms of the driver's per-process figure (what NVML
// reports and what vram's samples measure), as far as the message says:
//
//   - With PyTorch's "N allowed" (a per-process memory fraction), the cap
//     is exact: PyTorch's reserved memory may not pass N, and the process
//     holds its non-PyTorch memory (CUDA context, libraries) on top, which
//     is what the process has in use less what PyTorch reserved. exact is
//     then true.
//   - Otherwise, the process's memory in use plus the GPU's free memory is
//     the most it could have reached at that moment (other processes hold
//     the rest): an upper bound, exact false.
//
// It returns 0 when the message does not state the figures needed. Figures
// that contradict each other (more reserved than in use) are not trusted:
// the non-PyTorch part is then taken as 0.
func MessageCapacity(m Message) (bytes uint64, exact bool) {
	var inUse uint64
	for _, h := range m.Holders {
		if h.PID == 0 {
			inUse = h.Bytes
		}
	}
	if m.Allowed > 0 {
		reserved := m.Allocated + m.Unallocated
		var other uint64
		if inUse > reserved && reserved > 0 {
			other = inUse - reserved
		}
		c := m.Allowed + other
		if c < m.Allowed { // overflow
			return 0, false
		}
		if inUse > 0 && m.Capacity > 0 && m.Free <= m.Capacity {
			// A fraction above what the GPU can give is bounded by the GPU.
			c = min(c, inUse+m.Free)
		}
		return c, true
	}
	if inUse > 0 && m.Capacity > 0 && m.Free <= m.Capacity && inUse+m.Free >= inUse {
		return inUse + m.Free, false
	}
	return 0, false
}

// evidence is what the search has learned about the job's capacity: the
// memory it may hold before it runs out, in the terms of the trials' peaks.
type evidence struct {
	exact     float64 // smallest stated cap: PyTorch's allowed figure, vram's --limit; 0 none
	exactFrom string
	upper     float64 // smallest "held + free" seen (samples, messages); 0 none
	upperFrom string
	// ceiling is the largest peak of a trial that did not fit while it
	// held more than every trial that fitted before it: the job ran into
	// something there. (A trial that fails at its first large allocation,
	// holding little, says nothing about the capacity.)
	ceiling float64
	fitPeak float64 // largest peak of a trial that fitted
}

// ceilingShare: when trials run out of memory at a ceiling below this share
// of the capacity the figures give, something the figures do not show stops
// the job (a cap inside the job that prints no figures, fragmentation): the
// capacity is taken to be the ceiling (or the largest fitting peak, if
// higher).
const ceilingShare = 0.97

func (e *evidence) addExact(v float64, from string) {
	if v > 0 && (e.exact == 0 || v < e.exact) {
		e.exact, e.exactFrom = v, from
	}
}

func (e *evidence) addUpper(v float64, from string) {
	if v > 0 && (e.upper == 0 || v < e.upper) {
		e.upper, e.upperFrom = v, from
	}
}

// capacity is the estimate and where it comes from; 0 unknown.
func (e *evidence) capacity() (float64, string) {
	c, from := e.exact, e.exactFrom
	if e.upper > 0 && (c == 0 || e.upper < c) {
		c, from = e.upper, e.upperFrom
	}
	if e.ceiling > 0 && (c == 0 || e.ceiling < ceilingShare*c) {
		c, from = e.ceiling, "the peaks of trials that ran out of memory"
	}
	if c > 0 && c < e.fitPeak {
		// A trial held more and fitted: the stated cap is not in the
		// terms of the samples (an allocator's cap leaves out the CUDA
		// context).
		c, from = e.fitPeak, "the largest peak of a trial that fitted"
	}
	return c, from
}

// learn reads a trial's result into the evidence. limit is the trial's
// --limit (vram's watchdog): the tree is ended there, so it is a stated cap.
func (e *evidence) learn(r *Result, fits bool, limit Limit) {
	peak := float64(r.Peak.Bytes)
	if r.Memory && peak > 0 {
		if fits {
			e.fitPeak = max(e.fitPeak, peak)
		} else if peak > e.fitPeak {
			e.ceiling = max(e.ceiling, peak)
		}
	}
	if r.Memory && r.Peak.Device >= 0 && r.Peak.Device < len(r.Devices) {
		if limit.Set() {
			e.addExact(float64(limit.On(r.Devices[r.Peak.Device])), "--limit")
		}
		e.addUpper(trialCapacity(r), "the job's memory and the GPU's free memory")
	}
	if m := r.OOM.Message; m != nil {
		if c, exact := MessageCapacity(*m); c > 0 {
			if exact {
				e.addExact(float64(c), "the figures of the out-of-memory message (allowed)")
			} else {
				e.addUpper(float64(c), "the figures of the out-of-memory message (in use + free)")
			}
		}
	}
}
