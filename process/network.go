package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/execgo/exec-server/netproxy"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// NetworkPeer is how a process's managed proxy talks to the client: the
// session's current connection. Both calls must return promptly when
// there is no connection (a dropped decision, an error).
type NetworkPeer interface {
	// PolicyDecision sends network/policyDecision; it must not block long.
	PolicyDecision(protocol.NetworkPolicyDecision)
	// PolicyRequest sends network/policyRequest and waits for the answer.
	PolicyRequest(ctx context.Context, p protocol.NetworkPolicyRequestParams) (*protocol.NetworkPolicyResponse, error)
}

// present reports whether a raw member was sent with a value other than
// null.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// unavailable is the refusal of a managed network the server cannot give
// as asked: the command never runs with open network instead (fail
// closed), as the reference, which routes it through its proxy or
// refuses.
func unavailable(format string, args ...any) error {
	return protocol.Internal(format, args...).WithKind(protocol.KindSandboxUnavailable)
}

// checkNetwork refuses, before anything starts, a managed network this
// server cannot enforce; parseProxy checks the networkProxy itself.
func checkNetwork(p *protocol.StartParams) error {
	switch {
	case present(p.ManagedNetwork):
		return unavailable("managedNetwork: this executor does not support it; the command is not run")
	case p.EnforceManagedNetwork && !present(p.NetworkProxy):
		// As the reference: a managed network needs the proxy's launch.
		return unavailable("enforceManagedNetwork: a managed network needs a networkProxy launch; the command is not run")
	case present(p.NetworkProxy) && !present(p.Sandbox):
		return unavailable("networkProxy: a managed network needs a sandbox to cut the command's direct network; the command is not run")
	}
	return nil
}

// parseProxy decodes networkProxy, refusing what the proxy does not
// enforce: unknown members, credential masking, an unknown mode, bad
// patterns.
func parseProxy(raw json.RawMessage) (*protocol.NetworkProxyLaunch, *netproxy.Policy, error) {
	var l protocol.NetworkProxyLaunch
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, nil, unavailable("networkProxy: %v; the command is not run", err)
	}
	s := &l.Proxy
	switch {
	case s.CredentialMasking:
		return nil, nil, unavailable("networkProxy.proxy.credentialMasking: not supported by this executor; the command is not run")
	case s.Mode != "" && s.Mode != "full" && s.Mode != "limited":
		return nil, nil, unavailable("networkProxy.proxy.mode: unknown mode %q; the command is not run", s.Mode)
	}
	pol, err := netproxy.NewPolicy(s.Domains, s.ReviewDomains, s.Mode == "limited", s.AllowLocalBinding)
	if err != nil {
		return nil, nil, unavailable("networkProxy.proxy.domains: %v; the command is not run", err)
	}
	return &l, pol, nil
}

// netLaunch is one process's managed proxy: the route into its sandbox,
// the proxy, and the goroutine that connects them.
type netLaunch struct {
	route   *policy.ProxyRoute
	handoff *sandbox.ProxyHandoff
	proxy   *netproxy.Proxy
	env     map[string]string
	socks   bool
	// transparent: the sandbox routes raw TCP to two more listeners
	// (IPv4, IPv6), handed over after the others.
	transparent bool
	logger      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// decisionTimeoutFloor is added to the client's policyDecisionTimeoutMs:
// the answer crosses the connection (the reference adds transport
// overhead too: 1.5 s gave a denial after about 6.5 s).
const decisionTimeoutFloor = 5 * time.Second

// prepareNetwork sets up the managed proxy of a start with networkProxy
// (nil without one). The plan is switched to NetworkProxied.
func (m *Manager) prepareNetwork(sp *protocol.StartParams, plan *policy.Plan) (*netLaunch, error) {
	if !present(sp.NetworkProxy) {
		return nil, nil
	}
	if plan == nil {
		return nil, unavailable("networkProxy: a managed network needs a sandbox; the command is not run")
	}
	launch, pol, err := parseProxy(sp.NetworkProxy)
	if err != nil {
		return nil, err
	}
	if !launch.Proxy.Enabled || plan.Network == policy.NetworkRestricted {
		// No proxy, or a sandbox without network: no network at all,
		// never more than the sandbox allows.
		plan.Network = policy.NetworkRestricted
		return nil, nil
	}
	if launch.Proxy.TransparentTCP {
		// Fail closed: without the redirect, raw TCP would just fail,
		// but the client asked for it to be routed (transparent.go).
		if err := sandbox.TransparentSupport(); err != nil {
			return nil, unavailable("networkProxy.proxy.transparentTcp: %v; the command is not run", err)
		}
	}
	peer := m.opts.Network
	id := sp.ProcessID
	nl := &netLaunch{socks: launch.Proxy.EnableSocks5, transparent: launch.Proxy.TransparentTCP, logger: m.opts.Logger}
	nl.ctx, nl.cancel = context.WithCancel(context.Background())
	cfg := netproxy.Config{
		Policy:    pol,
		Upstream:  m.opts.UpstreamProxy,
		Forbidden: m.opts.ForbiddenAddr,
		SOCKS:     nl.socks,
		Logger:    m.opts.Logger.With("processId", id),
	}
	if peer != nil {
		cfg.OnDecision = func(d netproxy.Decision) {
			peer.PolicyDecision(protocol.NetworkPolicyDecision{
				ProcessID: id, Timestamp: d.Time.UTC().Format("2006-01-02T15:04:05.000Z"), Scope: "domain",
				Decision: d.Decision, Source: d.Source, Reason: d.Reason, Protocol: d.Protocol,
				Host: d.Host, Port: d.Port, Method: d.Method, Client: d.Client,
			})
		}
		if ms := launch.PolicyDecisionTimeoutMs; ms != nil {
			cfg.DecideTimeout = time.Duration(min(*ms, 24*3600*1000))*time.Millisecond + decisionTimeoutFloor
			cfg.Decider = func(ctx context.Context, r netproxy.Request) (netproxy.Answer, error) {
				res, err := peer.PolicyRequest(ctx, protocol.NetworkPolicyRequestParams{ProcessID: id,
					Request: protocol.NetworkPolicyRequest{Protocol: r.Protocol, Host: r.Host, Port: r.Port}})
				if err != nil {
					return netproxy.Answer{}, err
				}
				return checkAnswer(res)
			}
		}
	}
	handoff, path, err := sandbox.NewProxyHandoff("")
	if err != nil {
		nl.cancel()
		return nil, unavailable("networkProxy: %v", err)
	}
	nl.handoff = handoff
	nl.route = &policy.ProxyRoute{Socket: path}
	// The namespace is new and empty: any port is free. Random ones, as
	// the reference opens new ports per process.
	nl.route.HTTPPort, nl.route.SOCKSPort = randomPorts()
	if !nl.socks {
		nl.route.SOCKSPort = 0
	}
	if nl.transparent {
		nl.route.TransparentPort = transparentPort()
	}
	nl.env = netproxy.Env(nl.route.HTTPPort, nl.route.SOCKSPort, launch.Proxy.AllowLocalBinding)
	nl.proxy = netproxy.New(cfg)
	plan.Network = policy.NetworkProxied
	plan.Proxy = nl.route
	return nl, nil
}

// checkAnswer validates the client's answer as the reference does: a
// known type; deny and ask need a reason of at most 1024 bytes.
func checkAnswer(res *protocol.NetworkPolicyResponse) (netproxy.Answer, error) {
	d := res.Decision
	switch d.Type {
	case netproxy.DecisionAllow:
	case netproxy.DecisionDeny, netproxy.DecisionAsk:
		if d.Reason == "" || len(d.Reason) > 1024 {
			return netproxy.Answer{}, fmt.Errorf("network/policyRequest: a %s needs a reason of 1 to 1024 bytes", d.Type)
		}
	default:
		return netproxy.Answer{}, fmt.Errorf("network/policyRequest: unknown decision type %q", d.Type)
	}
	return netproxy.Answer{Decision: d.Type, Reason: d.Reason}, nil
}

func randomPorts() (uint16, uint16) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	h := 20000 + binary.BigEndian.Uint16(b[:2])%20000
	s := 40000 + binary.BigEndian.Uint16(b[2:])%20000
	return h, s
}

// transparentPort is a random port for the transparent listeners, other
// than the two proxy ports (the namespace is new: any port is free).
func transparentPort() uint16 {
	// Below randomPorts' ranges, so distinct from both.
	var b [2]byte
	_, _ = rand.Read(b[:])
	return 10000 + binary.BigEndian.Uint16(b[:])%10000
}

// applyEnv sets the proxy's variables in env (NAME=VALUE entries),
// replacing any the request set.
func (nl *netLaunch) applyEnv(env []string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		_, ours := nl.env[name]
		return ours
	})
	for k, v := range nl.env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// handoffTimeout bounds the wait for the init's listeners; the init hands
// them over before it builds the view, so this is reached only when the
// init died first (its exit ends the wait sooner, through close).
const handoffTimeout = 2 * time.Minute

// start takes the listeners from the init (pid) and serves them, in the
// background, until close.
func (nl *netLaunch) start(pid int) {
	nl.wg.Add(1)
	go func() {
		defer nl.wg.Done()
		ctx, cancel := context.WithTimeout(nl.ctx, handoffTimeout)
		defer cancel()
		n := 1
		if nl.socks {
			n = 2
		}
		if nl.transparent {
			n += 2
		}
		lns, err := nl.handoff.Accept(ctx, n, pid)
		nl.handoff.Close()
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				nl.logger.Warn("network proxy: no listeners from the sandbox", "err", err)
			}
			return
		}
		var socks net.Listener
		if nl.socks {
			socks = lns[1]
		}
		nl.proxy.Serve(lns[0], socks)
		if nl.transparent {
			nl.proxy.ServeTransparent(lns[n-2:]...)
		}
	}()
}

// close stops the proxy and frees the route; safe to call more than once.
func (nl *netLaunch) close() {
	nl.cancel()
	nl.handoff.Close()
	nl.wg.Wait()
	nl.proxy.Close()
}
