package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// ReferenceVector is a handshake and first records recorded against the
// reference executor, with every secret of the initiator side, so that
// remote/noise can replay it offline (testdata/reference-vector.json there).
type ReferenceVector struct {
	Note              string          `json:"note"`
	EnvironmentID     string          `json:"environment_id"`
	RegistrationID    string          `json:"executor_registration_id"`
	StreamID          string          `json:"stream_id"`
	ExecutorPublicKey noise.PublicKey `json:"executor_public_key"`
	HarnessX25519     string          `json:"harness_x25519_private_hex"`
	HarnessMLKEMSeed  string          `json:"harness_mlkem768_seed_hex"`
	Entropy           string          `json:"initiator_entropy_hex"`
	Authorization     string          `json:"harness_key_authorization"`
	Msg1              string          `json:"msg1_hex"`
	Msg2              string          `json:"msg2_hex"`
	HarnessRecords    []VectorRecord  `json:"harness_to_executor_records"`
	ExecutorRecords   []VectorRecord  `json:"executor_to_harness_records"`
}

// VectorRecord is one transport record.
type VectorRecord struct {
	Plaintext  string `json:"plaintext_hex"`
	Ciphertext string `json:"ciphertext_hex"`
}

// fixedBytes is n bytes derived from label (SHA-256 in counter mode).
func fixedBytes(label string, n int) []byte {
	var out []byte
	for i := uint32(0); len(out) < n; i++ {
		h := sha256.Sum256(binary.BigEndian.AppendUint32([]byte(label), i))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// TestRecordReferenceVector records remote/noise/testdata/reference-vector.json
// from a run against the reference executor. It runs only when asked:
// EXEC_SERVER_REFERENCE set and EXEC_SERVER_RECORD_VECTOR=1.
func TestRecordReferenceVector(t *testing.T) {
	if os.Getenv("EXEC_SERVER_RECORD_VECTOR") != "1" {
		t.Skip("set EXEC_SERVER_RECORD_VECTOR=1 (and EXEC_SERVER_REFERENCE) to record the reference vector")
	}
	d := newDouble(t, "env-vector")
	startReferenceExecutor(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	xPriv, seed := fixedBytes("harness-x25519", 32), fixedBytes("harness-mlkem", 64)
	id, err := noise.KeypairFromSeeds(xPriv, seed)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := NewDialer(d.srv.URL, d.env, harnessToken, Options{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	b, err := dl.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entropy := fixedBytes("initiator-entropy", 128)
	sid := "00000000-0000-4000-8000-000000000001"
	in, err := noise.NewInitiatorWithEntropy(id, b.ExecutorPublicKey, noise.Prologue(d.env, b.ExecutorRegistrationID, sid), bytes.NewReader(entropy))
	if err != nil {
		t.Fatal(err)
	}
	msg1, err := in.WriteMessage1([]byte(b.HarnessKeyAuthorization))
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, b.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(ReadLimit)
	send(ctx, ws, frame.Resume(sid, 0))
	send(ctx, ws, frame.Handshake(sid, msg1))
	var msg2 []byte
	for msg2 == nil {
		f, err := recv(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if f != nil && f.StreamID == sid && f.Kind == frame.KindHandshake {
			msg2 = f.Payload
		}
	}
	payload, sendCS, recvCS, err := in.ReadMessage2(msg2)
	if err != nil || len(payload) != 0 {
		t.Fatalf("message 2: %q, %v", payload, err)
	}
	v := ReferenceVector{
		Note: "recorded against codex 0.169 exec-server --remote (remote/harness TestRecordReferenceVector); " +
			"replay: the initiator from these seeds and entropy rebuilds msg1 byte for byte, accepts msg2, " +
			"seals the harness records and opens the executor's",
		EnvironmentID:     d.env,
		RegistrationID:    b.ExecutorRegistrationID,
		StreamID:          sid,
		ExecutorPublicKey: b.ExecutorPublicKey,
		HarnessX25519:     hex.EncodeToString(xPriv),
		HarnessMLKEMSeed:  hex.EncodeToString(seed),
		Entropy:           hex.EncodeToString(entropy),
		Authorization:     b.HarnessKeyAuthorization,
		Msg1:              hex.EncodeToString(msg1),
		Msg2:              hex.EncodeToString(msg2),
	}
	for i, m := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientName":"vector"}}`,
	} {
		pt := binary.BigEndian.AppendUint32(nil, uint32(len(m)))
		pt = append(pt, m...)
		ct, err := sendCS.Encrypt(nil, pt)
		if err != nil {
			t.Fatal(err)
		}
		send(ctx, ws, frame.Data(sid, uint32(i), ct))
		v.HarnessRecords = append(v.HarnessRecords, VectorRecord{hex.EncodeToString(pt), hex.EncodeToString(ct)})
	}
	// The initialize response, as one record.
	for len(v.ExecutorRecords) == 0 {
		f, err := recv(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if f == nil || f.StreamID != sid || f.Kind != frame.KindData {
			continue
		}
		pt, err := recvCS.Decrypt(nil, f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		v.ExecutorRecords = append(v.ExecutorRecords, VectorRecord{hex.EncodeToString(pt), hex.EncodeToString(f.Payload)})
		t.Logf("executor record: %s", pt[4:])
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	path := filepath.Join("..", "noise", "testdata", "reference-vector.json")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}
