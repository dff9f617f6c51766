// Command exec-relay is a self-hostable environment registry and rendezvous
// for exec-server remote mode (package relay). It prints its base URL as the
// first line of stdout and logs to stderr. With --nats-url it is one node of
// a fleet: state in NATS JetStream KV, frames between nodes over NATS
// (docs/remote.md, "Scaling out").
package main

import (
	"bytes"
	"context"
	"crypto/tls"
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
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/execgo/exec-server/internal/rawsock"
	"github.com/execgo/exec-server/remote/relay"
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
	directKeys := fs.String("direct-key-file", "", "`FILE` of AWS SigV4 keys (ACCESS_KEY_ID SECRET per line, mode 600) accepted from executors of the direct transport (--remote-transport direct --aws-sigv4)")
	insecure := fs.Bool("insecure-no-auth", false, "accept any bearer token; allowed only on a loopback --listen")
	publicURL := fs.String("public-url", "", "base `URL` that minted rendezvous URLs point at (default: the Host of each request)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	secretFile := fs.String("url-secret-file", "", "`FILE` holding the secret (≥ 32 bytes) that signs rendezvous URLs; every node of a fleet needs the same (default: random per process)")
	natsURL := fs.String("nats-url", "", "NATS server `URLs` (comma-separated): run as a fleet node, state in JetStream KV, frames between nodes over NATS")
	natsCreds := fs.String("nats-creds", "", "NATS credentials `FILE` (JWT and NKey seed)")
	nodeName := fs.String("node-name", "", "this node's unique `NAME` in the fleet ([A-Za-z0-9_]); required with --nats-url")
	peerListen := fs.String("peer-listen", "", "with --nats-url: `ADDR` (host:port) to listen on for peer links: frames between nodes then go on direct TCP links (authenticated with the URL secret) instead of through NATS; empty: NATS only")
	peerAdvertise := fs.String("peer-advertise", "", "with --peer-listen: the `ADDR` other nodes dial to reach it (default: the listener's address; required when --peer-listen is a wildcard)")
	natsReplicas := fs.Int("nats-replicas", 1, "replicas of the JetStream KV buckets (3 on a 3-server NATS cluster)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	tlsKey := fs.String("tls-key", "", "private key `FILE` (PEM) of --tls-cert")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, versionString())
		return 0
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
	if *directKeys != "" {
		if opts.DirectKeys, err = relay.LoadDirectKeys(*directKeys); err != nil {
			fmt.Fprintf(stderr, "exec-relay: --direct-key-file: %v\n", err)
			return 2
		}
	}
	if *secretFile != "" {
		b, err := os.ReadFile(*secretFile)
		if err != nil {
			fmt.Fprintf(stderr, "exec-relay: --url-secret-file: %v\n", err)
			return 2
		}
		opts.URLSecret = bytes.TrimRight(b, "\r\n")
		if len(opts.URLSecret) < 32 {
			fmt.Fprintf(stderr, "exec-relay: --url-secret-file %s: the secret must be at least 32 bytes\n", *secretFile)
			return 2
		}
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		fmt.Fprintln(stderr, "exec-relay: --tls-cert and --tls-key go together")
		return 2
	}
	var tlsConf *tls.Config
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			fmt.Fprintf(stderr, "exec-relay: --tls-cert/--tls-key: %v\n", err)
			return 2
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if *natsURL == "" {
		if *natsCreds != "" || *nodeName != "" || *peerListen != "" || *peerAdvertise != "" {
			fmt.Fprintln(stderr, "exec-relay: --nats-creds, --node-name and --peer-listen need --nats-url")
			return 2
		}
	} else {
		if *nodeName == "" {
			fmt.Fprintln(stderr, "exec-relay: --node-name is required with --nats-url")
			return 2
		}
		if *secretFile == "" {
			fmt.Fprintln(stderr, "exec-relay: --url-secret-file is required with --nats-url (every node must verify the others' URLs)")
			return 2
		}
		nc, err := connectNATS(*natsURL, *natsCreds, *nodeName, log)
		if err != nil {
			fmt.Fprintf(stderr, "exec-relay: --nats-url: %v\n", err)
			return 1
		}
		defer nc.Close()
		kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
		store, err := relay.NewKVStore(kctx, nc, relay.KVStoreOptions{Replicas: *natsReplicas})
		kcancel()
		if err != nil {
			fmt.Fprintf(stderr, "exec-relay: %v\n", err)
			return 1
		}
		opts.NATS, opts.NodeName, opts.Store = nc, *nodeName, store
		opts.PeerListen, opts.PeerAdvertise = *peerListen, *peerAdvertise
		if *peerAdvertise != "" && *peerListen == "" {
			fmt.Fprintln(stderr, "exec-relay: --peer-advertise needs --peer-listen")
			return 2
		}
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
	if tlsConf != nil {
		// Raw sockets under TLS, as the relay's plain sockets get at
		// the hijack (internal/rawsock).
		l = tls.NewListener(rawsock.Listener(l), tlsConf)
		base = "https://" + strings.TrimPrefix(base, "http://")
	}
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

// connectNATS connects for good: reconnects forever (the fleet's /readyz
// says 503 meanwhile) with a buffer for what is published while away.
func connectNATS(urls, creds, node string, log *slog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("exec-relay " + node),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats: disconnected", "err", err) }),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats: reconnected", "server", c.ConnectedUrlRedacted()) }),
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	return nats.Connect(urls, opts...)
}

// versionString is the module version and VCS revision the binary was
// built from, as the Go toolchain recorded them.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "exec-relay (no build info)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	out := "exec-relay " + v
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			out += " revision " + s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		out += "+dirty"
	}
	return out + " " + bi.GoVersion
}
