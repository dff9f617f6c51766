package fsys

import (
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
)

// resolvePlan is sandbox.Resolve (a variable for the tests).
var resolvePlan = pendingResolve

// pendingResolve stands in for sandbox.Resolve until it lands: a policy
// that restricts nothing runs here, any other is refused (fail closed).
func pendingResolve(p *sandbox.Policy, _ sandbox.Env) (*sandbox.Plan, error) {
	if p.Restrictive() {
		return nil, protocol.Internal("sandbox not available: the policy resolution is not built yet")
	}
	return &sandbox.Plan{Root: sandbox.AccessWrite, FullRead: true, FullWrite: true}, nil
}
