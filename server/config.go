// Package server is the exec-server as a library: Run serves the protocol
// on a websocket listener or on stdio until its context ends. cmd/exec-server
// is a thin wrapper around it.
package server

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a server. The zero value of every field is a sensible
// default, documented on the field.
type Config struct {
	// Listen is "ws://IP:PORT", "ws://localhost:PORT" (bound to
	// 127.0.0.1), "stdio" or "stdio://". Default "ws://127.0.0.1:0".
	Listen string
	// ConcurrentRequests bounds the requests handled at once per
	// connection; 1 gives strict arrival order. Default 64.
	ConcurrentRequests int
	// MaxLongPolls bounds the process/read requests with waitMs that one
	// connection may have waiting at once. They wait off the handler pool
	// (ConcurrentRequests), so they never delay other requests; past the
	// bound a long poll is refused with -32600. Default 1024.
	MaxLongPolls int
	// MaxQueueBytes bounds the bytes of one connection's outgoing queue
	// (replies and pushed process events); past it the producer waits: a
	// process's output stops being read until the client reads again.
	// Default 8 MiB.
	MaxQueueBytes int
	// SessionTTL is how long a detached websocket session (and its
	// processes) outlives its connection. Default 90s.
	SessionTTL time.Duration
	// MaxMessageBytes bounds one incoming message. Default 64 MiB.
	MaxMessageBytes int64
	// MaxIncomingBytes bounds the bytes of incoming websocket messages
	// being read or handled, all connections together; a message that
	// cannot get its bytes within 10s is refused with an error reply.
	// Default 1 GiB.
	MaxIncomingBytes int64
	// MaxRetainedBytes bounds the process output retained for
	// process/read, all sessions together: past it, a process's oldest
	// retained chunks go first. Default 1 GiB.
	MaxRetainedBytes int64
	// MaxStdinBytes bounds stdin queued for processes that have not read
	// it yet, all sessions together: past it, process/write fails.
	// Default 256 MiB.
	MaxStdinBytes int64
	// MaxFileBytes bounds fs/readFile and fs/writeFile. Default 512 MiB.
	MaxFileBytes int64
	// MaxHandles bounds open fs handles per connection. Default 128.
	MaxHandles int
	// MaxProcesses bounds live processes per session. Default 4096.
	MaxProcesses int
	// MaxSessions bounds sessions per server. Default 10240 (one per possible connection).
	MaxSessions int
	// MaxConnections bounds concurrent websocket connections. Default 10240.
	MaxConnections int
	// DirectChildren starts children directly instead of through each
	// session's subreaper init, which makes sure that no descendant
	// outlives its session or the server, even a SIGKILLed one (see
	// process.Options; the init needs main to call childinit.MaybeMain).
	DirectChildren bool
	// MessageStallTimeout closes a websocket connection whose incoming
	// message, once begun, makes no progress for this long: a peer that
	// stops in the middle of a frame holds nothing for ever. Default 60s;
	// negative: never.
	MessageStallTimeout time.Duration
	// InitTimeout closes a websocket connection that has not completed
	// initialize within it. Default 30s.
	InitTimeout time.Duration
	// TCPUpstreamProxy (host:port), when set, is an HTTP proxy that every
	// managed network proxy's outbound connection must go through by
	// CONNECT (the reference's --tcp-upstream-proxy).
	TCPUpstreamProxy string
	// MaskUpstreamRoots, when set, replaces the system's roots for
	// verifying the upstreams of connections the managed proxy intercepts
	// for credential masking (tests: a local TLS server's own CA).
	MaskUpstreamRoots *x509.CertPool
	// Logger receives structured logs; default discards.
	Logger *slog.Logger
	// Stdin and Stdout carry the stdio transport (default os.Stdin/os.Stdout).
	Stdin  io.Reader
	Stdout io.Writer
	// OnListen is called once with the bound "ws://IP:PORT" (or
	// "wss://...") URL when a websocket listener is up.
	OnListen func(url string)
	// Authenticate, when set, checks every websocket upgrade request (not
	// /readyz). A non-nil error refuses it with 401 and the error's text
	// as a plain-text body.
	Authenticate func(r *http.Request) error
	// AllowSandboxPeers turns off the refusal (403) of HTTP requests
	// (websocket upgrades, /metrics, /readyz) whose TCP peer is a process
	// inside one of this server's sandboxes (peer.go). Only for an
	// embedder that confines its sandboxes' network some other way.
	AllowSandboxPeers bool
	// Identify, when set, names the caller of an accepted upgrade (a token
	// name, a JWT subject; never a secret) for the audit log's "who".
	Identify func(r *http.Request) string
	// TLSConfig, when set, serves wss:// and https /readyz.
	TLSConfig *tls.Config
	// Metrics, when set, receives the server's metrics (connections,
	// sessions, processes, requests, output, budgets; see README,
	// "Operating"), served in the Prometheus text format as /metrics on
	// the websocket listener, behind Authenticate, and by MetricsHandler.
	// Give each registry to one server only.
	Metrics *prometheus.Registry
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Listen == "" {
		d.Listen = "ws://127.0.0.1:0"
	}
	if d.ConcurrentRequests <= 0 {
		d.ConcurrentRequests = 64
	}
	if d.MaxLongPolls <= 0 {
		d.MaxLongPolls = 1024
	}
	if d.MaxQueueBytes <= 0 {
		d.MaxQueueBytes = 8 << 20
	}
	if d.SessionTTL <= 0 {
		d.SessionTTL = 90 * time.Second
	}
	if d.MaxMessageBytes <= 0 {
		d.MaxMessageBytes = 64 << 20
	}
	if d.MaxIncomingBytes <= 0 {
		d.MaxIncomingBytes = 1 << 30
	}
	if d.MaxRetainedBytes <= 0 {
		d.MaxRetainedBytes = 1 << 30
	}
	if d.MaxStdinBytes <= 0 {
		d.MaxStdinBytes = 256 << 20
	}
	if d.MaxFileBytes <= 0 {
		d.MaxFileBytes = 512 << 20
	}
	if d.MaxHandles <= 0 {
		d.MaxHandles = 128
	}
	if d.MaxProcesses <= 0 {
		d.MaxProcesses = 4096
	}
	if d.MaxSessions <= 0 {
		d.MaxSessions = 10240
	}
	if d.MaxConnections <= 0 {
		d.MaxConnections = 10240
	}
	if d.InitTimeout <= 0 {
		d.InitTimeout = 30 * time.Second
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}
