//go:build !race

package rawsock

const raceEnabled = false
