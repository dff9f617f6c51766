package noise

import (
	"bytes"
	"crypto/ecdh"
	"crypto/mlkem"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Suite is the suite tag of a public key object on the registry API.
const Suite = "Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256"

// Key sizes.
const (
	X25519KeySize  = 32
	MLKEMKeySize   = mlkem.EncapsulationKeySize768 // 1184
	MLKEMCTSize    = mlkem.CiphertextSize768       // 1088
	tagSize        = 16
	hashSize       = 32
	maxMessageSize = 65535
)

// PublicKey is one endpoint's static public key: an X25519 key and an
// ML-KEM-768 encapsulation key.
type PublicKey struct {
	X25519 []byte // 32 bytes
	MLKEM  []byte // 1184 bytes
}

// Equal reports whether both halves match.
func (p PublicKey) Equal(q PublicKey) bool {
	return bytes.Equal(p.X25519, q.X25519) && bytes.Equal(p.MLKEM, q.MLKEM)
}

// check validates the sizes and that the ML-KEM key is well formed (its
// coefficients reduced), so a bad key fails here, not mid-handshake.
func (p PublicKey) check() error {
	if len(p.X25519) != X25519KeySize {
		return fmt.Errorf("x25519 public key of %d bytes", len(p.X25519))
	}
	if len(p.MLKEM) != MLKEMKeySize {
		return fmt.Errorf("mlkem768 public key of %d bytes", len(p.MLKEM))
	}
	if _, err := mlkem.NewEncapsulationKey768(p.MLKEM); err != nil {
		return fmt.Errorf("mlkem768 public key: %w", err)
	}
	return nil
}

type publicKeyJSON struct {
	Suite  *string `json:"suite"`
	X25519 *string `json:"x25519_public_key"`
	MLKEM  *string `json:"mlkem768_public_key"`
}

// MarshalJSON writes the registry's NoiseChannelPublicKey object.
func (p PublicKey) MarshalJSON() ([]byte, error) {
	s := Suite
	x := base64.StdEncoding.EncodeToString(p.X25519)
	m := base64.StdEncoding.EncodeToString(p.MLKEM)
	return json.Marshal(publicKeyJSON{&s, &x, &m})
}

// UnmarshalJSON reads a NoiseChannelPublicKey object as strictly as the
// reference: exactly the three fields, unknown ones refused, the suite
// exact, standard padded base64 of 32 and 1184 bytes.
func (p *PublicKey) UnmarshalJSON(b []byte) error {
	var v publicKeyJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return fmt.Errorf("noise public key: %w", err)
	}
	if d.More() {
		return errors.New("noise public key: trailing data")
	}
	if v.Suite == nil || v.X25519 == nil || v.MLKEM == nil {
		return errors.New("noise public key: missing field")
	}
	if *v.Suite != Suite {
		return fmt.Errorf("noise public key: suite %q", *v.Suite)
	}
	x, err := base64.StdEncoding.Strict().DecodeString(*v.X25519)
	if err != nil {
		return fmt.Errorf("noise public key: x25519: %w", err)
	}
	m, err := base64.StdEncoding.Strict().DecodeString(*v.MLKEM)
	if err != nil {
		return fmt.Errorf("noise public key: mlkem768: %w", err)
	}
	q := PublicKey{X25519: x, MLKEM: m}
	if err := q.check(); err != nil {
		return fmt.Errorf("noise public key: %w", err)
	}
	*p = q
	return nil
}

// Keypair is a static identity: codex makes one per process and never
// persists it; so does this package (there is no private key encoding).
type Keypair struct {
	x   *ecdh.PrivateKey
	kem *mlkem.DecapsulationKey768
	pub PublicKey
}

// GenerateKeypair makes a fresh identity from crypto/rand.
func GenerateKeypair() (*Keypair, error) {
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	kem, err := mlkem.GenerateKey768()
	if err != nil {
		return nil, err
	}
	return newKeypair(x, kem), nil
}

// KeypairFromSeeds makes a deterministic identity, for test vectors: a
// 32-byte X25519 private key and a 64-byte ML-KEM seed (d‖z).
func KeypairFromSeeds(x25519Private, mlkemSeed []byte) (*Keypair, error) {
	x, err := ecdh.X25519().NewPrivateKey(x25519Private)
	if err != nil {
		return nil, err
	}
	kem, err := mlkem.NewDecapsulationKey768(mlkemSeed)
	if err != nil {
		return nil, err
	}
	return newKeypair(x, kem), nil
}

func newKeypair(x *ecdh.PrivateKey, kem *mlkem.DecapsulationKey768) *Keypair {
	return &Keypair{x: x, kem: kem, pub: PublicKey{
		X25519: x.PublicKey().Bytes(),
		MLKEM:  kem.EncapsulationKey().Bytes(),
	}}
}

// Public returns the public half. The caller must not modify its slices.
func (k *Keypair) Public() PublicKey { return k.pub }
