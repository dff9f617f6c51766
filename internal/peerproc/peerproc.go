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
// descriptor holds it, and the uid that made it); the processes of the
// server's sandboxes that could reach it are those below the server in the
// process tree whose mount namespace is not the server's (every sandbox has
// its own) but whose network namespace is; their descriptor tables (every
// thread's) are searched for the socket. Fail closed: a local peer whose
// socket cannot be found or is held by no descriptor is refused; so is,
// while such a sandbox runs, a socket made by the server's uid that no
// process this server can inspect holds (in flight in a unix socket's
// queue). A socket made by another uid is never a sandbox's: they run as
// the server's user (or as the root of a user namespace mapped to it) and
// cannot change it.
//
// Every peer costs one sock_diag lookup (tens of microseconds): a sandbox
// can bind its socket to any address of the host, so the address alone
// cannot tell a local peer; one whose socket is not in this network
// namespace, from an address that is not the host's, is remote, and served
// without more. /proc is walked only while a sandbox with the host's
// network runs (Sandboxes).
//
// Limits: a host process that relays for a sandbox (a proxy on loopback, a
// daemon it reaches over a unix socket) is that process, not the sandbox;
// a descendant of the server that entered its own mount
// namespace outside any sandbox counts as a sandbox.
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

// IsLocal reports whether a connection from remote to local surely comes
// from a process of this host: either end on loopback, or a peer whose
// address is the one it connected to. Check does not rely on it alone: a
// peer found in this network namespace is local whatever its address.
func IsLocal(local, remote netip.AddrPort) bool {
	r, l := remote.Addr().Unmap(), local.Addr().Unmap()
	return r.IsLoopback() || l.IsLoopback() || r == l
}
