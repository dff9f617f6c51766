package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/cmd/exec-server/cli"
	"github.com/execgo/exec-server/internal/reexec"
)

// TestReexecModes: the re-executed personalities linked into the binary
// are the spawner and the sandbox helper, and no name is taken twice
// across the re-executed helpers, the operations and the client
// subcommands.
func TestReexecModes(t *testing.T) {
	args := reexec.Args()
	if len(args) != 2 || !slices.Contains(args, childinit.Arg) || !slices.Contains(args, "--exec-server-sandbox") {
		t.Errorf("reexec.Args() = %q, want the spawner (%s) and the sandbox helper", args, childinit.Arg)
	}
	seen := map[string]bool{}
	for _, n := range slices.Concat(args, operationNames(), cli.Subcommands) {
		if seen[n] {
			t.Errorf("%q is two personalities", n)
		}
		seen[n] = true
	}
}

// TestUsageListsEveryMode: the usage text names every client subcommand
// and operation (it is built from the tables; the list had drifted when it
// was written by hand).
func TestUsageListsEveryMode(t *testing.T) {
	for _, n := range slices.Concat(operationNames(), cli.Subcommands) {
		if !strings.Contains(usage, n) {
			t.Errorf("usage does not name %q:\n%s", n, usage)
		}
	}
}
