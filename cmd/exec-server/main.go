// Command exec-server runs the exec-server: a JSON-RPC server that starts
// and controls processes and touches files for a remote agent, over a
// websocket (default ws://127.0.0.1:0) or stdio.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/server"
)

// main: every personality of this binary is in modes.go. The re-executed
// helpers come first: reexec.Main runs one and never returns when this
// process was started as one.
func main() {
	reexec.Main()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

var usage = `usage: exec-server [flags]
       exec-server ` + strings.Join(cli.Subcommands, "|") + ` [flags] ...
                    (client subcommands; see exec-server SUBCOMMAND -h)
       exec-server ` + strings.Join(operationNames(), " | ") + ` ...
                    (operations; see exec-server SUBCOMMAND -h)

Serves the exec-server protocol on a websocket (default ws://127.0.0.1:0; the
bound URL is printed as the first line of stdout) or on stdio. The websocket
listener also serves /readyz and /metrics (Prometheus text, behind the same
authentication).

Every flag may also be set from the environment: EXEC_SERVER_ then the flag's
name in upper case with '-' as '_' (EXEC_SERVER_LISTEN, EXEC_SERVER_WS_AUTH,
EXEC_SERVER_LOG_LEVEL, ...). A flag on the command line wins.

flags:
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if code, ok := runMode(args[0], args[1:], stdin, stdout, stderr); ok {
			return code
		}
	}
	fs := flag.NewFlagSet("exec-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "ws://127.0.0.1:0", "`URL` to serve: ws://IP:PORT, ws://localhost:PORT (loopback), stdio or stdio://")
	concurrent := fs.Int("concurrent-requests", 64, "requests handled at once per connection; 1 gives strict arrival order")
	ttl := fs.Duration("session-ttl", 90*time.Second, "how long a disconnected websocket session and its processes are kept for resume")
	logLevel := fs.String("log-level", "info", "log level: debug (one line per request and per process exit), info, warn or error")
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	contain := fs.Bool("contain-descendants", true, "start children through a per-session subreaper init so that no descendant (even one that called setsid) outlives its session or the server, even a SIGKILLed one; --contain-descendants=false starts them directly")
	metricsListen := fs.String("metrics-listen", "", "also serve /metrics on `ADDR` (IP:PORT or localhost:PORT, plain HTTP), behind the same authentication as the websocket listener")
	upstream := fs.String("tcp-upstream-proxy", "", "`HOST:PORT` of an HTTP proxy that every managed network proxy's outbound connection must go through (CONNECT)")
	version := fs.Bool("version", false, "print the version and exit")
	debugProfile := fs.String("debug-profile", "", "debugging: write a CPU profile (cpu.pprof) and, on exit, an allocation profile (allocs.pprof) of the server into `DIR`")
	sec := addSecurityFlags(fs)
	rem := addRemoteFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	if err := flagsFromEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "exec-server: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *concurrent < 1 {
		fmt.Fprintf(stderr, "exec-server: --concurrent-requests must be at least 1, got %d\n", *concurrent)
		return 2
	}
	if *ttl <= 0 {
		fmt.Fprintf(stderr, "exec-server: --session-ttl must be positive, got %s\n", *ttl)
		return 2
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 2
	}
	if _, _, err := server.ParseListen(*listen); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", listenError(err))
		return 2
	}
	var metricsAddr string
	if *metricsListen != "" {
		if metricsAddr, err = parseMetricsListen(*metricsListen); err != nil {
			fmt.Fprintf(stderr, "exec-server: %v\n", err)
			return 2
		}
	}
	if *upstream != "" {
		if _, _, err := net.SplitHostPort(*upstream); err != nil {
			fmt.Fprintf(stderr, "exec-server: --tcp-upstream-proxy %q: %v\n", *upstream, err)
			return 2
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewBuildInfoCollector())
	cfg := server.Config{
		Listen:             *listen,
		ConcurrentRequests: *concurrent,
		SessionTTL:         *ttl,
		Logger:             logger,
		DirectChildren:     !*contain,
		TCPUpstreamProxy:   *upstream,
		Stdin:              stdin,
		Stdout:             stdout,
		OnListen: func(url string) {
			fmt.Fprintln(stdout, url)
			if err := sdNotify("READY=1"); err != nil {
				logger.Warn("readiness notification failed", "err", err)
			}
		},
		Metrics: reg,
	}
	if err := sec.apply(*listen, &cfg); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", err)
		return 2
	}
	protectSecrets(sec, logger)
	// No Setrlimit here: Go raises its own soft RLIMIT_NOFILE at start and
	// restores the original for children only as long as the program never
	// calls Setrlimit for it (children would get the hard limit).

	if *debugProfile != "" {
		stopProfile, err := startDebugProfile(*debugProfile)
		if err != nil {
			fmt.Fprintf(stderr, "exec-server: --debug-profile: %v\n", err)
			return 1
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := server.New(cfg)
	sec.reloadOnHangup(ctx, logger)
	logger.Info("exec-server starting", "version", versionString(), "pid", os.Getpid(), "listen", *listen)
	if metricsAddr != "" {
		stopMetrics, err := serveMetrics(ctx, metricsAddr, srv.MetricsHandler(), logger)
		if err != nil {
			fmt.Fprintf(stderr, "exec-server: --metrics-listen: %v\n", err)
			return 1
		}
		defer stopMetrics()
	}
	if code, ok := rem.run(ctx, srv, logger, stdin, stderr); ok {
		return code
	}
	context.AfterFunc(ctx, func() { _ = sdNotify("STOPPING=1") })
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "exec-server: %v\n", listenError(err))
		return 1
	}
	logger.Info("exec-server stopped")
	return 0
}

// listenError names the --listen flag in a server.ListenError, with the
// reference's texts.
func listenError(err error) error {
	var le *server.ListenError
	if !errors.As(err, &le) {
		return err
	}
	if le.Unsupported {
		return fmt.Errorf("unsupported --listen URL `%s`; expected `ws://IP:PORT` or `stdio`", le.URL)
	}
	return fmt.Errorf("invalid websocket --listen URL `%s`; expected `ws://IP:PORT`", le.URL)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("invalid --log-level %q: expected debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid --log-format %q: expected text or json", format)
}
