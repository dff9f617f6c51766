package executor

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
	"github.com/execgo/exec-server/remote/relay"
)

// rawStream is a stream whose records the test seals itself.
type rawStream struct {
	t          *testing.T
	ws         *websocket.Conn
	sid        string
	send, recv *noise.CipherState
	buf        []byte
}

func (r *rig) openRaw() *rawStream {
	r.t.Helper()
	id, _ := noise.GenerateKeypair()
	b := r.connect(id)
	ws := dialHarness(r.t, b.URL)
	sid := newStreamID()
	_, send, recv, err := rawHandshake(r.t, ws, r.env, b, id, sid, []byte(b.Authz))
	if err != nil {
		r.t.Fatalf("handshake: %v", err)
	}
	return &rawStream{t: r.t, ws: ws, sid: sid, send: send, recv: recv}
}

func message(json string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(json))), json...)
}

// seal encrypts records in order (the nonce is the record's index).
func (s *rawStream) seal(plain ...[]byte) [][]byte {
	var out [][]byte
	for _, p := range plain {
		ct, err := s.send.Encrypt(nil, p)
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, ct)
	}
	return out
}

func (s *rawStream) data(seq uint32, ct []byte) {
	s.t.Helper()
	if err := sendFrame(s.ws, frame.Data(s.sid, seq, ct)); err != nil {
		s.t.Fatal(err)
	}
}

// reply returns the next JSON-RPC message from the executor, or errReset.
func (s *rawStream) reply() (string, error) {
	s.t.Helper()
	for {
		if len(s.buf) >= 4 {
			n := binary.BigEndian.Uint32(s.buf)
			if uint32(len(s.buf)-4) >= n {
				m := string(s.buf[4 : 4+n])
				s.buf = s.buf[4+n:]
				return m, nil
			}
		}
		f, err := readFrame(s.ws, s.sid, 10*time.Second)
		if err != nil {
			return "", err
		}
		switch f.Kind {
		case frame.KindReset:
			if f.Reason != ResetReason {
				s.t.Errorf("reset reason %q", f.Reason)
			}
			return "", errReset
		case frame.KindData:
			if s.buf, err = s.recv.Decrypt(s.buf, f.Payload); err != nil {
				s.t.Fatalf("decrypt: %v", err)
			}
		}
	}
}

const initialize = `{"id":1,"method":"initialize","params":{"clientName":"t"}}`

func (s *rawStream) expectInitialized() {
	s.t.Helper()
	m, err := s.reply()
	if err != nil || !strings.Contains(m, `"id":1`) || !strings.Contains(m, `"result"`) {
		s.t.Fatalf("initialize answer %q %v", m, err)
	}
}

func (s *rawStream) expectReset() {
	s.t.Helper()
	if m, err := s.reply(); err != errReset {
		s.t.Fatalf("got %q %v, want a Reset", m, err)
	}
}

// The receiver rules (docs/remote.md) on both executors.
func TestStreamErrors(t *testing.T) { forEachImpl(t, streamErrors) }

func streamErrors(t *testing.T, impl string) {
	r := startRig(t, impl, relay.Faults{}, nil)
	r.waitAttached()
	chunks := func(b []byte, n int) [][]byte {
		var out [][]byte
		for len(b) > 0 {
			k := min(n, len(b))
			out = append(out, b[:k])
			b = b[k:]
		}
		return out
	}
	cases := []struct {
		name string
		run  func(s *rawStream)
	}{
		{"gap of 64 waits", func(s *rawStream) {
			// 65 records, sent as 64, 0, 1, ..., 63.
			// 4 + 256 bytes: 65 records of 4.
			m := message(initialize + strings.Repeat(" ", 256-len(initialize)))
			parts := chunks(m, 4)
			if len(parts) != 65 {
				t.Fatalf("%d parts", len(parts))
			}
			cts := s.seal(parts...)
			s.data(64, cts[64])
			for i := range 64 {
				s.data(uint32(i), cts[i])
			}
			s.expectInitialized()
		}},
		{"gap of 65 resets", func(s *rawStream) {
			cts := s.seal(message(initialize))
			s.data(65, cts[0])
			s.expectReset()
		}},
		{"duplicates dropped", func(s *rawStream) {
			parts := chunks(message(initialize), 10)
			cts := s.seal(parts...)
			for i, ct := range cts {
				s.data(uint32(i), ct)
				s.data(uint32(i), ct)
			}
			s.data(0, cts[0])
			s.expectInitialized()
			second := s.seal(message(`{"id":2,"method":"initialize","params":{"clientName":"t"}}`))
			s.data(uint32(len(cts)), second[0])
			if m, err := s.reply(); err != nil || !strings.Contains(m, `"id":2`) || !strings.Contains(m, `"error"`) {
				t.Fatalf("second initialize: %q %v", m, err)
			}
		}},
		{"two messages in one record", func(s *rawStream) {
			rec := append(message(initialize), message(`{"method":"initialized"}`)...)
			s.data(0, s.seal(rec)[0])
			s.expectInitialized()
		}},
		{"record over 60 KiB resets", func(s *rawStream) {
			s.data(0, s.seal(make([]byte, 61441))[0])
			s.expectReset()
		}},
		{"zero length prefix resets", func(s *rawStream) {
			s.data(0, s.seal([]byte{0, 0, 0, 0})[0])
			s.expectReset()
		}},
		{"bad JSON resets", func(s *rawStream) {
			s.data(0, s.seal(message(`{"id":1,`))[0])
			s.expectReset()
		}},
		{"undecryptable record resets", func(s *rawStream) {
			s.data(0, bytes.Repeat([]byte{1}, 64))
			s.expectReset()
		}},
		{"unsolicited response resets", func(s *rawStream) {
			cts := s.seal(message(initialize), message(`{"method":"initialized"}`), message(`{"id":99,"result":{}}`))
			s.data(0, cts[0])
			s.expectInitialized()
			s.data(1, cts[1])
			s.data(2, cts[2])
			if impl == "go" {
				// The engine answers a stray response with an error and
				// keeps the connection (the seed's behaviour); the
				// reference's processor exits instead.
				if m, err := s.reply(); err != nil || !strings.Contains(m, `"id":-1`) {
					t.Fatalf("got %q %v", m, err)
				}
				return
			}
			s.expectReset()
		}},
		{"malformed frames are dropped", func(s *rawStream) {
			bad := []*frame.Frame{
				{Version: 2, StreamID: s.sid, Kind: frame.KindData, SegmentCount: 1, Payload: []byte{1}},
				{Version: 1, StreamID: s.sid, Kind: frame.KindData, SegmentCount: 2, Payload: []byte{1}},
				{Version: 1, StreamID: s.sid, Kind: frame.KindData, SegmentIndex: 1, SegmentCount: 1, Payload: []byte{1}},
				{Version: 1, StreamID: s.sid, Kind: frame.KindData, SegmentCount: 1},
				{Version: 1, StreamID: " ", Kind: frame.KindData, SegmentCount: 1, Payload: []byte{1}},
				{Version: 1, StreamID: s.sid, Kind: frame.KindReset},
				{Version: 1, StreamID: s.sid},
				{Version: 1, StreamID: s.sid, Kind: frame.KindHeartbeat},
				{Version: 1, StreamID: s.sid, Kind: frame.KindAck},
				frame.Resume(s.sid, 7),
			}
			for _, f := range bad {
				r.relay.InjectToExecutor(r.env, f.Marshal(), false)
			}
			r.relay.InjectToExecutor(r.env, []byte("garbage"), false)
			r.relay.InjectToExecutor(r.env, []byte(`{"text":"frame"}`), true)
			s.data(0, s.seal(message(initialize))[0])
			s.expectInitialized()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := r.openRaw()
			s.t = t
			c.run(s)
		})
	}
	// The socket survived all of it.
	if n := r.events.count(isAttach); n != 1 {
		t.Fatalf("%d executor attachments; the socket was dropped", n)
	}
}
