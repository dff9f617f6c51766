package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

const forwardUsage = `usage: exec-server forward --remote URL --environment-id ID --connect WS_URL [flags]

Registers with the environment registry as --remote does, and bridges each
authenticated relay stream to a new websocket connection to an existing
exec-server at --connect (ws://, or wss://), one JSON-RPC message per
websocket message each way.

flags:
`

// forwardMaxMessage bounds one message from the destination, as the
// reference (64 MiB).
const forwardMaxMessage = 64 << 20

// runForward is `exec-server forward`.
func runForward(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec-server forward", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	connect := fs.String("connect", "", "destination exec-server websocket `URL` (ws:// or wss://)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	rem := addRemoteFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, forwardUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "exec-server forward: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "exec-server forward: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	usage := func(msg string) int {
		fmt.Fprintf(stderr, "exec-server forward: %s\n", msg)
		return 2
	}
	switch {
	case *rem.remote == "" || *rem.env == "" || *connect == "":
		return usage("--remote, --environment-id and --connect are required")
	case *rem.chatgptStdin:
		// Not among the reference's forward flags.
		return usage("--chatgpt-token-stdin cannot be used with forward")
	}
	if err := rem.check(os.LookupEnv); err != nil {
		var ue usageError
		if !errors.As(err, &ue) {
			fmt.Fprintf(stderr, "exec-server forward: %v\n", err)
			return 1
		}
		return usage(err.Error())
	}
	if *rem.transport == "direct" {
		// As the reference (exit 1).
		fmt.Fprintln(stderr, "exec-server forward: direct exec-server transport does not support forwarding")
		return 1
	}
	if u, err := url.Parse(*connect); err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
		return usage(fmt.Sprintf("invalid --connect URL %q: expected ws://HOST:PORT or wss://…", *connect))
	}
	logger, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return usage(err.Error())
	}
	protectSecrets(nil, logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger.Info("exec-server forward starting", "version", versionString(), "pid", os.Getpid(), "connect", *connect)
	code, _ := rem.serve(ctx, forwarder{url: *connect, log: logger}, logger, stdin, stderr)
	return code
}

// forwarder serves each relay stream by bridging it to a new websocket
// connection to the destination exec-server.
type forwarder struct {
	url string
	log *slog.Logger
}

func (f forwarder) ServeStream(ctx context.Context, st jsonrpc.Stream) {
	defer st.Close()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ws, err := transport.DialWebSocket(dctx, f.url, transport.DialOptions{MaxMessageBytes: forwardMaxMessage})
	cancel()
	if err != nil {
		f.log.Warn("forward: cannot reach the destination exec-server; the stream ends", "err", err)
		return
	}
	defer ws.Close()
	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	back := make(chan struct{})
	go func() {
		// Destination to harness. When the destination closes, what it
		// sent has been written to the stream; the stream then ends.
		defer close(back)
		defer cancel()
		for {
			msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if st.Write(ctx, msg, false) != nil {
				return
			}
		}
	}()
	for {
		msg, err := st.Read(ctx)
		if err != nil {
			break
		}
		if ws.Write(ctx, msg, false) != nil {
			break
		}
	}
	cancel()
	<-back
}
