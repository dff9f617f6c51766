package relay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Embedded NATS, for measuring only (go test -bench Fleet
// ./remote/relay -fleetnats=embed|embed-tcp): each node runs its own NATS server in
// process, reached over an in-process pipe (nats.InProcessServer) or its
// loopback port, the nodes' servers clustered by routes authenticated
// with a password derived from the URL secret. It was an exec-relay mode
// (--nats-embed, branch fleetnats up to a86cfa2) and was measured not to
// pay: docs/remote.md, "Embedded NATS: measured, not adopted".

// EmbeddedNATSOptions configure a node's embedded NATS server.
type EmbeddedNATSOptions struct {
	// Name is the server's name in the cluster (the node name: unique).
	Name string
	// StoreDir holds JetStream's files (the registration bucket).
	StoreDir string
	// ClusterListen is IP:PORT for routes from the other nodes' servers;
	// "" runs a cluster of one (no routes).
	ClusterListen string
	// Routes are the nodes' ClusterListen addresses (HOST:PORT): every
	// node's, this one's included (NATS skips it), so that every node has
	// the same list.
	Routes []string
	// Secret authenticates routes (the fleet's URL secret, ≥ 32 bytes).
	Secret []byte
	// ClusterName (default "exec-relay").
	ClusterName string
	// Logger gets the server's notices, warnings and errors (nil: none).
	Logger *slog.Logger
}

// EmbeddedNATS is a node's NATS server.
type EmbeddedNATS struct {
	srv        *natsserver.Server
	user, pass string
}

// StartEmbeddedNATS starts the server and waits until it takes
// connections (not for the cluster to form: JetStream's buckets wait for
// a quorum of the routed servers, NewKVStore retries until then).
func StartEmbeddedNATS(o EmbeddedNATSOptions) (*EmbeddedNATS, error) {
	if !validNodeName(o.Name) {
		return nil, fmt.Errorf("relay: embedded NATS: node name %q must be 1-64 characters of [A-Za-z0-9_]", o.Name)
	}
	if len(o.Secret) < 32 {
		return nil, errors.New("relay: embedded NATS: the fleet's URL secret (≥ 32 bytes) is required")
	}
	if o.StoreDir == "" {
		return nil, errors.New("relay: embedded NATS: a JetStream store directory is required")
	}
	if o.ClusterName == "" {
		o.ClusterName = "exec-relay"
	}
	cuser, cpass := derivedCredentials(o.Secret, "client")
	opts := &natsserver.Options{
		ServerName: o.Name,
		// The relay's own connection comes in process. The server still
		// listens for clients (nats-server 2.15 starts routes only after
		// its client listener: with DontListen it never routes), on
		// loopback, a random port, with a password derived from the
		// secret.
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT,
		Username: cuser, Password: cpass,
		JetStream: true,
		StoreDir:  o.StoreDir,
		NoSigs:    true,
		// Routes carry every cross-node frame: the same write deadline as
		// a client's keeps a stalled peer from holding the others.
		WriteDeadline: 10 * time.Second,
	}
	if o.ClusterListen != "" {
		if len(o.Routes) == 0 {
			// JetStream refuses a cluster without routes.
			return nil, errors.New("relay: embedded NATS: a cluster listen address needs routes (every node's address, this one's included)")
		}
		host, port, err := splitHostPort(o.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("relay: embedded NATS: cluster listen %q: %w", o.ClusterListen, err)
		}
		user, pass := derivedCredentials(o.Secret, "route")
		opts.Cluster = natsserver.ClusterOpts{Name: o.ClusterName, Host: host, Port: port,
			Username: user, Password: pass, NoAdvertise: true}
		for _, r := range o.Routes {
			h, p, err := splitHostPort(r)
			if err != nil {
				return nil, fmt.Errorf("relay: embedded NATS: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", User: url.UserPassword(user, pass),
				Host: net.JoinHostPort(h, strconv.Itoa(p))})
		}
	} else if len(o.Routes) > 0 {
		return nil, errors.New("relay: embedded NATS: routes need a cluster listen address")
	}
	if o.Logger == nil {
		opts.NoLog = true
	}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("relay: embedded NATS: %w", err)
	}
	if o.Logger != nil {
		ns.SetLoggerV2(natsLog{o.Logger.With("component", "nats")}, false, false, false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("relay: embedded NATS: the server did not start within 30 s")
	}
	return &EmbeddedNATS{srv: ns, user: cuser, pass: cpass}, nil
}

// Connect opens a connection to the server in process (no socket).
func (e *EmbeddedNATS) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect("", append(opts, nats.InProcessServer(e.srv), nats.UserInfo(e.user, e.pass))...)
}

// ConnectLoopback opens a connection to the server over its loopback
// client port (TCP) instead of the in-process pipe.
func (e *EmbeddedNATS) ConnectLoopback(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(e.srv.ClientURL(), append(opts, nats.UserInfo(e.user, e.pass))...)
}

// Routes is how many other servers this one is routed to now.
func (e *EmbeddedNATS) Routes() int { return e.srv.NumRoutes() }

// ClusterAddr is the address the server takes routes on (nil without).
func (e *EmbeddedNATS) ClusterAddr() *net.TCPAddr { return e.srv.ClusterAddr() }

// Shutdown stops the server; its routes drop, so the other nodes' servers
// see it go at once.
func (e *EmbeddedNATS) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// Server is the nats-server instance (tests: JetStream leadership).
func (e *EmbeddedNATS) Server() *natsserver.Server { return e.srv }

// derivedCredentials derives a user and password (for routes, or for
// clients) from the fleet secret: every node computes the same, and
// nothing else needs copying.
func derivedCredentials(secret []byte, role string) (user, pass string) {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("exec-relay nats " + role + " v1"))
	return "exec-relay-" + role, hex.EncodeToString(m.Sum(nil))
}

func splitHostPort(s string) (string, int, error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return h, port, nil
}

// natsLog passes the server's log to slog (debug and trace are off).
type natsLog struct{ l *slog.Logger }

func (n natsLog) Noticef(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n natsLog) Warnf(format string, v ...any) {
	// The passwords are derived in process (derivedCredentials), not
	// read from a configuration file: the server's advice to hash them
	// there does not apply.
	if strings.HasPrefix(format, "Plaintext passwords detected") {
		return
	}
	n.l.Warn(fmt.Sprintf(format, v...))
}
func (n natsLog) Fatalf(format string, v ...any) { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLog) Errorf(format string, v ...any) { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLog) Debugf(format string, v ...any) {}
func (n natsLog) Tracef(format string, v ...any) {}

// freePort is a port free a moment ago (the embedded servers' routes
// list every node's address, their own included, before any starts; for
// the benchmarks only: another process may take it in between).
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
