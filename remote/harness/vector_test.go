package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
	_ "github.com/execgo/exec-server/remote/noise/noisetest"
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

// ResponderVector is a handshake recorded between the reference harness
// (codex exec with the CODEX_EXEC_SERVER_NOISE_* variables) and this
// package's test executor, with the responder's secrets, for
// remote/noise to replay (testdata/reference-harness-vector.json).
type ResponderVector struct {
	Note             string          `json:"note"`
	EnvironmentID    string          `json:"environment_id"`
	RegistrationID   string          `json:"executor_registration_id"`
	StreamID         string          `json:"stream_id"`
	ExecutorX25519   string          `json:"executor_x25519_private_hex"`
	ExecutorMLKEM    string          `json:"executor_mlkem768_seed_hex"`
	Entropy          string          `json:"responder_entropy_hex"`
	HarnessPublicKey noise.PublicKey `json:"harness_public_key"`
	Authorization    string          `json:"harness_key_authorization"`
	Msg1             string          `json:"msg1_hex"`
	Msg2             string          `json:"msg2_hex"`
	HarnessRecords   []VectorRecord  `json:"harness_to_executor_records"`
}

// TestReferenceHarness runs the reference harness (`codex exec`, which
// connects its remote environment at startup) against a Go responder
// through the double: its message 1 must verify, our message 2 must
// satisfy it (it then sends its first JSON-RPC request, initialize, as a
// record we open). With EXEC_SERVER_RECORD_VECTOR=1 it records the
// exchange for remote/noise. The mock model's URL is a closed port on
// 127.0.0.1: codex is stopped before it needs one.
func TestReferenceHarness(t *testing.T) {
	bin := codexref.Bin(t)
	d := newDouble(t, "env-harness")
	xPriv, seed := fixedBytes("executor-x25519", 32), fixedBytes("executor-mlkem", 64)
	key, err := noise.KeypairFromSeeds(xPriv, seed)
	if err != nil {
		t.Fatal(err)
	}
	entropy := fixedBytes("responder-entropy", 160)
	type handshake struct {
		sid        string
		msg1, msg2 []byte
	}
	hsc := make(chan handshake, 8)
	datac := make(chan []byte, 64)
	msgs := make(chan []byte, 64)
	e := &echoExecutor{
		key:     key,
		entropy: func() io.Reader { return bytes.NewReader(entropy) },
		onHandshake: func(sid string, m1, m2 []byte) {
			hsc <- handshake{sid, bytes.Clone(m1), bytes.Clone(m2)}
		},
		onData: func(f *frame.Frame) {
			select {
			case datac <- bytes.Clone(f.Payload):
			default:
			}
		},
		serve: func(ch *channel.Channel) {
			for {
				m, err := ch.Read(context.Background())
				if err != nil {
					return
				}
				select {
				case msgs <- m:
				default:
				}
				if bytes.Contains(m, []byte(`"method":"initialize"`)) {
					// An answer shaped as the reference's, so that the
					// harness goes on (and shows it kept the stream).
					ch.Write(context.Background(), []byte(initializeResult), false)
				}
			}
		},
	}
	startEchoExecutorWith(t, d, e)

	home, work := scratch(t), scratch(t)
	cmd := exec.Command(bin, "exec", "--skip-git-repo-check", "--ephemeral", "-C", work,
		"-c", "model_provider=mock", "-c", "features.plugins=false",
		"-c", `model_providers.mock={name="mock",base_url="http://127.0.0.1:1/v1",wire_api="responses",request_max_retries=0,stream_max_retries=0}`,
		"say hi")
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "CODEX_") && !strings.HasPrefix(k, "OPENAI_") && k != "RUST_LOG" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "CODEX_HOME="+home, "RUST_LOG=warn",
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL="+d.srv.URL,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID="+d.env,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN="+harnessToken)
	var stderr syncbuf.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("codex exec output:\n%s", stderr.String())
		}
	})
	var hs handshake
	select {
	case hs = <-hsc:
	case <-time.After(30 * time.Second):
		t.Fatal("the reference harness never completed a handshake")
	}
	var first, ct []byte
	select {
	case first = <-msgs:
	case <-time.After(20 * time.Second):
		t.Fatal("no JSON-RPC message from the reference harness")
	}
	ct = <-datac
	if !bytes.Contains(first, []byte(`"method":"initialize"`)) {
		t.Fatalf("first message %s", first)
	}
	select {
	case m := <-msgs:
		if !bytes.Contains(m, []byte(`"method":"initialized"`)) {
			t.Fatalf("second message %s", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reference harness did not go on after initialize")
	}
	t.Logf("reference harness: msg1 %d bytes, msg2 %d bytes, first record %d bytes: %s", len(hs.msg1), len(hs.msg2), len(ct), first)
	if len(hs.msg1) < noise.Message1Overhead || len(hs.msg2) != noise.Message2Overhead {
		t.Fatalf("sizes %d/%d", len(hs.msg1), len(hs.msg2))
	}
	if os.Getenv("EXEC_SERVER_RECORD_VECTOR") != "1" {
		return
	}
	// Replay needs the initiator's key and authorization, which message 1
	// carries: read it again with a fresh responder.
	r := noise.NewResponder(key, noise.Prologue(d.env, e.regID, hs.sid))
	authz, err := r.ReadMessage1(hs.msg1)
	if err != nil {
		t.Fatal(err)
	}
	pt := binary.BigEndian.AppendUint32(nil, uint32(len(first)))
	pt = append(pt, first...)
	v := ResponderVector{
		Note: "recorded between codex 0.169's harness (codex exec) and a Go responder (remote/harness TestReferenceHarness); " +
			"replay: the responder from these seeds reads msg1, rebuilds msg2 byte for byte from the entropy and opens the harness record",
		EnvironmentID:    d.env,
		RegistrationID:   e.regID,
		StreamID:         hs.sid,
		ExecutorX25519:   hex.EncodeToString(xPriv),
		ExecutorMLKEM:    hex.EncodeToString(seed),
		Entropy:          hex.EncodeToString(entropy),
		HarnessPublicKey: r.RemoteStatic(),
		Authorization:    string(authz),
		Msg1:             hex.EncodeToString(hs.msg1),
		Msg2:             hex.EncodeToString(hs.msg2),
	}
	r.Destroy()
	if len(ct) == len(pt)+noise.Overhead {
		v.HarnessRecords = []VectorRecord{{hex.EncodeToString(pt), hex.EncodeToString(ct)}}
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	path := filepath.Join("..", "noise", "testdata", "reference-harness-vector.json")
	if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// initializeResult is the reference executor's initialize answer (paths
// trimmed).
const initializeResult = `{"id":1,"result":{"sessionId":"aaad07dd-2695-43f6-af8b-b95fcc11638e","environmentInfo":{"shell":{"name":"bash","path":"/bin/bash"},` +
	`"executorVersion":"0.169.0","providerId":"sha256:2101b24c143ad7dd250ba28b0acfb89d51781d78d013ebcdb1fafdba63feb222","cwd":"file:///","userHomeDir":"file:///root",` +
	`"platformOs":"linux","prependPathDirs":[],"temporaryDirectories":[],"tempDir":"file:///tmp","capabilities":{"networkProxyLaunch":true,"networkProxyReviewDomains":true,` +
	`"credentialMasking":true,"credentialMaskingCustomProviders":true,"capabilityDiscoverySandbox":true,"fsWatchMissing":true,"capabilityDiscoveryV2":true,` +
	`"environmentConfigRead":true,"httpHeaderEnvVars":true,"sandboxedFileStreaming":true,"fileWriteStreaming":true,"shellSnapshotV2":true,"windowsMxc":false,` +
	`"linuxRootWritePreservesDevices":true,"linuxApprovedRootWritePreservesRestrictions":true}}}}`
