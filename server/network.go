package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/execgo/exec-server/protocol"
)

// A session is its processes' process.NetworkPeer: a managed proxy's
// decisions and policy requests go to the connection attached at the time.

// decisionSendTimeout bounds how long a decision notification waits for
// room in the connection's send queue; past it, it is dropped (and logged
// by the proxy): a slow client never stalls a process's proxy.
const decisionSendTimeout = 5 * time.Second

// PolicyDecision sends network/policyDecision to the attached connection,
// if any.
func (ss *session) PolicyDecision(d protocol.NetworkPolicyDecision) {
	ss.mu.Lock()
	conn := ss.conn
	ss.mu.Unlock()
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), decisionSendTimeout)
	defer cancel()
	_ = conn.Notify(ctx, protocol.NotifyNetworkPolicyDecision, d)
}

var errDetached = errors.New("no client is attached to the session")

// PolicyRequest asks the attached client about a destination.
func (ss *session) PolicyRequest(ctx context.Context, p protocol.NetworkPolicyRequestParams) (*protocol.NetworkPolicyResponse, error) {
	ss.mu.Lock()
	conn := ss.conn
	ss.mu.Unlock()
	if conn == nil {
		return nil, errDetached
	}
	var res protocol.NetworkPolicyResponse
	if err := conn.Call(ctx, protocol.MethodNetworkPolicyRequest, p, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// addOwnAddr records a listener's address: a managed proxy never connects
// a sandboxed command to the server itself, whose processes are not
// confined (isOwnAddr).
func (s *Server) addOwnAddr(a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok {
		s.ownAddrs.Store(ta.AddrPort(), true)
	}
}

// isOwnAddr reports whether ap is one of the server's listeners; a
// listener on the unspecified address is every local address's port.
func (s *Server) isOwnAddr(ap netip.AddrPort) bool {
	own := false
	s.ownAddrs.Range(func(k, _ any) bool {
		l := k.(netip.AddrPort)
		if l.Port() == ap.Port() && (l.Addr().Unmap() == ap.Addr().Unmap() || l.Addr().IsUnspecified()) {
			own = true
		}
		return !own
	})
	return own
}
