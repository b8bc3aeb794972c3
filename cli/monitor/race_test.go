//go:build race

package monitor

// raceEnabled: the race detector changes allocation counts, so the
// zero-allocation checks are skipped under it.
const raceEnabled = true
