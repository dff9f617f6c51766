package process

import (
	"bytes"
	"encoding/json"

	"github.com/execgo/exec-server/protocol"
)

// present reports whether a raw member was sent with a value other than
// null.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// checkNetwork refuses a start that asks for a managed network this server
// cannot give it. Such a command must never run with open network (fail
// closed): the reference either routes it through its proxy or refuses.
func checkNetwork(p *protocol.StartParams) error {
	var field string
	switch {
	case present(p.NetworkProxy):
		field = "networkProxy"
	case p.EnforceManagedNetwork:
		field = "enforceManagedNetwork"
	case present(p.ManagedNetwork):
		field = "managedNetwork"
	default:
		return nil
	}
	return protocol.Internal("%s: this executor cannot enforce a managed network proxy, so the command is not run", field).
		WithKind(protocol.KindSandboxUnavailable)
}
