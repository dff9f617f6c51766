package relay

import (
	"errors"

	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
)

// Kind is the body member of a RelayMessageFrame (remote/frame); the relay looks
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
	f, err := peekFrame(b)
	if err != nil {
		return "", KindNone, err
	}
	return f.StreamID, f.Kind, nil
}

func peekFrame(b []byte) (*frame.Frame, error) {
	f, err := frame.Unmarshal(b)
	if err != nil || f.StreamID == "" || len(f.StreamID) > maxStreamID || f.Kind == KindNone {
		return nil, errFrame
	}
	return f, nil
}

// reliableSignal reports a frame by which its sender shows it runs the
// reliability extension, by remote/channel's rules: the advertisement
// heartbeat, an ack frame, or data carrying an ack (0.169 sends none of
// these). The fields are in clear.
func reliableSignal(f *frame.Frame) bool {
	switch f.Kind {
	case KindHeartbeat:
		return f.AckBits == channel.AdvertiseMagic
	case KindAck:
		return true
	case KindData:
		return f.Ack > 0
	}
	return false
}

// resetFrame encodes RelayMessageFrame{version:1, stream_id, reset{reason}}.
func resetFrame(streamID, reason string) []byte {
	return frame.Reset(streamID, reason).Marshal()
}
