//go:build race

package main

// raceEnabled: the server under test is this race-instrumented binary,
// several times slower; streaming tests send less.
const raceEnabled = true
