package relay

import (
	"github.com/execgo/exec-server/remote/internal/envreg"
	"github.com/execgo/exec-server/remote/noise"
)

// Suite is the only key suite remote mode knows.
const Suite = noise.Suite

// SecurityProfile is the only registration profile (remote/internal/envreg).
const SecurityProfile = envreg.SecurityProfile

// PublicKey is a NoiseChannelPublicKey, decoded by remote/noise as
// strictly as the reference (exactly three fields, the exact suite, 32 and
// 1184 bytes of standard base64, a well-formed ML-KEM key).
type PublicKey = noise.PublicKey
