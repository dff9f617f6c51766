package executor

import (
	"testing"

	"github.com/execgo/exec-server/internal/test/testbin"
)

// The server under test re-executes this binary for its child init and
// sandbox helper, as cmd/exec-server's main does.
func TestMain(m *testing.M) { testbin.Main(m) }
