package main

import "io"

// runSubcommand runs a client subcommand (exec, cp, ls, cat). ok is false
// when name is not one.
func runSubcommand(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int, ok bool) {
	return 0, false
}
