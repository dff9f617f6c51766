package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/auth"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/server"
)

// Defaults of the limit flags; they match server.Config's zero-value
// defaults and jsonrpc.DefaultLimits (see docs/security.md).
const (
	defaultMaxMessageBytes = 64 << 20
	defaultMaxFileBytes    = 512 << 20
	defaultMaxIncoming     = 1 << 30
	defaultMaxRetained     = 1 << 30
	defaultMaxStdin        = 256 << 20
	defaultMaxProcesses    = 4096
	defaultMaxHandles      = 128
	defaultMaxSessions     = 10240
	defaultMaxConnections  = 10240

	// Bounds on what the limit flags accept: a typo must not switch a
	// limit off (a message limit of 1 TiB is no limit at all).
	minMessageBytes = 1 << 10
	maxMessageBytes = 4 << 30
	maxJSONDepth    = 4096
	maxJSONValues   = 1 << 26
	maxClockSkew    = 1 << 31 // seconds
)

// securityFlags holds the authentication, TLS and limit flags.
type securityFlags struct {
	fs *flag.FlagSet

	wsAuth           string
	tokenFiles       tokenFilesFlag
	tokenSHA256      string
	sharedSecretFile string
	issuer           string
	audience         audienceFlag
	clockSkew        skewFlag
	insecureNoAuth   bool
	tlsCert, tlsKey  string

	authn *auth.Authenticator             // reloaded on SIGHUP (reload.go)
	cert  atomic.Pointer[tls.Certificate] // the served certificate, reloaded on SIGHUP

	maxMessageBytes int64
	maxFileBytes    int64
	maxIncoming     int64
	maxRetained     int64
	maxStdin        int64
	maxProcesses    int
	maxHandles      int
	maxSessions     int
	maxConnections  int
	maxQueueBytes   int
	maxLongPolls    int
	messageStall    time.Duration
	maxJSONDepth    int
	maxJSONValues   int
}

// addSecurityFlags registers --ws-auth, --ws-token-file, --ws-token-sha256,
// --ws-shared-secret-file, --ws-issuer, --ws-audience (repeatable, or a JSON
// array), --ws-max-clock-skew-seconds, --insecure-no-auth, --tls-cert,
// --tls-key, and the limit flags (--max-message-bytes, --max-file-bytes,
// --max-incoming-bytes, --max-retained-bytes, --max-stdin-bytes, --max-processes, --max-handles, --max-sessions, --max-connections,
// --max-queue-bytes, --max-long-polls, --message-stall-timeout,
// --max-json-depth, --max-json-values).
func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	s := &securityFlags{fs: fs}
	fs.StringVar(&s.wsAuth, "ws-auth", "", "websocket authentication `MODE`: capability-token or signed-bearer-token")
	fs.Var(&s.tokenFiles, "ws-token-file", "`PATH` of a capability-token file (contents trimmed); repeatable: each file's token is accepted (rotation); read again on SIGHUP")
	fs.StringVar(&s.tokenSHA256, "ws-token-sha256", "", "hex-encoded SHA-256 `DIGEST` of the capability token")
	fs.StringVar(&s.sharedSecretFile, "ws-shared-secret-file", "", "`PATH` of the HS256 secret (at least 32 bytes) for signed JWT bearer tokens")
	fs.StringVar(&s.issuer, "ws-issuer", "", "expected `ISSUER` (iss) of signed JWT bearer tokens")
	fs.Var(&s.audience, "ws-audience", "expected `AUDIENCE` (aud) of signed JWT bearer tokens; repeatable, or a JSON array; a token must name one of them")
	fs.Var(&s.clockSkew, "ws-max-clock-skew-seconds", "leeway in `SECONDS` on exp and nbf of signed JWT bearer tokens (default 30)")
	fs.BoolVar(&s.insecureNoAuth, "insecure-no-auth", false, "allow a non-loopback --listen address without --ws-auth: anyone who reaches it can run any command")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "`PATH` of a PEM certificate chain: serve wss:// (and https /readyz); needs --tls-key")
	fs.StringVar(&s.tlsKey, "tls-key", "", "`PATH` of the PEM private key of --tls-cert")
	fs.Int64Var(&s.maxMessageBytes, "max-message-bytes", defaultMaxMessageBytes, "largest incoming JSON-RPC message in `BYTES`")
	fs.Int64Var(&s.maxFileBytes, "max-file-bytes", defaultMaxFileBytes, "largest fs/readFile or fs/writeFile in `BYTES`")
	fs.Int64Var(&s.maxIncoming, "max-incoming-bytes", defaultMaxIncoming, "`BYTES` of incoming websocket messages being read or handled, all connections together")
	fs.Int64Var(&s.maxRetained, "max-retained-bytes", defaultMaxRetained, "`BYTES` of process output retained for process/read, all sessions together")
	fs.Int64Var(&s.maxStdin, "max-stdin-bytes", defaultMaxStdin, "`BYTES` of stdin queued for processes, all sessions together")
	fs.IntVar(&s.maxProcesses, "max-processes", defaultMaxProcesses, "live processes per session")
	fs.IntVar(&s.maxHandles, "max-handles", defaultMaxHandles, "open fs handles per connection")
	fs.IntVar(&s.maxSessions, "max-sessions", defaultMaxSessions, "sessions per server")
	fs.IntVar(&s.maxConnections, "max-connections", defaultMaxConnections, "concurrent websocket connections")
	fs.IntVar(&s.maxQueueBytes, "max-queue-bytes", 8<<20, "`BYTES` queued for sending on one connection before producers wait (back-pressure)")
	fs.IntVar(&s.maxLongPolls, "max-long-polls", 1024, "pending process/read long polls per connection")
	fs.DurationVar(&s.messageStall, "message-stall-timeout", 60*time.Second, "close a websocket connection whose incoming message makes no progress for this `DURATION`")
	fs.IntVar(&s.maxJSONDepth, "max-json-depth", jsonrpc.DefaultLimits.MaxDepth, "nesting depth of arrays and objects in one message")
	fs.IntVar(&s.maxJSONValues, "max-json-values", jsonrpc.DefaultLimits.MaxValues, "JSON values in one message")
	return s
}

// apply validates (listen: the parsed --listen value, "stdio" or
// "ws://IP:PORT") and fills cfg; errors are one line.
func (s *securityFlags) apply(listen string, cfg *server.Config) error {
	set := map[string]bool{}
	if s.fs != nil {
		s.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}

	// Authentication first, then the listener it needs: the reference's
	// order of startup errors.
	acfg := auth.Config{
		Mode:             s.wsAuth,
		TokenFiles:       s.tokenFiles,
		TokenSHA256:      s.tokenSHA256,
		SharedSecretFile: s.sharedSecretFile,
		Issuer:           s.issuer,
		Audience:         s.audience,
	}
	if set["ws-max-clock-skew-seconds"] {
		acfg.MaxClockSkew = time.Duration(s.clockSkew) * time.Second
		if s.clockSkew == 0 {
			acfg.MaxClockSkew = -1 // explicitly no leeway
		}
	}
	if set["ws-token-file"] && slices.Contains(s.tokenFiles, "") {
		return errors.New("a value is required for '--ws-token-file <PATH>' but none was supplied")
	}
	if set["ws-shared-secret-file"] && s.sharedSecretFile == "" {
		return errors.New("a value is required for '--ws-shared-secret-file <PATH>' but none was supplied")
	}
	if set["ws-token-sha256"] && s.tokenSHA256 == "" {
		acfg.TokenSHA256 = "-" // present but empty: reported as not a digest
	}
	authn, err := auth.NewAuthenticator(acfg)
	if err != nil {
		return err
	}
	var check func(*http.Request) error
	if authn != nil {
		check = authn.Check
	}
	s.authn = authn

	stdio, addr, err := server.ParseListen(listen)
	if err != nil {
		return listenError(err)
	}
	if stdio && check != nil {
		return errors.New("WebSocket auth requires a WebSocket listener, not stdio")
	}

	var tlsConfig *tls.Config
	switch {
	case s.tlsCert == "" && s.tlsKey == "":
	case s.tlsCert == "" || s.tlsKey == "":
		return errors.New("--tls-cert and --tls-key must be given together")
	case stdio:
		return errors.New("TLS requires a WebSocket listener, not stdio")
	default:
		cert, err := tls.LoadX509KeyPair(s.tlsCert, s.tlsKey)
		if err != nil {
			// The loader's messages describe PEM structure, never key bytes.
			return fmt.Errorf("cannot load --tls-cert %s / --tls-key %s: %v", s.tlsCert, s.tlsKey, err)
		}
		s.cert.Store(&cert)
		tlsConfig = &tls.Config{
			// The current certificate, replaced on SIGHUP for new
			// handshakes only.
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil },
			MinVersion:     tls.VersionTLS12,
		}
	}

	if s.insecureNoAuth && check != nil {
		return errors.New("--insecure-no-auth contradicts --ws-auth: give one or the other")
	}
	if !stdio && check == nil && !s.insecureNoAuth {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fmt.Errorf("invalid websocket --listen URL `%s`; expected `ws://IP:PORT`", listen)
		}
		if !ap.Addr().Unmap().IsLoopback() {
			return fmt.Errorf("refusing to listen on %s without authentication: anyone who can reach it could run any command as this user; "+
				"use --ws-auth capability-token or signed-bearer-token (see docs/security.md), or --insecure-no-auth to accept the risk", listen)
		}
	}

	if err := s.checkLimits(); err != nil {
		return err
	}
	cfg.Authenticate = check
	if authn != nil {
		cfg.Identify = func(r *http.Request) string {
			id, _ := authn.Identify(r)
			return id
		}
	}
	cfg.TLSConfig = tlsConfig
	cfg.MaxMessageBytes = s.maxMessageBytes
	cfg.MaxFileBytes = s.maxFileBytes
	cfg.MaxIncomingBytes = s.maxIncoming
	cfg.MaxRetainedBytes = s.maxRetained
	cfg.MaxStdinBytes = s.maxStdin
	cfg.MaxProcesses = s.maxProcesses
	cfg.MaxHandles = s.maxHandles
	cfg.MaxSessions = s.maxSessions
	cfg.MaxConnections = s.maxConnections
	cfg.MaxQueueBytes = s.maxQueueBytes
	cfg.MaxLongPolls = s.maxLongPolls
	cfg.MessageStallTimeout = s.messageStall
	// The decoder's limits are process-wide; they are set here, before the
	// server starts, and never change afterwards.
	jsonrpc.DefaultLimits = jsonrpc.Limits{MaxDepth: s.maxJSONDepth, MaxValues: s.maxJSONValues}
	return nil
}

func (s *securityFlags) checkLimits() error {
	if s.maxMessageBytes < minMessageBytes || s.maxMessageBytes > maxMessageBytes {
		return fmt.Errorf("--max-message-bytes must be between %d and %d, got %d", minMessageBytes, int64(maxMessageBytes), s.maxMessageBytes)
	}
	if s.maxFileBytes < 1 {
		return fmt.Errorf("--max-file-bytes must be at least 1, got %d", s.maxFileBytes)
	}
	if s.maxIncoming < s.maxMessageBytes {
		return fmt.Errorf("--max-incoming-bytes must be at least --max-message-bytes (%d), got %d", s.maxMessageBytes, s.maxIncoming)
	}
	for _, l := range []struct {
		name string
		v    int64
	}{{"max-retained-bytes", s.maxRetained}, {"max-stdin-bytes", s.maxStdin}} {
		if l.v < 1<<20 {
			return fmt.Errorf("--%s must be at least %d, got %d", l.name, 1<<20, l.v)
		}
	}
	ints := []struct {
		name     string
		v, lo, h int
	}{
		{"max-processes", s.maxProcesses, 1, 1 << 20},
		{"max-handles", s.maxHandles, 1, 1 << 20},
		{"max-sessions", s.maxSessions, 1, 1 << 20},
		{"max-connections", s.maxConnections, 1, 1 << 20},
		{"max-queue-bytes", s.maxQueueBytes, 64 << 10, 1 << 30},
		{"max-long-polls", s.maxLongPolls, 1, 1 << 20},
		{"max-json-depth", s.maxJSONDepth, 2, maxJSONDepth},
		{"max-json-values", s.maxJSONValues, 16, maxJSONValues},
	}
	if s.messageStall <= 0 {
		return fmt.Errorf("--message-stall-timeout must be positive, got %s", s.messageStall)
	}
	for _, l := range ints {
		if l.v < l.lo || l.v > l.h {
			return fmt.Errorf("--%s must be between %d and %d, got %d", l.name, l.lo, l.h, l.v)
		}
	}
	return nil
}

// audienceFlag is --ws-audience: repeatable, and a value that starts with
// "[" is a JSON array of audiences.
type audienceFlag []string

func (a *audienceFlag) String() string { return strings.Join(*a, ",") }

func (a *audienceFlag) Set(v string) error {
	if strings.HasPrefix(strings.TrimSpace(v), "[") {
		var list []string
		if err := json.Unmarshal([]byte(v), &list); err != nil {
			return errors.New("expected an audience or a JSON array of strings")
		}
		for _, s := range list {
			if s == "" {
				return errors.New("an audience must not be empty")
			}
		}
		*a = append(*a, list...)
		return nil
	}
	if v == "" {
		return errors.New("an audience must not be empty")
	}
	*a = append(*a, v)
	return nil
}

// skewFlag is --ws-max-clock-skew-seconds: a whole number of seconds.
type skewFlag uint64

func (k *skewFlag) String() string { return strconv.FormatUint(uint64(*k), 10) }

func (k *skewFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return errors.New("expected a whole number of seconds")
	}
	if n > maxClockSkew {
		return fmt.Errorf("at most %d seconds", uint64(maxClockSkew))
	}
	*k = skewFlag(n)
	return nil
}

// tokenFilesFlag is the repeatable --ws-token-file.
type tokenFilesFlag []string

func (t *tokenFilesFlag) String() string { return strings.Join(*t, ",") }

func (t *tokenFilesFlag) Set(v string) error {
	*t = append(*t, v)
	return nil
}
