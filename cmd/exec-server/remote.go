package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/execgo/exec-server/internal/secretenv"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/server"
)

// remoteFlags are the remote-mode flags: with --remote the server does not
// listen; it registers with an environment registry and serves relay
// streams (package remote/executor).
type remoteFlags struct {
	fs                *flag.FlagSet
	remote, env, name *string
}

func addRemoteFlags(fs *flag.FlagSet) *remoteFlags {
	return &remoteFlags{
		fs:     fs,
		remote: fs.String("remote", "", "environment registry `URL`: register there and serve through its rendezvous instead of listening (bearer token from CODEX_API_KEY; https, or http to a loopback host)"),
		env:    fs.String("environment-id", "", "environment `ID` to register as (required with --remote)"),
		name:   fs.String("name", "", "executor `NAME` (accepted for compatibility; not sent)"),
	}
}

// run serves remote mode when --remote was given; ok is false otherwise.
func (r *remoteFlags) run(ctx context.Context, srv *server.Server, logger *slog.Logger, stderr io.Writer) (code int, ok bool) {
	listenSet := false
	r.fs.Visit(func(f *flag.Flag) { listenSet = listenSet || f.Name == "listen" })
	if *r.remote == "" {
		if *r.env != "" {
			fmt.Fprintln(stderr, "exec-server: --environment-id requires --remote")
			return 2, true
		}
		return 0, false
	}
	if listenSet {
		fmt.Fprintln(stderr, "exec-server: --remote conflicts with --listen")
		return 2, true
	}
	if *r.env == "" {
		fmt.Fprintln(stderr, "exec-server: --remote requires --environment-id")
		return 2, true
	}
	defer srv.Close()
	err := executor.Run(ctx, executor.Config{
		RegistryURL:   *r.remote,
		EnvironmentID: *r.env,
		Name:          *r.name,
		Token:         remoteToken(),
		Server:        srv,
		Logger:        logger,
	})
	if err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 1, true
	}
	return 0, true
}

// remoteToken is CODEX_API_KEY, which protectSecrets moved out of the
// environment.
func remoteToken() string {
	v, _ := secretenv.LookupEnv("CODEX_API_KEY")
	return v
}
