package serve

// ring keeps the last values of a series (used bytes of a device or a
// process) for the live views' sparklines.
//
// It is an append-only log rather than a circular buffer, so that values
// can hand the States a slice of it without copying: the log has room for
// twice the values kept, a push appends after every slice handed out (or,
// when the log is full, starts a new one with the newest values), and a
// slice handed out is never written again. A copy of the kept values is
// made once every n pushes instead of once per State.
type ring struct {
	buf []uint64 // oldest first; the newest n are the ring's values
	n   int
}

func newRing(n int) *ring {
	r := makeRing(n)
	return &r
}

// makeRing is newRing's ring as a value, for a struct that keeps it.
func makeRing(n int) ring { return ring{buf: make([]uint64, 0, 2*n), n: n} }

func (r *ring) push(v uint64) {
	if len(r.buf) == cap(r.buf) {
		keep := r.n - 1
		nb := make([]uint64, keep, 2*r.n)
		copy(nb, r.buf[len(r.buf)-keep:])
		r.buf = nb
	}
	r.buf = append(r.buf, v)
}

// values returns the values, oldest first (nil when there are none). The
// slice is shared and must not be modified; later pushes leave it as it
// is.
func (r *ring) values() []uint64 {
	if len(r.buf) == 0 {
		return nil
	}
	lo := max(0, len(r.buf)-r.n)
	return r.buf[lo:len(r.buf):len(r.buf)]
}
