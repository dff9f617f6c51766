package channel

import (
	"errors"
	"fmt"

	"github.com/execgo/exec-server/remote/frame"
)

// Reorder window of codex 0.169.
const (
	MaxGap         = 64
	MaxBufferBytes = 1 << 20
)

// ErrGap is a record too far ahead of the next expected one, or one that
// would overflow the reorder buffer.
var ErrGap = errors.New("relay stream: reorder window exceeded")

// sequencer is the seq and ack policy of a stream, the one place that
// knows how records are numbered and acknowledged (isolated because the
// reference may yet switch to seq from 1 with cumulative acks).
//
// plainSequencer is codex 0.169's: seq from 0, ack fields 0, no
// retransmission. The reliable mode of issue #11 item 5, switched on only
// when both ends advertise it, slots in here: outbound would keep each
// sealed record (the exact ciphertext; never re-seal) until acknowledged
// and stamp ack/ack_bits; inbound would also read the peer's ack fields
// and say which kept records to resend; resume frames would rewind it.
// The retention, acks and timers of that mode live in reliable.go, beside
// this numbering; a future upstream numbering (seq from 1) would be
// another sequencer.
type sequencer interface {
	// outbound numbers the next record's frame (seq, ack, ack_bits).
	outbound(f *frame.Frame) error
	// inbound takes a record (it keeps ct if it buffers it) and returns
	// the records now deliverable, in order; a duplicate returns none.
	inbound(seq uint32, ct []byte) ([][]byte, error)
	// ackState is the receive state to acknowledge: the next seq
	// expected and a bitmap of the 32 after it that are buffered.
	ackState() (next, bits uint32)
}

type plainSequencer struct {
	nextOut uint32
	outDone bool // nextOut wrapped: the stream is exhausted

	next     uint32            // next inbound seq to deliver
	held     map[uint32][]byte // buffered out-of-order records
	heldSize int
}

func newPlainSequencer() *plainSequencer { return &plainSequencer{} }

func (s *plainSequencer) outbound(f *frame.Frame) error {
	if s.outDone {
		return errors.New("relay stream: sequence number exhausted")
	}
	f.Seq = s.nextOut
	f.Ack, f.AckBits = 0, 0
	s.nextOut++
	s.outDone = s.nextOut == 0
	return nil
}

func (s *plainSequencer) inbound(seq uint32, ct []byte) ([][]byte, error) {
	if seq < s.next {
		return nil, nil // duplicate: the first copy won
	}
	if seq > s.next {
		if _, dup := s.held[seq]; dup {
			return nil, nil
		}
		if seq-s.next > MaxGap {
			return nil, fmt.Errorf("%w: seq %d while expecting %d", ErrGap, seq, s.next)
		}
		if s.heldSize+len(ct) > MaxBufferBytes {
			return nil, fmt.Errorf("%w: %d bytes buffered", ErrGap, s.heldSize+len(ct))
		}
		if s.held == nil {
			s.held = make(map[uint32][]byte)
		}
		s.held[seq] = ct
		s.heldSize += len(ct)
		return nil, nil
	}
	if s.next == ^uint32(0) {
		return nil, errors.New("relay stream: sequence number exhausted")
	}
	ready := [][]byte{ct}
	s.next++
	for {
		ct, ok := s.held[s.next]
		if !ok {
			break
		}
		delete(s.held, s.next)
		s.heldSize -= len(ct)
		ready = append(ready, ct)
		if s.next == ^uint32(0) {
			break
		}
		s.next++
	}
	return ready, nil
}

func (s *plainSequencer) ackState() (next, bits uint32) {
	for i := range uint32(32) {
		if _, ok := s.held[s.next+1+i]; ok {
			bits |= 1 << i
		}
	}
	return s.next, bits
}
