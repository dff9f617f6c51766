package process

import (
	"os"
	"testing"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/sandbox"
)

// The test binary doubles as the spawner of the children it starts.
func TestMain(m *testing.M) {
	childinit.MaybeMain()
	sandbox.MaybeMain()
	os.Exit(m.Run())
}
