// Package reexec is the registry of this binary's re-executed personalities
// (the moby/docker reexec pattern): a package that starts its own binary
// again as a helper registers, in an init function, the first argument that
// selects the helper and the function that runs it; main calls Main first
// thing. It imports nothing of the project.
//
// Main also arms the guard: a package re-executes the binary only when
// Ready reports true, because in a program that embeds the server without
// calling Main, re-executing /proc/self/exe would run that program's own
// main again instead of the helper.
package reexec

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
)

var (
	mu    sync.Mutex
	modes = map[string]func(){}
	ready atomic.Bool
)

// Register makes arg (os.Args[1] of the re-executed binary) run fn instead
// of main. fn must not return: it ends the process. Register panics when
// arg is registered twice. Call it from an init function.
func Register(arg string, fn func()) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := modes[arg]; dup {
		panic("reexec: " + arg + " registered twice")
	}
	modes[arg] = fn
}

// Main runs the personality os.Args[1] names, and never returns, when it is
// a registered one; otherwise it returns at once, and from then on Ready
// reports true. Call it first in main (and in the TestMain of a test binary
// whose code re-executes itself).
func Main() {
	if len(os.Args) > 1 {
		mu.Lock()
		fn := modes[os.Args[1]]
		mu.Unlock()
		if fn != nil {
			fn()
			fmt.Fprintln(os.Stderr, "exec-server: re-executed mode "+os.Args[1]+" returned")
			os.Exit(125)
		}
	}
	ready.Store(true)
}

// Ready reports whether Main has run (and returned): re-executing this
// binary with a registered argument then reaches the registered function.
func Ready() bool { return ready.Load() }

// Args returns the registered arguments, sorted.
func Args() []string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for a := range modes {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}
