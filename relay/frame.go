package relay

import (
	"errors"

	"encoding/binary"
)

// Kind is the body member of a RelayMessageFrame (spec §5); the relay looks
// at nothing else but the stream id.
type Kind uint8

const (
	KindNone Kind = iota
	KindData
	KindAck
	KindResume
	KindReset
	KindHeartbeat
	KindHandshake
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindAck:
		return "ack"
	case KindResume:
		return "resume"
	case KindReset:
		return "reset"
	case KindHeartbeat:
		return "heartbeat"
	case KindHandshake:
		return "handshake"
	}
	return "none"
}

// maxStreamID bounds what the relay keeps as a routing key; harnesses use a
// 36-byte UUID.
const maxStreamID = 128

var errFrame = errors.New("relay: malformed relay frame")

// peek reads a frame's stream id and body kind. It checks the protobuf
// structure only as far as needed to find them; the peers validate the rest.
// (Hand-rolled: protobuf is not among the project's allowed libraries.)
func peek(b []byte) (streamID string, kind Kind, err error) {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag>>3 == 0 || tag>>3 > 1<<29-1 {
			return "", KindNone, errFrame
		}
		b = b[n:]
		num := tag >> 3
		switch tag & 7 {
		case 0: // varint
			_, m := binary.Uvarint(b)
			if m <= 0 {
				return "", KindNone, errFrame
			}
			b = b[m:]
		case 1: // fixed64
			if len(b) < 8 {
				return "", KindNone, errFrame
			}
			b = b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return "", KindNone, errFrame
			}
			b = b[4:]
		case 2: // length-delimited
			l, m := binary.Uvarint(b)
			if m <= 0 || l > uint64(len(b)-m) {
				return "", KindNone, errFrame
			}
			v := b[m : m+int(l)]
			switch {
			case num == 2:
				streamID = string(v)
			case num >= 5 && num <= 10:
				// oneof: the last member on the wire wins, as in protobuf.
				kind = Kind(num - 4)
			}
			b = b[m+int(l):]
		default: // groups are not in this schema
			return "", KindNone, errFrame
		}
	}
	if streamID == "" || len(streamID) > maxStreamID || kind == KindNone {
		return "", KindNone, errFrame
	}
	return streamID, kind, nil
}

// resetFrame encodes RelayMessageFrame{version:1, stream_id, reset{reason}}.
func resetFrame(streamID, reason string) []byte {
	b := make([]byte, 0, 16+len(streamID)+len(reason))
	b = append(b, 0x08, 0x01, 0x12)
	b = binary.AppendUvarint(b, uint64(len(streamID)))
	b = append(b, streamID...)
	b = append(b, 0x42)
	b = binary.AppendUvarint(b, uint64(1+uvarintLen(len(reason))+len(reason)))
	b = append(b, 0x0A)
	b = binary.AppendUvarint(b, uint64(len(reason)))
	return append(b, reason...)
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}
