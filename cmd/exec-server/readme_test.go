package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// README's flag tables and --help stay in step: every server flag of
// `exec-server -h` has a row in README's server flag table and every row
// names a flag that exists; the same for the client connection flags of
// `exec-server exec -h` and README's connection flag table.
func TestReadmeFlagTables(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	table := func(header string) map[string]bool {
		t.Helper()
		i := strings.Index(string(readme), header)
		if i < 0 {
			t.Fatalf("README has no table starting %q", header)
		}
		rest := string(readme[i:])
		if end := strings.Index(rest, "\n\n"); end > 0 {
			rest = rest[:end]
		}
		rows := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)").FindAllStringSubmatch(rest, -1) {
			rows[m[1]] = true
		}
		return rows
	}
	helpFlags := func(args []string, re string, from string) map[string]bool {
		t.Helper()
		out, err := serverCommand(args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		flags := map[string]bool{}
		on := from == ""
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(string(out), -1) {
			if m[1] == from {
				on = true
			}
			if on {
				flags[m[1]] = true
			}
		}
		return flags
	}
	compare := func(what string, help, rows map[string]bool) {
		t.Helper()
		var missing, stale []string
		for f := range help {
			if !rows[f] {
				missing = append(missing, f)
			}
		}
		for f := range rows {
			if !help[f] {
				stale = append(stale, f)
			}
		}
		sort.Strings(missing)
		sort.Strings(stale)
		if len(missing) > 0 || len(stale) > 0 {
			t.Errorf("%s: flags missing from README: %v; README rows for flags that do not exist: %v", what, missing, stale)
		}
	}
	compare("server flags", helpFlags([]string{"-h"}, `(?m)^  -([a-z0-9-]+)`, ""), table("| flag | default | meaning |"))
	compare("client connection flags", helpFlags([]string{"exec", "-h"}, `(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`, "url"), table("| connection flag (every client subcommand) | meaning |"))
}
