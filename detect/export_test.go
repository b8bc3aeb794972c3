package detect

// SetTrace lets external tests watch the series a verdict tests.
func SetTrace(fn func(t, f []float64, seg []int)) { traceSeries = fn }

// WindowsKept returns how many closed windows d holds.
func WindowsKept(d *Detector) int { return len(d.wins) }
