//go:build race

package rawsock

// raceEnabled: the race detector changes allocation counts (sync.Pool
// drops items at random), so the allocation guards skip under it; CI runs
// them without it (.ci/run).
const raceEnabled = true
