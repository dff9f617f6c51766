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
