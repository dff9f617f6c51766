package process

import (
	"testing"

	"github.com/execgo/exec-server/internal/test/testbin"
)

// The test binary doubles as the spawner of the children it starts.
func TestMain(m *testing.M) { testbin.Main(m) }
