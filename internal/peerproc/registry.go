package peerproc

import (
	"sync"
	"sync/atomic"
)

// Sandboxes counts this process's running sandboxes that share its network
// namespace (a process/start with "network":"enabled"): the code that
// starts one calls Begin before the start and the returned function once
// its init has been reaped (the sandbox's PID namespace, and every process
// in it, is gone then). While the count is zero no live socket can be a
// sandbox's, and Check answers after its sock_diag lookup, without walking
// /proc: the common case (codex's policies restrict the network) costs a
// local client one netlink round trip.
var Sandboxes Registry

// Registry is a count of running sandboxes.
type Registry struct{ n atomic.Int64 }

// Begin counts one sandbox about to start; done (idempotent) uncounts it.
func (r *Registry) Begin() (done func()) {
	r.n.Add(1)
	var once sync.Once
	return func() { once.Do(func() { r.n.Add(-1) }) }
}

// Running reports how many are counted.
func (r *Registry) Running() int64 { return r.n.Load() }
