// Package noise implements the Noise handshake of codex's remote mode,
// Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256 as codex 0.169 speaks it
// (the clatter ≥ 2.2 token order), on the standard library only:
//
//	<- s
//	...
//	-> skem, e, es, s, ss       (message 1, payload: harness_key_authorization)
//	<- ekem, skem, e, ee, se    (message 2, payload: empty or RejectionMarker)
//
// The harness is the initiator, the executor the responder. Each static
// and ephemeral key is an X25519 key plus an ML-KEM-768 key. After message
// 2 both sides Split into two CipherStates with codex's record nonce (4
// zero bytes and the big-endian counter) and an empty AD.
//
// There is no other Go implementation to lean on: the pattern has KEM
// tokens that flynn/noise cannot express.
package noise

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/mlkem"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/execgo/exec-server/remote/noise/internal/derand"
)

// ProtocolName is hashed into the handshake. It says "25519", not
// "X25519" (the suite tag of the key objects says the latter).
const ProtocolName = "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256"

// RejectionMarker is message 2's payload when the registry answered the
// executor's /validate with 401.
const RejectionMarker = "codex-registry-authentication-rejected/v1"

// Message sizes without payload.
const (
	Message1Overhead = MLKEMCTSize + X25519KeySize + MLKEMKeySize + (X25519KeySize + tagSize) + (MLKEMKeySize + tagSize) + tagSize // 3568
	Message2Overhead = MLKEMCTSize + (MLKEMCTSize + tagSize) + X25519KeySize + MLKEMKeySize + tagSize                              // 3424
)

// MaxAuthorization is the largest harness_key_authorization (UTF-8 bytes)
// the executor accepts in message 1.
const MaxAuthorization = 4096

// ErrHandshake is wrapped by every handshake failure.
var ErrHandshake = errors.New("noise handshake failed")

func fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrHandshake, fmt.Sprintf(format, args...))
}

// Prologue is the handshake prologue: the domain string, the environment
// id, the registration id and the stream id, each preceded by its length
// as a big-endian u64.
func Prologue(environmentID, registrationID, streamID string) []byte {
	parts := [...]string{"codex-exec-server-relay-noise/v1", environmentID, registrationID, streamID}
	n := 0
	for _, p := range parts {
		n += 8 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// symmetric is Noise's SymmetricState with its CipherState.
type symmetric struct {
	ck, h [hashSize]byte
	k     [32]byte
	hasK  bool
	n     uint64
}

func (s *symmetric) init(prologue []byte) {
	// The name is longer than HASHLEN, so h = HASH(name).
	s.h = sha256.Sum256([]byte(ProtocolName))
	s.ck = s.h
	s.mixHash(prologue)
}

func (s *symmetric) mixHash(data ...[]byte) {
	d := sha256.New()
	d.Write(s.h[:])
	for _, b := range data {
		d.Write(b)
	}
	d.Sum(s.h[:0])
}

// hkdf derives n*32 bytes; Noise's HKDF(ck, ikm) is RFC 5869 with salt=ck
// and empty info.
func hkdfN(ck, ikm []byte, n int) []byte {
	out, err := hkdf.Key(sha256.New, ikm, ck, "", n*hashSize)
	if err != nil {
		panic(err) // only for lengths far beyond 3*32
	}
	return out
}

func (s *symmetric) mixKey(ikm []byte) {
	out := hkdfN(s.ck[:], ikm, 2)
	copy(s.ck[:], out[:32])
	copy(s.k[:], out[32:64])
	s.hasK, s.n = true, 0
	clear(out)
}

func (s *symmetric) mixKeyAndHash(ikm []byte) {
	out := hkdfN(s.ck[:], ikm, 3)
	copy(s.ck[:], out[:32])
	s.mixHash(out[32:64])
	copy(s.k[:], out[64:96])
	s.hasK, s.n = true, 0
	clear(out)
}

func (s *symmetric) aead() cipher.AEAD {
	return newAEAD(s.k[:])
}

func newAEAD(k []byte) cipher.AEAD {
	b, err := aes.NewCipher(k)
	if err != nil {
		panic(err) // the key is always 32 bytes
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return g
}

func nonce(n uint64) []byte {
	var b [12]byte
	binary.BigEndian.PutUint64(b[4:], n)
	return b[:]
}

func (s *symmetric) encryptAndHash(dst, p []byte) []byte {
	start := len(dst)
	if s.hasK {
		dst = s.aead().Seal(dst, nonce(s.n), p, s.h[:])
		s.n++
	} else {
		dst = append(dst, p...)
	}
	s.mixHash(dst[start:])
	return dst
}

func (s *symmetric) decryptAndHash(c []byte) ([]byte, error) {
	var p []byte
	if s.hasK {
		var err error
		p, err = s.aead().Open(nil, nonce(s.n), c, s.h[:])
		if err != nil {
			return nil, fail("decryption")
		}
		s.n++
	} else {
		p = append([]byte(nil), c...)
	}
	s.mixHash(c)
	return p, nil
}

func (s *symmetric) split() (c1, c2 *CipherState) {
	out := hkdfN(s.ck[:], nil, 2)
	c1, c2 = newCipherState(out[:32]), newCipherState(out[32:])
	clear(out)
	return c1, c2
}

func (s *symmetric) destroy() {
	clear(s.ck[:])
	clear(s.h[:])
	clear(s.k[:])
	s.hasK = false
}

// dh is X25519 that fails on a low-order point (crypto/ecdh refuses an
// all-zero shared secret), which is a handshake failure.
func dh(priv *ecdh.PrivateKey, pub []byte) ([]byte, error) {
	p, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return nil, fail("x25519 public key: %v", err)
	}
	ss, err := priv.ECDH(p)
	if err != nil {
		return nil, fail("x25519: %v", err)
	}
	return ss, nil
}

// encapsulate draws its randomness from crypto/rand, or from entropy
// when a test vector supplies it.
func encapsulate(pub []byte, entropy io.Reader) (ss, ct []byte, err error) {
	ek, err := mlkem.NewEncapsulationKey768(pub)
	if err != nil {
		return nil, nil, fail("mlkem768 public key: %v", err)
	}
	if entropy == nil {
		ss, ct = ek.Encapsulate()
		return ss, ct, nil
	}
	if derand.Encapsulate768 == nil {
		return nil, nil, fail("a handshake from given entropy needs remote/noise/noisetest (tests only)")
	}
	var m [32]byte
	if _, err := io.ReadFull(entropy, m[:]); err != nil {
		return nil, nil, err
	}
	return derand.Encapsulate768(ek, m[:])
}

// ephemeral is one side's ephemeral keys.
type ephemeral struct {
	x      *ecdh.PrivateKey
	kem    *mlkem.DecapsulationKey768
	xPub   []byte
	kemPub []byte
}

func newEphemeral(entropy io.Reader) (*ephemeral, error) {
	var k *Keypair
	var err error
	if entropy != nil {
		var x [32]byte
		var seed [64]byte
		if _, err := io.ReadFull(entropy, x[:]); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(entropy, seed[:]); err != nil {
			return nil, err
		}
		k, err = KeypairFromSeeds(x[:], seed[:])
	} else {
		k, err = GenerateKeypair()
	}
	if err != nil {
		return nil, err
	}
	return &ephemeral{x: k.x, kem: k.kem, xPub: k.pub.X25519, kemPub: k.pub.MLKEM}, nil
}

// Initiator is the harness side of one handshake. Use it once:
// WriteMessage1, then ReadMessage2.
type Initiator struct {
	entropy io.Reader // nil: crypto/rand
	s       *Keypair
	rs      PublicKey
	e       *ephemeral
	sym     symmetric
	state   int // 0: write 1; 1: read 2; 2: done or failed
}

// NewInitiator starts a handshake with the responder whose static key
// (pinned from the registry) is rs.
func NewInitiator(s *Keypair, rs PublicKey, prologue []byte) (*Initiator, error) {
	if err := rs.check(); err != nil {
		return nil, fail("responder key: %v", err)
	}
	i := &Initiator{s: s, rs: rs}
	i.sym.init(prologue)
	i.sym.mixHash(rs.X25519)
	i.sym.mixHash(rs.MLKEM)
	return i, nil
}

// NewInitiatorWithEntropy is NewInitiator whose message 1 takes its
// randomness from entropy (32 bytes of KEM encapsulation randomness, then
// a 32-byte ephemeral X25519 private key and a 64-byte ML-KEM seed), to
// replay a recorded handshake as a test vector; the test must link
// remote/noise/noisetest. Never give it a predictable source otherwise.
func NewInitiatorWithEntropy(s *Keypair, rs PublicKey, prologue []byte, entropy io.Reader) (*Initiator, error) {
	i, err := NewInitiator(s, rs, prologue)
	if err != nil {
		return nil, err
	}
	i.entropy = entropy
	return i, nil
}

// WriteMessage1 returns message 1 carrying payload (the authorization).
// It is Message1Overhead+len(payload) bytes.
func (i *Initiator) WriteMessage1(payload []byte) (_ []byte, err error) {
	if i.state != 0 {
		return nil, errors.New("noise: WriteMessage1 out of order")
	}
	i.state = 2
	defer func() {
		if err != nil {
			i.destroy()
		}
	}()
	if Message1Overhead+len(payload) > maxMessageSize {
		return nil, fail("message 1 payload of %d bytes", len(payload))
	}
	msg := make([]byte, 0, Message1Overhead+len(payload))
	// skem
	ss1, ct1, err := encapsulate(i.rs.MLKEM, i.entropy)
	if err != nil {
		return nil, err
	}
	msg = i.sym.encryptAndHash(msg, ct1)
	i.sym.mixKeyAndHash(ss1)
	clear(ss1)
	// e
	if i.e, err = newEphemeral(i.entropy); err != nil {
		return nil, err
	}
	msg = append(msg, i.e.xPub...)
	i.sym.mixHash(i.e.xPub)
	msg = append(msg, i.e.kemPub...)
	i.sym.mixHash(i.e.kemPub)
	// es
	k, err := dh(i.e.x, i.rs.X25519)
	if err != nil {
		return nil, err
	}
	i.sym.mixKey(k)
	clear(k)
	// s
	msg = i.sym.encryptAndHash(msg, i.s.pub.X25519)
	msg = i.sym.encryptAndHash(msg, i.s.pub.MLKEM)
	// ss
	if k, err = dh(i.s.x, i.rs.X25519); err != nil {
		return nil, err
	}
	i.sym.mixKey(k)
	clear(k)
	msg = i.sym.encryptAndHash(msg, payload)
	i.state = 1
	return msg, nil
}

// ReadMessage2 checks message 2 and returns its payload and the transport
// ciphers: send protects harness→executor records, recv the other way.
// Judging the payload (empty, or RejectionMarker) is the caller's.
func (i *Initiator) ReadMessage2(msg []byte) (payload []byte, send, recv *CipherState, err error) {
	if i.state != 1 {
		return nil, nil, nil, errors.New("noise: ReadMessage2 out of order")
	}
	i.state = 2
	defer i.destroy()
	if len(msg) < Message2Overhead || len(msg) > maxMessageSize {
		return nil, nil, nil, fail("message 2 of %d bytes", len(msg))
	}
	// ekem: to our ephemeral KEM key, in clear.
	ct2, msg := msg[:MLKEMCTSize], msg[MLKEMCTSize:]
	i.sym.mixHash(ct2)
	ss2, err := i.e.kem.Decapsulate(ct2)
	if err != nil {
		return nil, nil, nil, fail("ekem: %v", err)
	}
	i.sym.mixKey(ss2)
	clear(ss2)
	// skem: to our static KEM key.
	ct3, err := i.sym.decryptAndHash(msg[:MLKEMCTSize+tagSize])
	if err != nil {
		return nil, nil, nil, err
	}
	msg = msg[MLKEMCTSize+tagSize:]
	ss3, err := i.s.kem.Decapsulate(ct3)
	if err != nil {
		return nil, nil, nil, fail("skem: %v", err)
	}
	i.sym.mixKeyAndHash(ss3)
	clear(ss3)
	// e: the responder's ephemeral KEM key is hashed, never used.
	re := msg[:X25519KeySize]
	i.sym.mixHash(re)
	i.sym.mixHash(msg[X25519KeySize : X25519KeySize+MLKEMKeySize])
	msg = msg[X25519KeySize+MLKEMKeySize:]
	// ee
	k, err := dh(i.e.x, re)
	if err != nil {
		return nil, nil, nil, err
	}
	i.sym.mixKey(k)
	clear(k)
	// se
	if k, err = dh(i.s.x, re); err != nil {
		return nil, nil, nil, err
	}
	i.sym.mixKey(k)
	clear(k)
	if payload, err = i.sym.decryptAndHash(msg); err != nil {
		return nil, nil, nil, err
	}
	send, recv = i.sym.split()
	return payload, send, recv, nil
}

func (i *Initiator) destroy() {
	i.sym.destroy()
	i.e = nil
}

// Responder is the executor side of one handshake: ReadMessage1, decide
// (the executor asks the registry's /validate about RemoteStatic and the
// payload), then WriteMessage2.
type Responder struct {
	entropy io.Reader // nil: crypto/rand
	s       *Keypair
	rs      PublicKey
	re      []byte // initiator ephemeral X25519
	reKEM   []byte // initiator ephemeral ML-KEM
	sym     symmetric
	state   int // 0: read 1; 1: write 2; 2: done or failed
}

// NewResponder starts the responder's side of a handshake.
func NewResponder(s *Keypair, prologue []byte) *Responder {
	r := &Responder{s: s}
	r.sym.init(prologue)
	r.sym.mixHash(s.pub.X25519)
	r.sym.mixHash(s.pub.MLKEM)
	return r
}

// NewResponderWithEntropy is NewResponder whose message 2 takes its
// randomness from entropy (32 bytes for each of the two encapsulations,
// then a 32-byte ephemeral X25519 private key and a 64-byte ML-KEM seed),
// to replay a recorded handshake; the test must link
// remote/noise/noisetest. Never give it a predictable source otherwise.
func NewResponderWithEntropy(s *Keypair, prologue []byte, entropy io.Reader) *Responder {
	r := NewResponder(s, prologue)
	r.entropy = entropy
	return r
}

// ReadMessage1 checks message 1 and returns its payload (the harness
// authorization). RemoteStatic is then the authenticated initiator key.
func (r *Responder) ReadMessage1(msg []byte) ([]byte, error) {
	if r.state != 0 {
		return nil, errors.New("noise: ReadMessage1 out of order")
	}
	r.state = 2
	if len(msg) < Message1Overhead || len(msg) > maxMessageSize {
		r.sym.destroy()
		return nil, fail("message 1 of %d bytes", len(msg))
	}
	p, err := r.readMessage1(msg)
	if err != nil {
		r.sym.destroy()
		return nil, err
	}
	r.state = 1
	return p, nil
}

func (r *Responder) readMessage1(msg []byte) ([]byte, error) {
	// skem
	ct1 := msg[:MLKEMCTSize]
	msg = msg[MLKEMCTSize:]
	r.sym.mixHash(ct1)
	ss1, err := r.s.kem.Decapsulate(ct1)
	if err != nil {
		return nil, fail("skem: %v", err)
	}
	r.sym.mixKeyAndHash(ss1)
	clear(ss1)
	// e
	r.re = append([]byte(nil), msg[:X25519KeySize]...)
	r.reKEM = append([]byte(nil), msg[X25519KeySize:X25519KeySize+MLKEMKeySize]...)
	msg = msg[X25519KeySize+MLKEMKeySize:]
	r.sym.mixHash(r.re)
	r.sym.mixHash(r.reKEM)
	// es
	k, err := dh(r.s.x, r.re)
	if err != nil {
		return nil, err
	}
	r.sym.mixKey(k)
	clear(k)
	// s
	x, err := r.sym.decryptAndHash(msg[:X25519KeySize+tagSize])
	if err != nil {
		return nil, err
	}
	msg = msg[X25519KeySize+tagSize:]
	m, err := r.sym.decryptAndHash(msg[:MLKEMKeySize+tagSize])
	if err != nil {
		return nil, err
	}
	msg = msg[MLKEMKeySize+tagSize:]
	r.rs = PublicKey{X25519: x, MLKEM: m}
	if err := r.rs.check(); err != nil {
		return nil, fail("initiator key: %v", err)
	}
	// ss
	if k, err = dh(r.s.x, x); err != nil {
		return nil, err
	}
	r.sym.mixKey(k)
	clear(k)
	return r.sym.decryptAndHash(msg)
}

// RemoteStatic is the initiator's static key, authenticated by message 1.
func (r *Responder) RemoteStatic() PublicKey { return r.rs }

// WriteMessage2 returns message 2 carrying payload (empty, or
// RejectionMarker) and the transport ciphers: send protects
// executor→harness records, recv the other way.
func (r *Responder) WriteMessage2(payload []byte) (msg []byte, send, recv *CipherState, err error) {
	if r.state != 1 {
		return nil, nil, nil, errors.New("noise: WriteMessage2 out of order")
	}
	r.state = 2
	defer r.Destroy()
	if Message2Overhead+len(payload) > maxMessageSize {
		return nil, nil, nil, fail("message 2 payload of %d bytes", len(payload))
	}
	msg = make([]byte, 0, Message2Overhead+len(payload))
	// ekem: to the initiator's ephemeral KEM key, in clear.
	ss2, ct2, err := encapsulate(r.reKEM, r.entropy)
	if err != nil {
		return nil, nil, nil, err
	}
	msg = append(msg, ct2...)
	r.sym.mixHash(ct2)
	r.sym.mixKey(ss2)
	clear(ss2)
	// skem: to the initiator's static KEM key.
	ss3, ct3, err := encapsulate(r.rs.MLKEM, r.entropy)
	if err != nil {
		return nil, nil, nil, err
	}
	msg = r.sym.encryptAndHash(msg, ct3)
	r.sym.mixKeyAndHash(ss3)
	clear(ss3)
	// e
	e, err := newEphemeral(r.entropy)
	if err != nil {
		return nil, nil, nil, err
	}
	msg = append(msg, e.xPub...)
	r.sym.mixHash(e.xPub)
	msg = append(msg, e.kemPub...)
	r.sym.mixHash(e.kemPub)
	// ee
	k, err := dh(e.x, r.re)
	if err != nil {
		return nil, nil, nil, err
	}
	r.sym.mixKey(k)
	clear(k)
	// se
	if k, err = dh(e.x, r.rs.X25519); err != nil {
		return nil, nil, nil, err
	}
	r.sym.mixKey(k)
	clear(k)
	msg = r.sym.encryptAndHash(msg, payload)
	recv, send = r.sym.split()
	return msg, send, recv, nil
}

// Destroy drops a handshake that will not be finished (the registry said
// no), clearing its secrets. WriteMessage2 does it itself.
func (r *Responder) Destroy() {
	r.state = 2
	r.sym.destroy()
	r.re, r.reKEM = nil, nil
}

// CipherState protects one direction of a stream's records: AES-256-GCM,
// empty AD, nonce = 4 zero bytes ‖ big-endian counter. Records must be
// opened in order, exactly once: the nonce is implicit.
type CipherState struct {
	k    [32]byte
	aead cipher.AEAD
	n    uint64
}

// NewCipherState makes a cipher from a raw 32-byte key at nonce 0, for
// tests and vectors; a stream's ciphers come from a handshake.
func NewCipherState(key [32]byte) *CipherState { return newCipherState(key[:]) }

func newCipherState(k []byte) *CipherState {
	c := &CipherState{}
	copy(c.k[:], k)
	c.aead = newAEAD(c.k[:])
	return c
}

// MaxPlaintext is the largest plaintext of one record that Noise allows
// (65535 bytes of ciphertext); codex itself sends at most 61440.
const MaxPlaintext = maxMessageSize - tagSize

// Overhead is the size a record adds to its plaintext.
const Overhead = tagSize

// ErrDecrypt is returned for a record that does not authenticate.
var ErrDecrypt = errors.New("noise: record decryption failed")

// Encrypt appends the next record's ciphertext to dst.
func (c *CipherState) Encrypt(dst, plaintext []byte) ([]byte, error) {
	if c.aead == nil {
		return nil, errors.New("noise: cipher destroyed")
	}
	if len(plaintext) > MaxPlaintext {
		return nil, fmt.Errorf("noise: record plaintext of %d bytes", len(plaintext))
	}
	if c.n == ^uint64(0) {
		return nil, errors.New("noise: nonce exhausted")
	}
	dst = c.aead.Seal(dst, nonce(c.n), plaintext, nil)
	c.n++
	return dst, nil
}

// Decrypt appends the next record's plaintext to dst. A failure leaves
// the counter as it was; the stream is dead anyway.
func (c *CipherState) Decrypt(dst, ciphertext []byte) ([]byte, error) {
	if c.aead == nil {
		return nil, errors.New("noise: cipher destroyed")
	}
	if len(ciphertext) > maxMessageSize || len(ciphertext) < tagSize {
		return nil, ErrDecrypt
	}
	if c.n == ^uint64(0) {
		return nil, errors.New("noise: nonce exhausted")
	}
	out, err := c.aead.Open(dst, nonce(c.n), ciphertext, nil)
	if err != nil {
		return nil, ErrDecrypt
	}
	c.n++
	return out, nil
}

// Nonce is the counter of the next record.
func (c *CipherState) Nonce() uint64 { return c.n }

// Destroy clears the key this package holds (the AES key schedule inside
// crypto/aes is out of reach) and makes the cipher unusable.
func (c *CipherState) Destroy() {
	clear(c.k[:])
	c.aead = nil
}
