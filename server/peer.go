package server

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"time"

	"github.com/execgo/exec-server/internal/peerproc"
)

// A sandboxed command with "network":"enabled" shares the host's network,
// so it can reach this server's listener. Authentication does not stop it
// when there is none (a loopback listener) or when it can find a token;
// so every HTTP request from a local peer (loopback, or the address it
// connected to) is checked: its TCP socket is mapped to the processes that
// hold it, and a process inside one of this server's sandboxes (package
// peerproc) is refused with 403, whatever the authentication mode, before
// anything else is looked at. A peer costs a sock_diag lookup and, while a
// sandbox with the host's network runs (peerproc.Sandboxes, counted by
// process/start), when local a walk of /proc (peerproc's BenchmarkCheck),
// once per websocket connection.

// peerGuard is the check of one server.
type peerGuard struct {
	ck *peerproc.Checker
	// walks bounds the checks that walk /proc at once: a flood of local
	// connections queues here instead of loading every core.
	walks chan struct{}
	// broken: the check cannot run here (no /proc on Linux): local peers
	// are refused, as a sandbox could be one.
	broken error
}

func newPeerGuard(log *slog.Logger) *peerGuard {
	ck, err := peerproc.New()
	if err != nil {
		if runtime.GOOS != "linux" {
			return nil // no sandbox, nothing to refuse
		}
		log.Warn("cannot tell sandboxed peers apart: local websocket and metrics clients will be refused", "err", err)
		return &peerGuard{broken: err}
	}
	return &peerGuard{ck: ck, walks: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
}

// check decides a request's connection.
func (g *peerGuard) check(r *http.Request) peerproc.Verdict {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return peerproc.Verdict{} // not from a net/http server's listener
	}
	tcp, ok := la.(*net.TCPAddr)
	if !ok {
		return peerproc.Verdict{} // a unix socket or an in-memory pipe
	}
	local := tcp.AddrPort()
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return peerproc.Verdict{Refuse: true, Reason: "unparsable peer address " + r.RemoteAddr}
	}
	if g.broken != nil {
		if !peerproc.IsLocal(local, remote) {
			return peerproc.Verdict{}
		}
		return peerproc.Verdict{Refuse: true, Reason: "local peers cannot be checked: " + g.broken.Error()}
	}
	select {
	case g.walks <- struct{}{}:
	case <-r.Context().Done():
		return peerproc.Verdict{Refuse: true, Reason: "the client went away during the check"}
	}
	defer func() { <-g.walks }()
	return g.ck.Check(local, remote)
}

// refuseSandboxPeer answers 403 and logs when r comes from inside one of
// this server's sandboxes; false when r may go on.
func (s *Server) refuseSandboxPeer(w http.ResponseWriter, r *http.Request) bool {
	if s.peers == nil {
		return false
	}
	v := s.peers.check(r)
	if !v.Refuse {
		return false
	}
	// At warn, not info as other refusals: a sandboxed command that tries
	// to reach its server is an attack, or a policy that needs fixing.
	s.obs.refusal(http.StatusForbidden)
	if n, ok := s.obs.refusalLogs.allow(time.Now()); ok {
		attrs := []any{"peer", r.RemoteAddr, "path", r.URL.Path, "status", http.StatusForbidden, "reason", v.Reason}
		if v.Pid != 0 {
			attrs = append(attrs, "pid", v.Pid)
		}
		if n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
		s.cfg.Logger.Warn("request from inside a sandbox of this server refused", attrs...)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte("connections from inside a sandbox of this server are refused\n"))
	return true
}
