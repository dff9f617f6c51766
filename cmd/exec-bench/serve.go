package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
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
	traceFile := fs.String("trace", "", "write a runtime execution trace to `FILE`")
	memFile := fs.String("memprofile", "", "write a heap profile to `FILE` when told to stop, before connections close")
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
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := trace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { trace.Stop(); f.Close() }()
	}
	raiseNoFile()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		// The heap profile is taken while every connection is still up:
		// that is what the idle-connection workload wants to see.
		select {
		case <-sigs:
			if *memFile != "" {
				if f, err := os.Create(*memFile); err == nil {
					_ = pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
				if f, err := os.Create(*memFile + ".goroutines"); err == nil {
					_ = pprof.Lookup("goroutine").WriteTo(f, 1)
					f.Close()
				}
			}
			cancel()
		case <-ctx.Done():
		}
	}()
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
