package serve

// ring keeps the last values of a series (used bytes of a device or a
// process) for the live views' sparklines.
type ring struct {
	buf  []uint64
	next int // where the next value goes
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]uint64, n)} }

func (r *ring) push(v uint64) {
	r.buf[r.next] = v
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// values returns a new slice of the values, oldest first.
func (r *ring) values() []uint64 {
	if !r.full {
		return append([]uint64(nil), r.buf[:r.next]...)
	}
	out := make([]uint64, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
