package frame

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The encodings below are worked out by hand from the proto3 rules and the
// tag bytes of the spec (data 2A, ack 32, resume 3A, reset 42, heartbeat
// 4A, handshake 52, traceparent 5A, tracestate 62).
func TestEncodingBytes(t *testing.T) {
	tp := &Frame{Version: 1, StreamID: "s", Kind: KindHeartbeat, Traceparent: "t", HasTraceparent: true, HasTracestate: true}
	tests := []struct {
		name string
		f    *Frame
		hex  string
	}{
		{"heartbeat", &Frame{Version: 1, StreamID: "s", Kind: KindHeartbeat}, "0801 120173 4A00"},
		{"ack frame", &Frame{Version: 1, StreamID: "s", Kind: KindAck}, "0801 120173 3200"},
		{"resume 0 is an empty submessage", Resume("s", 0), "0801 120173 3A00"},
		{"resume 5", Resume("s", 5), "0801 120173 3A02 0805"},
		{"data seq 0", Data("s", 0, []byte("ab")), "0801 120173 2A06 1801 22026162"},
		{"data seq 300", Data("s", 300, []byte("ab")), "0801 120173 2A09 08AC02 1801 22026162"},
		{"reset", Reset("s", "r"), "0801 120173 4203 0A0172"},
		{"handshake", Handshake("s", []byte("x")), "0801 120173 5203 0A0178"},
		{"ack fields", &Frame{Version: 1, StreamID: "s", Ack: 2, AckBits: 3, Kind: KindHeartbeat}, "0801 120173 1802 2003 4A00"},
		{"trace presence", tp, "0801 120173 4A00 5A0174 6200"},
		{"no body", &Frame{Version: 1, StreamID: "s"}, "0801 120173"},
		{"zero frame", &Frame{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.hex)
			got := tt.f.Marshal()
			if !bytes.Equal(got, want) {
				t.Fatalf("Marshal = % x, want % x", got, want)
			}
			back, err := Unmarshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(back, tt.f) {
				t.Fatalf("Unmarshal = %+v, want %+v", back, tt.f)
			}
		})
	}
}

// equal compares frames, treating a nil and an empty payload alike (the
// wire cannot tell them apart).
func equal(a, b *Frame) bool {
	x, y := *a, *b
	if len(x.Payload) == 0 && len(y.Payload) == 0 {
		x.Payload, y.Payload = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

func TestLargePayload(t *testing.T) {
	p := bytes.Repeat([]byte{0xAB}, 61456)
	f := Data("0b6e9a3c-7f5e-4e1b-9c55-2f0d3d3f7a10", 1<<31, p)
	b := f.Marshal()
	// version 2 + stream id 38 + tag, length 4 + seq 6 + count 2 + payload tag, length 4 + payload.
	if want := 2 + 38 + 4 + 6 + 2 + 4 + len(p); len(b) != want {
		t.Fatalf("len = %d, want %d", len(b), want)
	}
	g, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(g, f) {
		t.Fatal("round trip differs")
	}
}

func TestDecodeProto3Rules(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want *Frame
	}{
		{"unknown varint, fixed and bytes fields are skipped",
			"0801 F80701 79 0102030405060708 7D 01020304 8201 03 616263 120173 4A00",
			&Frame{Version: 1, StreamID: "s", Kind: KindHeartbeat}},
		{"last scalar wins", "0801 0802 120161 120173 4A00", &Frame{Version: 2, StreamID: "s", Kind: KindHeartbeat}},
		{"a different member replaces the body", "2A04 0805 1801 4A00", &Frame{Kind: KindHeartbeat}},
		{"the same member merges", "2A02 0805 2A02 1801", &Frame{Kind: KindData, Seq: 5, SegmentCount: 1}},
		{"unknown field inside a body", "3A04 0807 1001", &Frame{Kind: KindResume, NextSeq: 7}},
		{"uint32 truncates a 64-bit varint", "08 8180808010", &Frame{Version: 1}},
		{"empty heartbeat with content skipped", "4A02 0801", &Frame{Kind: KindHeartbeat}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Unmarshal(unhex(t, tt.hex))
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got, tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct{ name, hex string }{
		{"truncated tag", "80"},
		{"field zero", "0001"},
		{"truncated varint", "08 80"},
		{"length past the end", "1205 6162"},
		{"string not UTF-8", "1201 FF"},
		{"version as bytes", "0A01 01"},
		{"stream id as varint", "1001"},
		{"body as varint", "4801"},
		{"group wire type", "0B"},
		{"short fixed64", "79 0102"},
		{"short fixed32", "7D 01"},
		{"bad body content", "2A01 80"},
		{"payload as varint", "2A02 2001"},
		{"reason not UTF-8", "4203 0A01FF"},
		{"varint over ten bytes", "08 FFFFFFFFFFFFFFFFFFFF01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Unmarshal(unhex(t, tt.hex))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := []*Frame{
		Data("s", 0, []byte{1}),
		Handshake("s", []byte{1}),
		Reset("s", "noise_relay_protocol_error"),
		Resume("s", 0),
		{Version: 1, StreamID: "s", Kind: KindAck},
		{Version: 1, StreamID: "s", Kind: KindHeartbeat},
	}
	for _, f := range ok {
		if err := Validate(f); err != nil {
			t.Errorf("%s: %v", f.Kind, err)
		}
	}
	bad := map[string]*Frame{
		"version 2":       {Version: 2, StreamID: "s", Kind: KindHeartbeat},
		"version 0":       {StreamID: "s", Kind: KindHeartbeat},
		"blank stream id": {Version: 1, StreamID: " \t", Kind: KindHeartbeat},
		"no body":         {Version: 1, StreamID: "s"},
		"segment count 2": {Version: 1, StreamID: "s", Kind: KindData, SegmentCount: 2, Payload: []byte{1}},
		"segment index 1": {Version: 1, StreamID: "s", Kind: KindData, SegmentIndex: 1, SegmentCount: 1, Payload: []byte{1}},
		"empty data":      Data("s", 0, nil),
		"empty reason":    Reset("s", ""),
		"empty handshake": Handshake("s", nil),
	}
	for name, f := range bad {
		// The rule must hold on what a peer would decode, not only on
		// the struct.
		g, err := Unmarshal(f.Marshal())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if Validate(g) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	f.Add(uint32(1), "s", uint32(0), uint32(0), uint8(1), uint32(0), uint32(0), uint32(1), []byte("ab"), uint32(0), "", "", false, "", false)
	f.Add(uint32(1), "x", uint32(3), uint32(9), uint8(4), uint32(0), uint32(0), uint32(0), []byte(nil), uint32(0), "r", "tp", true, "", true)
	f.Fuzz(func(t *testing.T, ver uint32, id string, ack, bits uint32, kind uint8, seq, idx, cnt uint32, payload []byte, next uint32, reason, tp string, htp bool, ts string, hts bool) {
		if !utf8Valid(id, reason, tp, ts) {
			return
		}
		in := &Frame{Version: ver, StreamID: id, Ack: ack, AckBits: bits, Kind: Kind(kind % 7),
			Traceparent: tp, HasTraceparent: htp, Tracestate: ts, HasTracestate: hts}
		if !htp {
			in.Traceparent = ""
		}
		if !hts {
			in.Tracestate = ""
		}
		switch in.Kind {
		case KindData:
			in.Seq, in.SegmentIndex, in.SegmentCount, in.Payload = seq, idx, cnt, payload
		case KindResume:
			in.NextSeq = next
		case KindReset:
			in.Reason = reason
		case KindHandshake:
			in.Payload = payload
		}
		out, err := Unmarshal(in.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if !equal(out, in) {
			t.Fatalf("got %+v, want %+v", out, in)
		}
	})
}

func utf8Valid(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func FuzzUnmarshal(f *testing.F) {
	f.Add(Data("s", 3, []byte("ab")).Marshal())
	f.Add(Handshake("s", []byte("x")).Marshal())
	f.Add([]byte{0x4A, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Unmarshal(b)
		if err != nil {
			return
		}
		_ = Validate(fr)
		// What decodes re-encodes to something that decodes the same.
		again, err := Unmarshal(fr.Marshal())
		if err != nil {
			t.Fatalf("re-encoding fails to decode: %v", err)
		}
		if !equal(again, fr) {
			t.Fatalf("re-decoded %+v, want %+v", again, fr)
		}
	})
}
