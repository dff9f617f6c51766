package relay

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
)

// Suite is the only key suite remote mode knows (spec §3.1).
const Suite = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256"

// SecurityProfile is the only registration profile (spec §3.2).
const SecurityProfile = "noise_hybrid_ik_v1"

// PublicKey is a NoiseChannelPublicKey, decoded.
type PublicKey struct {
	X25519   []byte // 32 bytes
	MLKEM768 []byte // 1184 bytes
}

type wireKey struct {
	Suite    string `json:"suite"`
	X25519   string `json:"x25519_public_key"`
	MLKEM768 string `json:"mlkem768_public_key"`
}

// Equal reports whether two keys are the same (keys are public: no need
// for constant time).
func (k PublicKey) Equal(o PublicKey) bool {
	return bytes.Equal(k.X25519, o.X25519) && bytes.Equal(k.MLKEM768, o.MLKEM768)
}

// MarshalJSON writes the three-field wire form.
func (k PublicKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireKey{
		Suite:    Suite,
		X25519:   base64.StdEncoding.EncodeToString(k.X25519),
		MLKEM768: base64.StdEncoding.EncodeToString(k.MLKEM768),
	})
}

// UnmarshalJSON is as strict as the reference: exactly the three fields,
// the exact suite, standard padded base64 of 32 and 1184 bytes.
func (k *PublicKey) UnmarshalJSON(b []byte) error {
	var w wireKey
	if err := decodeStrict(b, &w); err != nil {
		return fmt.Errorf("public key: %w", err)
	}
	if w.Suite != Suite {
		return fmt.Errorf("public key: unsupported suite %q", w.Suite)
	}
	x, err := base64.StdEncoding.Strict().DecodeString(w.X25519)
	if err != nil || len(x) != 32 {
		return fmt.Errorf("public key: x25519_public_key must be base64 of 32 bytes")
	}
	m, err := base64.StdEncoding.Strict().DecodeString(w.MLKEM768)
	if err != nil || len(m) != 1184 {
		return fmt.Errorf("public key: mlkem768_public_key must be base64 of 1184 bytes")
	}
	k.X25519, k.MLKEM768 = x, m
	return nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after JSON value")
	}
	return nil
}
