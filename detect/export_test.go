package detect

// SetTrace lets external tests watch the series a verdict tests.
func SetTrace(fn func(t, f []float64, seg []int)) { traceSeries = fn }
