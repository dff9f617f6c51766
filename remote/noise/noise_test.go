package noise

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPrologueVector(t *testing.T) {
	// The vector of the reference's own prologue test.
	want := "0000000000000020" + hex.EncodeToString([]byte("codex-exec-server-relay-noise/v1")) +
		"0000000000000005" + hex.EncodeToString([]byte("env-1")) +
		"000000000000000e" + hex.EncodeToString([]byte("registration-1")) +
		"0000000000000008" + hex.EncodeToString([]byte("stream-1"))
	if got := hex.EncodeToString(Prologue("env-1", "registration-1", "stream-1")); got != want {
		t.Fatalf("prologue\n got %s\nwant %s", got, want)
	}
}

func TestSizes(t *testing.T) {
	if Message1Overhead != 3568 || Message2Overhead != 3424 {
		t.Fatalf("overheads %d, %d", Message1Overhead, Message2Overhead)
	}
}

func mustKeypair(t testing.TB) *Keypair {
	t.Helper()
	k, err := GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type pair struct {
	iSend, iRecv, rSend, rRecv *CipherState
	msg1, msg2                 []byte
	auth, reply                []byte
	remote                     PublicKey
}

// handshake runs both sides; msg2Payload is what the responder answers.
func handshake(t *testing.T, is, rs *Keypair, prologue []byte, auth, msg2Payload []byte) *pair {
	t.Helper()
	in, err := NewInitiator(is, rs.Public(), prologue)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := in.WriteMessage1(auth)
	if err != nil {
		t.Fatal(err)
	}
	re := NewResponder(rs, prologue)
	gotAuth, err := re.ReadMessage1(m1)
	if err != nil {
		t.Fatalf("ReadMessage1: %v", err)
	}
	m2, rSend, rRecv, err := re.WriteMessage2(msg2Payload)
	if err != nil {
		t.Fatal(err)
	}
	reply, iSend, iRecv, err := in.ReadMessage2(m2)
	if err != nil {
		t.Fatalf("ReadMessage2: %v", err)
	}
	return &pair{iSend, iRecv, rSend, rRecv, m1, m2, gotAuth, reply, re.RemoteStatic()}
}

func TestRoundTrip(t *testing.T) {
	is, rs := mustKeypair(t), mustKeypair(t)
	prologue := Prologue("env", "reg", "7c1e2a4e-0d7e-4d55-9b8c-0e1d2f3a4b5c")
	for _, tt := range []struct {
		name        string
		auth, reply []byte
		len1, len2  int
	}{
		{"empty reply", []byte("authorization-token-27-byte"), nil, 3595, 3424},
		{"rejection marker", []byte("a"), []byte(RejectionMarker), 3569, 3465},
		{"largest authorization", bytes.Repeat([]byte("x"), MaxAuthorization), nil, 3568 + 4096, 3424},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := handshake(t, is, rs, prologue, tt.auth, tt.reply)
			if len(p.msg1) != tt.len1 || len(p.msg2) != tt.len2 {
				t.Fatalf("sizes %d/%d, want %d/%d", len(p.msg1), len(p.msg2), tt.len1, tt.len2)
			}
			if !bytes.Equal(p.auth, tt.auth) || !bytes.Equal(p.reply, tt.reply) {
				t.Fatalf("payloads %q/%q", p.auth, p.reply)
			}
			if !p.remote.Equal(is.Public()) {
				t.Fatal("responder learned a different initiator key")
			}
			for n := range 3 {
				msg := bytes.Repeat([]byte{byte(n)}, 100*n)
				c, err := p.iSend.Encrypt(nil, msg)
				if err != nil {
					t.Fatal(err)
				}
				if len(c) != len(msg)+Overhead {
					t.Fatalf("record of %d bytes for %d", len(c), len(msg))
				}
				got, err := p.rRecv.Decrypt(nil, c)
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("harness→executor record %d: %v", n, err)
				}
				c, _ = p.rSend.Encrypt(nil, msg)
				got, err = p.iRecv.Decrypt(nil, c)
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("executor→harness record %d: %v", n, err)
				}
			}
			// The two directions have different keys.
			c, _ := p.iSend.Encrypt(nil, []byte("x"))
			if _, err := p.iRecv.Decrypt(nil, c); err == nil {
				t.Fatal("a record opened with the other direction's key")
			}
		})
	}
}

func TestRecordOrderAndTamper(t *testing.T) {
	p := handshake(t, mustKeypair(t), mustKeypair(t), nil, []byte("a"), nil)
	c0, _ := p.iSend.Encrypt(nil, []byte("zero"))
	c1, _ := p.iSend.Encrypt(nil, []byte("one"))
	if _, err := p.rRecv.Decrypt(nil, c1); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("out-of-order record: %v", err)
	}
	bad := bytes.Clone(c0)
	bad[0] ^= 1
	if _, err := p.rRecv.Decrypt(nil, bad); !errors.Is(err, ErrDecrypt) {
		t.Fatalf("tampered record: %v", err)
	}
	if _, err := p.rRecv.Decrypt(nil, c0); err != nil {
		t.Fatalf("failures must not advance the counter: %v", err)
	}
	if _, err := p.rRecv.Decrypt(nil, c1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.iSend.Encrypt(nil, make([]byte, MaxPlaintext+1)); err == nil {
		t.Fatal("oversize record accepted")
	}
	p.iSend.Destroy()
	if _, err := p.iSend.Encrypt(nil, []byte("x")); err == nil {
		t.Fatal("destroyed cipher still encrypts")
	}
}

// Every byte of either message is authenticated: the key schedule, a tag
// or a KEM decapsulation fails somewhere downstream.
func TestTamperedHandshake(t *testing.T) {
	is, rs := mustKeypair(t), mustKeypair(t)
	prologue := Prologue("e", "r", "s")
	offsets1 := []int{0, 1087, 1088, 1119, 1120, 2303, 2304, 2351, 2352, 3551, 3552, 3568, 3570}
	for _, off := range offsets1 {
		in, _ := NewInitiator(is, rs.Public(), prologue)
		m1, _ := in.WriteMessage1([]byte("auth"))
		m1[off] ^= 0x40
		if _, err := NewResponder(rs, prologue).ReadMessage1(m1); !errors.Is(err, ErrHandshake) {
			t.Errorf("message 1 flipped at %d: err = %v", off, err)
		}
	}
	offsets2 := []int{0, 1087, 1088, 2191, 2192, 2223, 2224, 3407, 3408, 3423}
	for _, off := range offsets2 {
		in, _ := NewInitiator(is, rs.Public(), prologue)
		m1, _ := in.WriteMessage1([]byte("auth"))
		re := NewResponder(rs, prologue)
		if _, err := re.ReadMessage1(m1); err != nil {
			t.Fatal(err)
		}
		m2, _, _, _ := re.WriteMessage2(nil)
		m2[off] ^= 0x40
		if _, _, _, err := in.ReadMessage2(m2); !errors.Is(err, ErrHandshake) {
			t.Errorf("message 2 flipped at %d: err = %v", off, err)
		}
	}
}

func TestHandshakeMismatch(t *testing.T) {
	is, rs, other := mustKeypair(t), mustKeypair(t), mustKeypair(t)
	t.Run("prologue", func(t *testing.T) {
		in, _ := NewInitiator(is, rs.Public(), Prologue("e", "r", "s1"))
		m1, _ := in.WriteMessage1(nil)
		if _, err := NewResponder(rs, Prologue("e", "r", "s2")).ReadMessage1(m1); !errors.Is(err, ErrHandshake) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("u32 prologue is not u64", func(t *testing.T) {
		p := Prologue("e", "r", "s")
		in, _ := NewInitiator(is, rs.Public(), p[4:])
		m1, _ := in.WriteMessage1(nil)
		if _, err := NewResponder(rs, p).ReadMessage1(m1); !errors.Is(err, ErrHandshake) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("pinned key is not the responder's", func(t *testing.T) {
		in, _ := NewInitiator(is, other.Public(), nil)
		m1, _ := in.WriteMessage1(nil)
		if _, err := NewResponder(rs, nil).ReadMessage1(m1); !errors.Is(err, ErrHandshake) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("short and long messages", func(t *testing.T) {
		for _, n := range []int{0, Message1Overhead - 1, 65536} {
			if _, err := NewResponder(rs, nil).ReadMessage1(make([]byte, n)); !errors.Is(err, ErrHandshake) {
				t.Fatalf("%d bytes: err = %v", n, err)
			}
		}
	})
	t.Run("out of order calls", func(t *testing.T) {
		in, _ := NewInitiator(is, rs.Public(), nil)
		if _, _, _, err := in.ReadMessage2(nil); err == nil {
			t.Fatal("ReadMessage2 before WriteMessage1")
		}
		if _, _, _, err := NewResponder(rs, nil).WriteMessage2(nil); err == nil {
			t.Fatal("WriteMessage2 before ReadMessage1")
		}
	})
	t.Run("bad pinned key", func(t *testing.T) {
		if _, err := NewInitiator(is, PublicKey{X25519: make([]byte, 32), MLKEM: make([]byte, 10)}, nil); err == nil {
			t.Fatal("accepted")
		}
	})
}

func TestPublicKeyJSON(t *testing.T) {
	k := mustKeypair(t).Public()
	b, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	var back PublicKey
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(k) {
		t.Fatal("round trip differs")
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || len(m) != 3 || m["suite"] != Suite {
		t.Fatalf("object %v (%v)", m, err)
	}
	good := func() map[string]any {
		return map[string]any{"suite": Suite, "x25519_public_key": m["x25519_public_key"], "mlkem768_public_key": m["mlkem768_public_key"]}
	}
	bad := map[string]func(map[string]any){
		"unknown field": func(o map[string]any) { o["extra"] = 1 },
		"missing suite": func(o map[string]any) { delete(o, "suite") },
		"missing key":   func(o map[string]any) { delete(o, "mlkem768_public_key") },
		"wrong suite":   func(o map[string]any) { o["suite"] = "Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256" },
		"short x25519":  func(o map[string]any) { o["x25519_public_key"] = "AAAA" },
		"unpadded":      func(o map[string]any) { o["x25519_public_key"] = strings.TrimRight(m["x25519_public_key"], "=") },
		"url base64": func(o map[string]any) {
			o["mlkem768_public_key"] = strings.NewReplacer("+", "-", "/", "_").Replace(m["mlkem768_public_key"])
		},
		"number": func(o map[string]any) { o["suite"] = 1 },
		"unreduced kem": func(o map[string]any) {
			o["mlkem768_public_key"] = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, 1184))
		},
	}
	for name, mutate := range bad {
		o := good()
		mutate(o)
		b, _ := json.Marshal(o)
		if err := json.Unmarshal(b, &back); err == nil {
			t.Errorf("%s: accepted %s", name, b)
		}
	}
}

func FuzzResponder(f *testing.F) {
	is, err := GenerateKeypair()
	if err != nil {
		f.Fatal(err)
	}
	rs, _ := GenerateKeypair()
	in, _ := NewInitiator(is, rs.Public(), nil)
	m1, _ := in.WriteMessage1([]byte("auth"))
	f.Add(m1)
	f.Add(m1[:Message1Overhead])
	f.Fuzz(func(t *testing.T, msg []byte) {
		r := NewResponder(rs, nil)
		p, err := r.ReadMessage1(msg)
		if err != nil {
			return
		}
		// Only a message made with the pinned key gets through, and
		// then the handshake can finish.
		if _, _, _, err := r.WriteMessage2(p); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzInitiatorMessage2(f *testing.F) {
	is, _ := GenerateKeypair()
	rs, _ := GenerateKeypair()
	f.Add(make([]byte, Message2Overhead))
	f.Fuzz(func(t *testing.T, msg []byte) {
		in, _ := NewInitiator(is, rs.Public(), nil)
		if _, err := in.WriteMessage1(nil); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := in.ReadMessage2(msg); err == nil {
			t.Fatal("a forged message 2 was accepted")
		}
	})
}

func FuzzPublicKeyJSON(f *testing.F) {
	k, _ := GenerateKeypair()
	b, _ := json.Marshal(k.Public())
	f.Add(b)
	f.Add([]byte(`{"suite":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p PublicKey
		if err := json.Unmarshal(b, &p); err != nil {
			return
		}
		if len(p.X25519) != 32 || len(p.MLKEM) != 1184 {
			t.Fatalf("accepted key of %d/%d bytes", len(p.X25519), len(p.MLKEM))
		}
	})
}

// BenchmarkHandshake is one full handshake, both sides (what a stream's
// setup costs in CPU, without the registry and relay round trips).
func BenchmarkHandshake(b *testing.B) {
	is, rs := mustKeypair(b), mustKeypair(b)
	prologue := Prologue("env", "reg", "stream")
	for b.Loop() {
		in, _ := NewInitiator(is, rs.Public(), prologue)
		m1, _ := in.WriteMessage1([]byte("authorization"))
		re := NewResponder(rs, prologue)
		if _, err := re.ReadMessage1(m1); err != nil {
			b.Fatal(err)
		}
		m2, _, _, _ := re.WriteMessage2(nil)
		if _, _, _, err := in.ReadMessage2(m2); err != nil {
			b.Fatal(err)
		}
	}
}
