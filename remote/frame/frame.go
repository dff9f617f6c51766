// Package frame encodes and decodes the relay frame of codex's remote mode:
// the protobuf message codex.exec_server.relay.v1.RelayMessageFrame that the
// executor and the harness exchange through the rendezvous, one per binary
// websocket message.
//
// The schema has twelve fields, so it is encoded by hand (protobuf varints
// are the LEB128 of encoding/binary) rather than through a protobuf
// runtime. The encoding is the one a proto3 encoder produces: fields in
// number order, proto3 defaults omitted, the chosen member of the body
// oneof always present (an empty member is a zero-length submessage, a
// heartbeat body is 4A 00) and the optional trace fields present exactly
// when set.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Version is the only frame version codex 0.169 accepts.
const Version = 1

// Kind names the member of the body oneof.
type Kind uint8

// The body kinds; their values are not the field numbers.
const (
	KindNone      Kind = iota // no body: an invalid frame
	KindData                  // #5 RelayData
	KindAck                   // #6 RelayAck (empty)
	KindResume                // #7 RelayResume
	KindReset                 // #8 RelayReset
	KindHeartbeat             // #9 RelayHeartbeat (empty)
	KindHandshake             // #10 RelayHandshake
)

var kindNames = [...]string{"none", "data", "ack", "resume", "reset", "heartbeat", "handshake"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Field numbers of RelayMessageFrame.
const (
	fVersion     = 1
	fStreamID    = 2
	fAck         = 3
	fAckBits     = 4
	fData        = 5
	fAckFrame    = 6
	fResume      = 7
	fReset       = 8
	fHeartbeat   = 9
	fHandshake   = 10
	fTraceparent = 11
	fTracestate  = 12
)

// Frame is one RelayMessageFrame. Only the fields of Kind's submessage are
// meaningful: Seq, SegmentIndex, SegmentCount and Payload for data; NextSeq
// for resume; Reason for reset; Payload for handshake.
type Frame struct {
	Version  uint32
	StreamID string
	// Ack and AckBits are reserved (always 0 from codex 0.169).
	Ack     uint32
	AckBits uint32

	Kind         Kind
	Seq          uint32
	SegmentIndex uint32
	SegmentCount uint32
	Payload      []byte
	NextSeq      uint32
	Reason       string

	// Traceparent and Tracestate are proto3 optional: Has* gives presence.
	Traceparent    string
	HasTraceparent bool
	Tracestate     string
	HasTracestate  bool
}

// Data returns a data frame as codex sends it (one segment).
func Data(streamID string, seq uint32, ciphertext []byte) *Frame {
	return &Frame{Version: Version, StreamID: streamID, Kind: KindData, Seq: seq, SegmentCount: 1, Payload: ciphertext}
}

// Handshake returns a handshake frame carrying one Noise handshake message.
func Handshake(streamID string, msg []byte) *Frame {
	return &Frame{Version: Version, StreamID: streamID, Kind: KindHandshake, Payload: msg}
}

// Resume returns a resume frame.
func Resume(streamID string, nextSeq uint32) *Frame {
	return &Frame{Version: Version, StreamID: streamID, Kind: KindResume, NextSeq: nextSeq}
}

// Reset returns a reset frame.
func Reset(streamID, reason string) *Frame {
	return &Frame{Version: Version, StreamID: streamID, Kind: KindReset, Reason: reason}
}

// Append appends f's encoding to b. Strings are written as given (Validate
// checks them); Kind must be one of the body kinds or KindNone (no body).
func (f *Frame) Append(b []byte) []byte {
	b = appendUint(b, fVersion, f.Version)
	if f.StreamID != "" {
		b = appendBytes(b, fStreamID, f.StreamID)
	}
	b = appendUint(b, fAck, f.Ack)
	b = appendUint(b, fAckBits, f.AckBits)
	switch f.Kind {
	case KindData:
		n := uintSize(f.Seq) + uintSize(f.SegmentIndex) + uintSize(f.SegmentCount) + bytesSize(len(f.Payload))
		b = appendTag(b, fData, wireBytes)
		b = binary.AppendUvarint(b, uint64(n))
		b = appendUint(b, 1, f.Seq)
		b = appendUint(b, 2, f.SegmentIndex)
		b = appendUint(b, 3, f.SegmentCount)
		if len(f.Payload) > 0 {
			b = appendBytes(b, 4, f.Payload)
		}
	case KindAck:
		b = append(b, fAckFrame<<3|wireBytes, 0)
	case KindResume:
		b = appendTag(b, fResume, wireBytes)
		b = binary.AppendUvarint(b, uint64(uintSize(f.NextSeq)))
		b = appendUint(b, 1, f.NextSeq)
	case KindReset:
		b = appendTag(b, fReset, wireBytes)
		b = binary.AppendUvarint(b, uint64(bytesSize(len(f.Reason))))
		if f.Reason != "" {
			b = appendBytes(b, 1, f.Reason)
		}
	case KindHeartbeat:
		b = append(b, fHeartbeat<<3|wireBytes, 0)
	case KindHandshake:
		b = appendTag(b, fHandshake, wireBytes)
		b = binary.AppendUvarint(b, uint64(bytesSize(len(f.Payload))))
		if len(f.Payload) > 0 {
			b = appendBytes(b, 1, f.Payload)
		}
	}
	if f.HasTraceparent {
		b = appendBytes(b, fTraceparent, f.Traceparent)
	}
	if f.HasTracestate {
		b = appendBytes(b, fTracestate, f.Tracestate)
	}
	return b
}

// Marshal returns f's encoding.
func (f *Frame) Marshal() []byte {
	return f.Append(make([]byte, 0, 32+len(f.StreamID)+len(f.Payload)+len(f.Reason)))
}

// Protobuf wire types used here.
const (
	wireVarint = 0
	wireI64    = 1
	wireBytes  = 2
	wireI32    = 5
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed relay frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Unmarshal decodes a frame as a proto3 decoder would: unknown fields are
// skipped, a repeated scalar keeps its last value, a repeated body member
// merges into the previous one, and a different body member replaces it.
// Payload aliases b. Strings must be UTF-8 (proto3 requires it). A known
// field with the wrong wire type is an error. Unmarshal does not apply
// the relay's rules; see Validate.
func Unmarshal(b []byte) (*Frame, error) {
	f := &Frame{}
	for len(b) > 0 {
		num, typ, val, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		switch num {
		case fVersion, fAck, fAckBits:
			v, err := varintField(typ, val)
			if err != nil {
				return nil, err
			}
			switch num {
			case fVersion:
				f.Version = v
			case fAck:
				f.Ack = v
			default:
				f.AckBits = v
			}
		case fStreamID, fTraceparent, fTracestate:
			s, err := stringField(typ, val)
			if err != nil {
				return nil, err
			}
			switch num {
			case fStreamID:
				f.StreamID = s
			case fTraceparent:
				f.Traceparent, f.HasTraceparent = s, true
			default:
				f.Tracestate, f.HasTracestate = s, true
			}
		case fData, fAckFrame, fResume, fReset, fHeartbeat, fHandshake:
			if typ != wireBytes {
				return nil, malformed("field %d has wire type %d", num, typ)
			}
			k := Kind(num - fData + 1)
			if f.Kind != k {
				// A different member replaces the body.
				f.Kind = k
				f.Seq, f.SegmentIndex, f.SegmentCount, f.NextSeq = 0, 0, 0, 0
				f.Payload, f.Reason = nil, ""
			}
			if err := f.decodeBody(k, val); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

func (f *Frame) decodeBody(k Kind, b []byte) error {
	for len(b) > 0 {
		num, typ, val, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case k == KindData && num >= 1 && num <= 3, k == KindResume && num == 1:
			v, err := varintField(typ, val)
			if err != nil {
				return err
			}
			switch {
			case k == KindResume:
				f.NextSeq = v
			case num == 1:
				f.Seq = v
			case num == 2:
				f.SegmentIndex = v
			default:
				f.SegmentCount = v
			}
		case k == KindData && num == 4, k == KindHandshake && num == 1:
			if typ != wireBytes {
				return malformed("%s field %d has wire type %d", k, num, typ)
			}
			f.Payload = val
		case k == KindReset && num == 1:
			s, err := stringField(typ, val)
			if err != nil {
				return err
			}
			f.Reason = s
		}
	}
	return nil
}

// next splits off one field. For a varint val holds its encoding; for
// fixed and length-delimited fields, its bytes.
func next(b []byte) (num uint64, typ int, val, rest []byte, err error) {
	tag, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, nil, nil, malformed("bad tag")
	}
	b = b[n:]
	num, typ = tag>>3, int(tag&7)
	if num == 0 || num > 1<<29-1 {
		return 0, 0, nil, nil, malformed("field number %d", num)
	}
	switch typ {
	case wireVarint:
		_, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, 0, nil, nil, malformed("bad varint in field %d", num)
		}
		return num, typ, b[:n], b[n:], nil
	case wireI64:
		if len(b) < 8 {
			return 0, 0, nil, nil, malformed("short fixed64 in field %d", num)
		}
		return num, typ, b[:8], b[8:], nil
	case wireI32:
		if len(b) < 4 {
			return 0, 0, nil, nil, malformed("short fixed32 in field %d", num)
		}
		return num, typ, b[:4], b[4:], nil
	case wireBytes:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return 0, 0, nil, nil, malformed("bad length in field %d", num)
		}
		return num, typ, b[n : n+int(l) : n+int(l)], b[n+int(l):], nil
	default:
		// Groups (3, 4) are long deprecated; nothing in this schema or
		// its history uses them.
		return 0, 0, nil, nil, malformed("wire type %d in field %d", typ, num)
	}
}

func varintField(typ int, val []byte) (uint32, error) {
	if typ != wireVarint {
		return 0, malformed("varint field has wire type %d", typ)
	}
	v, _ := binary.Uvarint(val)
	return uint32(v), nil // proto3 truncates a uint32's varint
}

func stringField(typ int, val []byte) (string, error) {
	if typ != wireBytes {
		return "", malformed("string field has wire type %d", typ)
	}
	if !utf8.Valid(val) {
		return "", malformed("string is not UTF-8")
	}
	return string(val), nil
}

func appendTag(b []byte, num, typ int) []byte {
	return binary.AppendUvarint(b, uint64(num)<<3|uint64(typ))
}

func appendUint(b []byte, num int, v uint32) []byte {
	if v == 0 {
		return b
	}
	return binary.AppendUvarint(appendTag(b, num, wireVarint), uint64(v))
}

func appendBytes[T string | []byte](b []byte, num int, v T) []byte {
	b = appendTag(b, num, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// uintSize is the encoded size of a uint32 field in a submessage (all its
// field numbers fit a one-byte tag).
func uintSize(v uint32) int {
	if v == 0 {
		return 0
	}
	return 1 + varintLen(uint64(v))
}

func bytesSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + varintLen(uint64(n)) + n
}

// Validate applies the executor's frame rules (codex 0.169); a frame that
// fails them is dropped silently, without a Reset.
func Validate(f *Frame) error {
	switch {
	case f.Version != Version:
		return fmt.Errorf("relay frame version %d", f.Version)
	case strings.TrimSpace(f.StreamID) == "":
		return errors.New("relay frame has a blank stream id")
	case f.Kind == KindNone:
		return errors.New("relay frame has no body")
	case f.Kind == KindData && (f.SegmentIndex != 0 || f.SegmentCount != 1):
		return fmt.Errorf("relay data segment %d of %d", f.SegmentIndex, f.SegmentCount)
	case f.Kind == KindData && len(f.Payload) == 0:
		return errors.New("relay data has an empty payload")
	case f.Kind == KindReset && f.Reason == "":
		return errors.New("relay reset has an empty reason")
	case f.Kind == KindHandshake && len(f.Payload) == 0:
		return errors.New("relay handshake has an empty payload")
	}
	return nil
}
