// Package peerproc tells whether a TCP connection to this server comes from
// inside one of the server's own sandboxes. A sandboxed command with
// "network":"enabled" shares the host's network namespace, so it can
// connect to the server's loopback listener like any local client; if it
// could also authenticate (or the server has no authentication), it would
// run unsandboxed commands as the server's user. The server asks Check for
// every HTTP request of a local peer and refuses the ones that come from a
// sandbox, whatever the authentication mode.
//
// How (Linux): the peer's socket is found with sock_diag (NETLINK_SOCK_DIAG,
// an exact lookup of the connection's four-tuple: its inode, or 0 once no
// descriptor holds it); the processes of the server's sandboxes are those
// below the server in the process tree whose mount namespace is not the
// server's (every sandbox has its own); their descriptors are searched for
// the socket. Fail closed: a local peer whose socket cannot be found, is
// held by no descriptor, or, while a sandbox of this server is running,
// cannot be found in any process's descriptors (in flight in a unix
// socket, or in a process this server cannot inspect), is refused.
package peerproc

import "net/netip"

// Verdict is Check's answer.
type Verdict struct {
	// Refuse: the connection must not be served.
	Refuse bool
	// Reason says why (for the log), or what was found.
	Reason string
	// Pid is the sandboxed process found holding the peer's socket (0
	// when none).
	Pid int
}

// IsLocal reports whether a connection from remote to local can come from
// a process of this host: a loopback peer, or one whose address is the
// address it connected to. (A peer bound to another address of this host
// and connecting to this one is not recognized: see docs/security.md.)
func IsLocal(local, remote netip.AddrPort) bool {
	r := remote.Addr().Unmap()
	return r.IsLoopback() || r == local.Addr().Unmap()
}
