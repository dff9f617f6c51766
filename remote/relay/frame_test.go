package relay

import (
	"strings"
	"testing"
)

func TestPeek(t *testing.T) {
	long := strings.Repeat("x", maxStreamID+1)
	cases := []struct {
		name   string
		in     []byte
		stream string
		kind   Kind
		ok     bool
	}{
		{"data", dataFrame("s-1", 3, []byte("ct")), "s-1", KindData, true},
		{"data seq 0", dataFrame("s-1", 0, []byte("ct")), "s-1", KindData, true},
		{"handshake", handshakeFrame("abc", []byte{1, 2, 3}), "abc", KindHandshake, true},
		{"resume", resumeFrame("abc"), "abc", KindResume, true},
		{"reset", resetFrame("abc", "why"), "abc", KindReset, true},
		{"heartbeat", rawFrame("h", 0x4A, nil), "h", KindHeartbeat, true},
		{"ack", rawFrame("h", 0x32, nil), "h", KindAck, true},
		// oneof: the last member wins.
		{"two bodies", append(dataFrame("s", 0, []byte{1}), 0x42, 0x00), "s", KindReset, true},
		{"unknown fields skipped", append([]byte{0x18, 0x05, 0x6D, 1, 2, 3, 4, 0x71, 1, 2, 3, 4, 5, 6, 7, 8}, resumeFrame("s")...), "s", KindResume, true},
		{"trace fields", append(resumeFrame("s"), 0x5A, 0x01, 'x'), "s", KindResume, true},
		{"empty", nil, "", KindNone, false},
		{"no body", []byte{0x08, 0x01, 0x12, 0x01, 's'}, "", KindNone, false},
		{"blank stream", rawFrame("", 0x3A, nil), "", KindNone, false},
		{"long stream", rawFrame(long, 0x3A, nil), "", KindNone, false},
		{"truncated length", []byte{0x12, 0x05, 's'}, "", KindNone, false},
		{"truncated varint", []byte{0x08, 0x80}, "", KindNone, false},
		{"field zero", []byte{0x02, 0x00}, "", KindNone, false},
		{"group", []byte{0x0B, 0x0C}, "", KindNone, false},
		{"garbage", []byte("not a protobuf at all"), "", KindNone, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, k, err := peek(c.in)
			if (err == nil) != c.ok || s != c.stream || k != c.kind {
				t.Fatalf("peek = %q, %v, %v; want %q, %v, ok=%v", s, k, err, c.stream, c.kind, c.ok)
			}
		})
	}
}

func TestResetFrame(t *testing.T) {
	for _, reason := range []string{"harness_disconnected", "B", strings.Repeat("r", 300)} {
		b := resetFrame("stream-B", reason)
		s, k, err := peek(b)
		if err != nil || s != "stream-B" || k != KindReset {
			t.Fatalf("peek(resetFrame) = %q %v %v", s, k, err)
		}
		if got := resetReason(b); got != reason {
			t.Fatalf("reason = %q, want %q", got, reason)
		}
		// version 1 is first, as the executor requires.
		if b[0] != 0x08 || b[1] != 0x01 {
			t.Fatalf("frame starts % x", b[:2])
		}
	}
}

func FuzzPeek(f *testing.F) {
	f.Add(dataFrame("s-1", 7, []byte("payload")))
	f.Add(resetFrame("s", "r"))
	f.Add(handshakeFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", make([]byte, 40)))
	f.Add([]byte{0x12, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, k, err := peek(b)
		if err != nil {
			return
		}
		if s == "" || len(s) > maxStreamID || k == KindNone {
			t.Fatalf("accepted %q %v", s, k)
		}
		// What the relay would send back for this stream parses again.
		if s2, k2, err := peek(resetFrame(s, "x")); err != nil || s2 != s || k2 != KindReset {
			t.Fatalf("reset for %q: %q %v %v", s, s2, k2, err)
		}
	})
}
