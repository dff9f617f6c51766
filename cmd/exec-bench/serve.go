package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/execgo/exec-server/server"
)

// serve runs our server in this process, as cmd/exec-server does with its
// defaults, with a CPU profile written when it stops (SIGTERM, SIGINT or
// stdin EOF). It exists so --pprof can profile our side of every
// workload without touching the server's own command.
func serve(args []string) int {
	fs := flag.NewFlagSet("exec-bench serve", flag.ContinueOnError)
	listen := fs.String("listen", "ws://127.0.0.1:0", "ws://IP:PORT or stdio")
	cpu := fs.String("cpuprofile", "", "write a CPU profile to `FILE`")
	maxSessions := fs.Int("max-sessions", 0, "sessions per server (0: the server's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpu != "" {
		stop, err := startProfile(*cpu)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
	}
	raiseNoFile()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	cfg := server.Config{
		Listen:   *listen,
		Stdin:    os.Stdin,
		Stdout:   os.Stdout,
		OnListen: func(url string) { fmt.Fprintln(os.Stdout, url) },

		MaxSessions: *maxSessions,
	}
	if err := server.Run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "exec-bench serve: %v\n", err)
		return 1
	}
	return 0
}

func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
