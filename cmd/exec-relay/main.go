// Command exec-relay is a self-hostable environment registry and rendezvous
// for exec-server remote mode (package relay). It prints its base URL as the
// first line of stdout and logs to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/execgo/exec-server/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends (SIGINT or SIGTERM in main).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "`IP:PORT` to serve HTTP on (registry, rendezvous websockets, /readyz)")
	execTokens := fs.String("executor-token-file", "", "`FILE` of bearer tokens accepted on register and validate (executors' CODEX_API_KEY), one per line")
	harnessTokens := fs.String("harness-token-file", "", "`FILE` of bearer tokens accepted on connect (harnesses' CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN), one per line")
	insecure := fs.Bool("insecure-no-auth", false, "accept any bearer token; allowed only on a loopback --listen")
	publicURL := fs.String("public-url", "", "base `URL` that minted rendezvous URLs point at (default: the Host of each request)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "exec-relay: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "exec-relay: invalid --log-level %q\n", *logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))

	ap, err := netip.ParseAddrPort(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "exec-relay: --listen must be IP:PORT: %v\n", err)
		return 2
	}
	opts := relay.Options{Logger: log, PublicURL: *publicURL}
	if *execTokens != "" {
		if opts.ExecutorTokens, err = relay.LoadTokens(*execTokens); err != nil {
			fmt.Fprintf(stderr, "exec-relay: --executor-token-file: %v\n", err)
			return 2
		}
	}
	if *harnessTokens != "" {
		if opts.HarnessTokens, err = relay.LoadTokens(*harnessTokens); err != nil {
			fmt.Fprintf(stderr, "exec-relay: --harness-token-file: %v\n", err)
			return 2
		}
	}
	if opts.ExecutorTokens == nil || opts.HarnessTokens == nil {
		if !*insecure {
			fmt.Fprintln(stderr, "exec-relay: --executor-token-file and --harness-token-file are required (or --insecure-no-auth on a loopback --listen)")
			return 2
		}
		if !ap.Addr().IsLoopback() {
			fmt.Fprintln(stderr, "exec-relay: --insecure-no-auth is allowed only on a loopback --listen")
			return 2
		}
		opts.InsecureNoAuth = true
		log.Warn("no authentication: any bearer token is accepted")
	} else if *insecure {
		fmt.Fprintln(stderr, "exec-relay: --insecure-no-auth conflicts with the token files")
		return 2
	}
	srv, err := relay.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "exec-relay: %v\n", err)
		return 2
	}
	l, err := net.Listen("tcp", ap.String())
	if err != nil {
		fmt.Fprintf(stderr, "exec-relay: %v\n", err)
		return 1
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	base := "http://" + l.Addr().String()
	fmt.Fprintln(stdout, base)
	log.Info("listening", "url", base)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		fmt.Fprintf(stderr, "exec-relay: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Hijacked websockets are not tracked by Shutdown: the relay closes
	// them itself.
	srv.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	<-errc
	return 0
}
