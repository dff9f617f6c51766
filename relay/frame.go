package relay

import (
	"errors"

	"github.com/execgo/exec-server/remote/frame"
)

// Kind is the body member of a RelayMessageFrame (spec §5); the relay looks
// at nothing else but the stream id.
type Kind = frame.Kind

// The body kinds.
const (
	KindNone      = frame.KindNone
	KindData      = frame.KindData
	KindAck       = frame.KindAck
	KindResume    = frame.KindResume
	KindReset     = frame.KindReset
	KindHeartbeat = frame.KindHeartbeat
	KindHandshake = frame.KindHandshake
)

// maxStreamID bounds what the relay keeps as a routing key; harnesses use a
// 36-byte UUID.
const maxStreamID = 128

var errFrame = errors.New("relay: malformed relay frame")

// peek reads a frame's stream id and body kind with remote/frame's decoder
// (the payload is not copied, let alone decrypted). The peers apply the
// rest of the frame rules; the relay only needs a routing key.
func peek(b []byte) (streamID string, kind Kind, err error) {
	f, err := frame.Unmarshal(b)
	if err != nil {
		return "", KindNone, errFrame
	}
	if f.StreamID == "" || len(f.StreamID) > maxStreamID || f.Kind == KindNone {
		return "", KindNone, errFrame
	}
	return f.StreamID, f.Kind, nil
}

// resetFrame encodes RelayMessageFrame{version:1, stream_id, reset{reason}}.
func resetFrame(streamID, reason string) []byte {
	return frame.Reset(streamID, reason).Marshal()
}
