package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/execgo/exec-server/internal/cli"
)

// runSubcommand runs a client subcommand (exec, cp, ls, cat, ps, watch). ok is false
// when name is not one.
func runSubcommand(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int, ok bool) {
	switch name {
	case "healthcheck":
		return healthcheck(args, stdout, stderr), true
	case "token":
		return tokenCmd(args, stdout, stderr), true
	default:
		if !slices.Contains(cli.Subcommands, name) {
			return 0, false
		}
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
