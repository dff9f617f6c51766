package relay

import (
	"testing"

	"github.com/execgo/exec-server/internal/test/testbin"
)

// The exec-server behind the fleet's codex test re-executes this binary
// for its child init and sandbox helper, as cmd/exec-server's main does.
func TestMain(m *testing.M) { testbin.Main(m) }
