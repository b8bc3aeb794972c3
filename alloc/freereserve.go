package alloc

// FreeReserve is the allocator's cached free memory at one moment: the
// bytes in free blocks of every pool and stream, and the largest of them.
// An allocation of more than Largest bytes needs the device (or, in
// page-mapped mode, idle pages moved), however large Bytes is.
type FreeReserve struct {
	Bytes   uint64
	Largest uint64
}

// StatsAndFreeReserve returns the statistics and the free reserve, read
// under one hold of the allocator's lock so that they agree. It walks the
// free blocks: use it for periodic reports (libvram's statistics channel),
// not on every allocation.
func (a *Allocator) StatsAndFreeReserve() (Stats, FreeReserve) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var fr FreeReserve
	for p := range a.pools {
		a.pools[p].walk(func(b *block) {
			fr.Bytes += b.size
			fr.Largest = max(fr.Largest, b.size)
		})
	}
	return a.st.export(a.maxSplit), fr
}
