//go:build race

package fsys

// raceEnabled: the race detector slows 64 MiB tests tenfold and changes
// allocation counts, so the memory-bound tests skip under it.
const raceEnabled = true
