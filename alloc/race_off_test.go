//go:build !race

package alloc_test

// raceOn is true in a -race build, where the long runs are shortened.
const raceOn = false
