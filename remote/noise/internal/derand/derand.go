// Package derand holds the one hook through which a test replays a noise
// handshake from recorded randomness: deterministic ML-KEM encapsulation,
// which the standard library offers only in crypto/mlkem/mlkemtest ("must
// only be used for known-answer tests"). It is nil in every product
// binary; remote/noise/noisetest, a test-only package, sets it.
package derand

import "crypto/mlkem"

// Encapsulate768 is mlkemtest.Encapsulate768 when a test linked
// remote/noise/noisetest, nil otherwise.
var Encapsulate768 func(ek *mlkem.EncapsulationKey768, random []byte) (sharedKey, ciphertext []byte, err error)
