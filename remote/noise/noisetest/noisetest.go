// Package noisetest lets a test replay a recorded noise handshake
// (noise.NewInitiatorWithEntropy, noise.NewResponderWithEntropy): import it
// for its side effect,
//
//	import _ "github.com/execgo/exec-server/remote/noise/noisetest"
//
// It links crypto/mlkem/mlkemtest, which must stay out of product
// binaries (internal/test/deptest checks it).
package noisetest

import (
	"crypto/mlkem/mlkemtest"

	"github.com/execgo/exec-server/remote/noise/internal/derand"
)

func init() { derand.Encapsulate768 = mlkemtest.Encapsulate768 }
