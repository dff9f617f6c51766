package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
)

// The personalities of exec-server, each chosen by the first argument:
//
//   - re-executed helpers, registered with internal/reexec by the package
//     that starts them and run by reexec.Main before anything else (main):
//     the spawner (childinit.Arg) and the sandbox helper (its run, init and
//     notify modes, sandbox/confine_linux.go); TestReexecModes lists them;
//   - the operations below (operations);
//   - the client subcommands, cli.Subcommands, run by cli.Main;
//   - otherwise (no argument, or flags) the server (run, main.go).

// operation is a subcommand of the server's own (not the client's).
type operation struct {
	name string
	run  func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

var operations = []operation{
	{"healthcheck", func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return healthcheck(args, stdout, stderr)
	}},
	{"token", func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return tokenCmd(args, stdout, stderr)
	}},
	{"forward", func(args []string, stdin io.Reader, _, stderr io.Writer) int {
		return runForward(args, stdin, stderr)
	}},
}

func operationNames() []string {
	var names []string
	for _, o := range operations {
		names = append(names, o.name)
	}
	return names
}

// runMode runs the operation or client subcommand name; ok is false when
// name is neither (the server then parses the arguments as its flags).
func runMode(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int, ok bool) {
	if i := slices.IndexFunc(operations, func(o operation) bool { return o.name == name }); i >= 0 {
		return operations[i].run(args, stdin, stdout, stderr), true
	}
	if !slices.Contains(cli.Subcommands, name) {
		return 0, false
	}
	// exec forwards Ctrl-C, Ctrl-\, SIGTERM and SIGHUP to the remote
	// process itself. The file commands stop on SIGTERM or Ctrl-C through
	// their context, so that cp removes its temporary files.
	ctx := context.Background()
	if name != "exec" {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
	}
	return cli.Main(ctx, name, args, stdin, stdout, stderr), true
}
