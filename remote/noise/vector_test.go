package noise

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"testing/cryptotest"

	_ "github.com/execgo/exec-server/remote/noise/noisetest"
)

var update = flag.Bool("update", false, "rewrite testdata/vector-selfcheck.json")

// vector is a fixed-randomness handshake: every key and KEM draw comes from
// cryptotest's seeded source, so the messages are reproducible. It is a
// self-consistency vector (it pins our own key schedule against
// accidental change); the cross-check against the reference binary is the
// interop test (remote/harness).
type vector struct {
	Note         string `json:"note"`
	Seed         uint64 `json:"seed"`
	Prologue     string `json:"prologue_hex"`
	Authz        string `json:"authorization"`
	ResponderPub string `json:"responder_x25519_hex"`
	InitiatorPub string `json:"initiator_x25519_hex"`
	Msg1Len      int    `json:"msg1_len"`
	Msg1SHA256   string `json:"msg1_sha256"`
	Msg2Len      int    `json:"msg2_len"`
	Msg2SHA256   string `json:"msg2_sha256"`
	Record0I2R   string `json:"record0_harness_to_executor_hex"`
	Record0R2I   string `json:"record0_executor_to_harness_hex"`
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func TestFixedRandomVector(t *testing.T) {
	cryptotest.SetGlobalRandom(t, 1)
	rs, is := mustKeypair(t), mustKeypair(t)
	prologue := Prologue("env-1", "registration-1", "stream-1")
	p := handshake(t, is, rs, prologue, []byte("authz"), nil)
	r1, _ := p.iSend.Encrypt(nil, []byte(`{"jsonrpc":"2.0"}`))
	r2, _ := p.rSend.Encrypt(nil, []byte(`{"jsonrpc":"2.0"}`))
	got := vector{
		Note:         "self-consistency: Go testing/cryptotest.SetGlobalRandom(seed); responder keypair drawn first, then initiator; record plaintext {\"jsonrpc\":\"2.0\"}",
		Seed:         1,
		Prologue:     hex.EncodeToString(prologue),
		Authz:        "authz",
		ResponderPub: hex.EncodeToString(rs.Public().X25519),
		InitiatorPub: hex.EncodeToString(is.Public().X25519),
		Msg1Len:      len(p.msg1),
		Msg1SHA256:   sum(p.msg1),
		Msg2Len:      len(p.msg2),
		Msg2SHA256:   sum(p.msg2),
		Record0I2R:   hex.EncodeToString(r1),
		Record0R2I:   hex.EncodeToString(r2),
	}
	path := filepath.Join("testdata", "vector-selfcheck.json")
	b, _ := json.MarshalIndent(got, "", "  ")
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("vector differs from %s (run with -update only if the change is intended):\n%s", path, b)
	}
}

// vectorRecord is one transport record of a recorded vector.
type vectorRecord struct {
	Plaintext  string `json:"plaintext_hex"`
	Ciphertext string `json:"ciphertext_hex"`
}

// loadVector decodes testdata/name into v and returns a hex decoder that
// fails t on a bad field.
func loadVector(t *testing.T, name string, v any) func(string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
	return func(s string) []byte {
		t.Helper()
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestReferenceVector replays a handshake recorded against codex 0.169's
// executor (remote/harness TestRecordReferenceVector): from the recorded
// seeds and entropy the initiator rebuilds message 1 byte for byte, then
// accepts the reference's message 2, seals the harness record to the
// recorded ciphertext and opens the executor's record.
func TestReferenceVector(t *testing.T) {
	var v struct {
		EnvironmentID     string         `json:"environment_id"`
		RegistrationID    string         `json:"executor_registration_id"`
		StreamID          string         `json:"stream_id"`
		ExecutorPublicKey PublicKey      `json:"executor_public_key"`
		HarnessX25519     string         `json:"harness_x25519_private_hex"`
		HarnessMLKEMSeed  string         `json:"harness_mlkem768_seed_hex"`
		Entropy           string         `json:"initiator_entropy_hex"`
		Authorization     string         `json:"harness_key_authorization"`
		Msg1              string         `json:"msg1_hex"`
		Msg2              string         `json:"msg2_hex"`
		HarnessRecords    []vectorRecord `json:"harness_to_executor_records"`
		ExecutorRecords   []vectorRecord `json:"executor_to_harness_records"`
	}
	unhex := loadVector(t, "reference-vector.json", &v)
	id, err := KeypairFromSeeds(unhex(v.HarnessX25519), unhex(v.HarnessMLKEMSeed))
	if err != nil {
		t.Fatal(err)
	}
	in, err := NewInitiatorWithEntropy(id, v.ExecutorPublicKey, Prologue(v.EnvironmentID, v.RegistrationID, v.StreamID), bytes.NewReader(unhex(v.Entropy)))
	if err != nil {
		t.Fatal(err)
	}
	msg1, err := in.WriteMessage1([]byte(v.Authorization))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg1, unhex(v.Msg1)) {
		t.Fatal("message 1 differs from the recording")
	}
	msg2 := unhex(v.Msg2)
	if len(msg2) != Message2Overhead {
		t.Fatalf("recorded message 2 of %d bytes", len(msg2))
	}
	payload, send, recv, err := in.ReadMessage2(msg2)
	if err != nil || len(payload) != 0 {
		t.Fatalf("the reference's message 2: %q, %v", payload, err)
	}
	for i, r := range v.HarnessRecords {
		ct, err := send.Encrypt(nil, unhex(r.Plaintext))
		if err != nil || !bytes.Equal(ct, unhex(r.Ciphertext)) {
			t.Fatalf("harness record %d differs (%v)", i, err)
		}
	}
	for i, r := range v.ExecutorRecords {
		pt, err := recv.Decrypt(nil, unhex(r.Ciphertext))
		if err != nil || !bytes.Equal(pt, unhex(r.Plaintext)) {
			t.Fatalf("executor record %d: %v", i, err)
		}
	}
	if len(v.ExecutorRecords) == 0 {
		t.Fatal("no executor record in the vector")
	}
}

// TestReferenceHarnessVector replays a handshake between codex 0.169's
// harness and our responder (remote/harness TestReferenceHarness): the
// reference's message 1 verifies and carries the recorded key and
// authorization, message 2 is rebuilt byte for byte (the harness accepted
// it: its next record, initialize, is opened here).
func TestReferenceHarnessVector(t *testing.T) {
	var v struct {
		EnvironmentID    string         `json:"environment_id"`
		RegistrationID   string         `json:"executor_registration_id"`
		StreamID         string         `json:"stream_id"`
		ExecutorX25519   string         `json:"executor_x25519_private_hex"`
		ExecutorMLKEM    string         `json:"executor_mlkem768_seed_hex"`
		Entropy          string         `json:"responder_entropy_hex"`
		HarnessPublicKey PublicKey      `json:"harness_public_key"`
		Authorization    string         `json:"harness_key_authorization"`
		Msg1             string         `json:"msg1_hex"`
		Msg2             string         `json:"msg2_hex"`
		HarnessRecords   []vectorRecord `json:"harness_to_executor_records"`
	}
	unhex := loadVector(t, "reference-harness-vector.json", &v)
	key, err := KeypairFromSeeds(unhex(v.ExecutorX25519), unhex(v.ExecutorMLKEM))
	if err != nil {
		t.Fatal(err)
	}
	r := NewResponderWithEntropy(key, Prologue(v.EnvironmentID, v.RegistrationID, v.StreamID), bytes.NewReader(unhex(v.Entropy)))
	authz, err := r.ReadMessage1(unhex(v.Msg1))
	if err != nil {
		t.Fatalf("the reference's message 1: %v", err)
	}
	if string(authz) != v.Authorization || !r.RemoteStatic().Equal(v.HarnessPublicKey) {
		t.Fatal("message 1 carries another authorization or key")
	}
	msg2, _, recv, err := r.WriteMessage2(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg2, unhex(v.Msg2)) {
		t.Fatal("message 2 differs from the recording")
	}
	if len(v.HarnessRecords) == 0 {
		t.Fatal("no harness record in the vector")
	}
	for i, rec := range v.HarnessRecords {
		pt, err := recv.Decrypt(nil, unhex(rec.Ciphertext))
		if err != nil || !bytes.Equal(pt, unhex(rec.Plaintext)) {
			t.Fatalf("harness record %d: %v", i, err)
		}
	}
}
