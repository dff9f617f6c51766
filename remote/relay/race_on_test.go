//go:build race

package relay

// raceEnabled: the race detector changes allocation counts.
const raceEnabled = true
