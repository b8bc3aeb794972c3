package alloc

// Asynchronous-copy internals exported for the tests.

const (
	StagingChunk = stagingChunk
	CopyPiece    = copyPiece
)

// ReapTransfers gives back what the copies from the host whose events have
// completed hold, as the next asynchronous copy would.
func (a *Allocator) ReapTransfers() error {
	a.async.mu.Lock()
	defer a.async.mu.Unlock()
	return a.reapLocked()
}
