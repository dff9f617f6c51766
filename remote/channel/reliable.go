package channel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/remote/frame"
)

// Reliability beyond codex 0.169 (issue #11 item 5), on only when both
// ends support it, so that a 0.169 peer interoperates unchanged:
//
//   - Numbering is unchanged (seq from 0) and the receiver is the 0.169
//     one: a retransmission is an exact copy (same seq, same ciphertext;
//     never re-sealed) that a receiver drops when it has it already.
//   - Advertisement: a heartbeat whose ack_bits is AdvertiseMagic, sent
//     when the channel starts and again with the first data records until
//     the peer is known. 0.169 ignores heartbeats. The peer is reliable
//     once its advertisement, an ack frame (0.169 never sends one) or a
//     data frame with ack > 0 arrives; a data frame before any of those
//     suggests a 0.169 peer.
//   - Only toward a reliable peer: ack = our next expected seq + 1 and bit
//     i of ack_bits = record next+1+i is buffered, on every data and ack
//     frame; a standalone ack frame shortly after data (or a duplicate:
//     our last ack may have been lost) arrives. A 0.169 peer only ever
//     sees ack = ack_bits = 0 from us.
//   - The sender keeps each sealed record until acknowledged, at most
//     maxInflight records and maxInflightBytes (inside the receiver's
//     0.169 window of 64 records and 1 MiB, so a resent first record never
//     overflows the receiver's gap), and resends the ones neither
//     acknowledged nor buffered after rto, doubling up to maxRTO. The rto
//     is measured as in RFC 6298 (SRTT + max(4·RTTVAR, rtoSlack), from
//     records acknowledged without having been resent), initialRTO
//     before the first sample. A full
//     window blocks the writer while the peer is reliable, and for at most
//     discoverTimeout while its kind is unknown; otherwise the oldest kept
//     record is given up (a peer that turns out reliable late still gets
//     the recent ones resent), and after plainGiveUp records to a
//     0.169-looking peer nothing is kept.
//
// A relay can strip or forge the advertisement and the ack fields: the
// stream then runs without reliability, or one end waits for acks that
// never come. Both are availability attacks, which a relay can mount
// anyway by dropping frames; records stay unreadable and unforgeable.
//
// Resume across a lost relay socket: with a reliable peer a failed send
// does not end the stream (the record is kept); the owner dials a new
// socket and calls Rebind, which sends resume{next_seq: our next expected
// seq}; a peer receiving resume sends again every kept record from
// next_seq on, and an ack; that ack makes the rebound end send again every
// kept record the peer has not got (or the retransmit timer does, after
// rto, if no ack comes). The relay must let the
// stream id move to the new socket (and not reset it when the old one
// goes) for this to work; codex 0.169's relay behaviour is unknown.

// AdvertiseMagic is the ack_bits of the advertisement heartbeat ("RLY1").
const AdvertiseMagic = 0x524C5931

const (
	maxInflight      = 48
	maxInflightBytes = 900 << 10
	initialRTO       = 250 * time.Millisecond
	maxRTO           = 4 * time.Second
	ackDelay         = 5 * time.Millisecond
	// rtoSlack is the least the rto exceeds the smoothed round trip by:
	// a lone record's ack may wait ackDelay at the receiver, and a
	// loaded machine's scheduling adds a few ms more. minRTO bounds it
	// below whatever the samples say.
	rtoSlack = 2 * ackDelay
	minRTO   = 15 * time.Millisecond
	// The receiver acks at once, not after ackDelay, once this much has
	// arrived since its last ack: a quarter of the sender's window, so
	// that a bulk sender never drains its window waiting for the timer
	// (900 KiB per 5 ms capped a stream at about 180 MB/s).
	ackEveryRecords = maxInflight / 4
	ackEveryBytes   = maxInflightBytes / 4
	discoverTimeout = time.Second
	maxAdvertise    = 4
	plainGiveUp     = 2 * maxInflight
)

type peerKind uint8

const (
	peerUnknown peerKind = iota
	peerPlain
	peerReliable
)

type sentRecord struct {
	f       *frame.Frame
	sentAt  time.Time
	sacked  bool
	resent  bool // its ack is no round-trip sample (Karn)
	sending int  // sends of it under way: its payload is in use
	dropped bool // no longer kept: recycle the payload when sending is 0
}

type reliable struct {
	c *Channel

	mu       sync.Mutex
	peer     peerKind
	unacked  []*sentRecord // in seq order
	bytes    int
	space    chan struct{} // a token when the window may have room
	rto      time.Duration // current, with backoff
	srtt     time.Duration // 0: no sample yet
	rttvar   time.Duration
	rtx      *time.Timer
	ackTimer *time.Timer
	ackDue   bool
	inRecs   int // data records arrived since our last ack went out
	inBytes  int
	adverts  int  // advertisements sent
	keep     bool // records are kept (false once given up on a plain peer)
	plainN   int  // records sent since the peer looked plain
	// awaitAck: resume went out on a new socket; the kept records go
	// again once the peer's first ack there says which it has (rebound).
	awaitAck bool
	resent   atomic.Uint64
}

func newReliable(c *Channel) *reliable {
	r := &reliable{c: c, space: make(chan struct{}, 1), rto: initialRTO, keep: true}
	r.rtx = time.AfterFunc(time.Hour, r.retransmit)
	r.rtx.Stop()
	r.ackTimer = time.AfterFunc(time.Hour, r.sendAck)
	r.ackTimer.Stop()
	return r
}

func (r *reliable) stop() {
	r.rtx.Stop()
	r.ackTimer.Stop()
	r.mu.Lock()
	for _, rec := range r.unacked {
		r.drop(rec)
	}
	r.unacked = nil
	r.mu.Unlock()
}

// drop stops keeping rec (r.mu held): its payload goes back to the pool
// now, or when the last send of it under way returns.
func (r *reliable) drop(rec *sentRecord) {
	r.bytes -= len(rec.f.Payload)
	rec.dropped = true
	if rec.sending == 0 {
		putRecord(rec.f.Payload)
		rec.f.Payload = nil
	}
}

// dropFirst drops the oldest kept record (r.mu held).
func (r *reliable) dropFirst() {
	r.drop(r.unacked[0])
	r.unacked[0] = nil
	r.unacked = r.unacked[1:]
}

// sendDone ends a send of rec begun under r.mu.
func (r *reliable) sendDone(rec *sentRecord) {
	r.mu.Lock()
	rec.sending--
	if rec.dropped && rec.sending == 0 {
		putRecord(rec.f.Payload)
		rec.f.Payload = nil
	}
	r.mu.Unlock()
}

// advertise sends the advertisement, at most maxAdvertise times and
// only while the peer is not known to be reliable.
func (r *reliable) advertise() {
	r.mu.Lock()
	skip := r.adverts >= maxAdvertise || r.peer == peerReliable
	r.adverts++
	r.mu.Unlock()
	if skip {
		return
	}
	f := &frame.Frame{Version: frame.Version, StreamID: r.c.streamID, Kind: frame.KindHeartbeat, AckBits: AdvertiseMagic}
	_ = r.c.sendFrame(r.c.ctx, f, false)
}

// stamps reports whether outbound frames carry ack fields.
func (r *reliable) stamps() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peer == peerReliable
}

// stamp sets the ack fields from the receive state.
func stamp(f *frame.Frame, next, bits uint32) {
	f.Ack, f.AckBits = next+1, bits
}

func (r *reliable) full(size int) bool {
	return len(r.unacked) >= maxInflight || len(r.unacked) > 0 && r.bytes+size > maxInflightBytes
}

// waitRoom blocks the writer while the window is full.
func (r *reliable) waitRoom(ctx context.Context, size int) error {
	var deadline <-chan time.Time
	for {
		r.mu.Lock()
		full := r.keep && r.full(size)
		unknown := r.peer == peerUnknown
		if full && r.peer == peerPlain {
			r.dropFirst()
			full = false
		}
		r.mu.Unlock()
		if !full {
			return nil
		}
		if unknown && deadline == nil {
			t := time.NewTimer(discoverTimeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-r.space:
		case <-deadline:
			r.mu.Lock()
			if r.peer == peerUnknown {
				r.setKind(peerPlain)
			}
			r.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		case <-r.c.done:
			return r.c.endErr
		}
	}
}

// sent records a data frame about to be sent. It returns the record
// kept, whose send the caller ends with sendDone, or nil if none is kept.
func (r *reliable) sent(f *frame.Frame) *sentRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peer == peerPlain {
		r.plainN++
		if r.plainN > plainGiveUp {
			r.keep = false
			for len(r.unacked) > 0 {
				r.dropFirst()
			}
			r.unacked, r.bytes = nil, 0
		}
	}
	if !r.keep {
		return nil
	}
	rec := &sentRecord{f: f, sentAt: time.Now(), sending: 1}
	r.unacked = append(r.unacked, rec)
	r.bytes += len(f.Payload)
	if r.peer == peerReliable && len(r.unacked) == 1 {
		r.rtx.Reset(r.rto)
	}
	return rec
}

// setKind records what the peer is; r.mu is held.
func (r *reliable) setKind(k peerKind) {
	if r.peer == k || r.peer == peerReliable {
		return
	}
	r.peer = k
	if k == peerReliable && len(r.unacked) > 0 {
		r.rtx.Reset(r.rto)
	}
	select {
	case r.space <- struct{}{}:
	default:
	}
}

// inbound handles the reliability side of an inbound frame: what the peer
// is, and its ack fields.
func (r *reliable) inbound(f *frame.Frame) {
	if again := r.acked(f); len(again) > 0 {
		r.resent.Add(uint64(len(again)))
		r.sendAll(again)
	}
}

// acked takes an inbound frame's acknowledgement; it returns the records
// to send again now: after a Rebind, those the peer's first ack shows it
// lacks.
func (r *reliable) acked(f *frame.Frame) []*sentRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case f.Kind == frame.KindHeartbeat && f.AckBits == AdvertiseMagic:
		r.setKind(peerReliable)
		return nil
	case f.Kind == frame.KindAck && f.Ack > 0, f.Kind == frame.KindData && f.Ack > 0:
		r.setKind(peerReliable)
	case f.Kind == frame.KindData:
		if r.peer == peerUnknown {
			r.setKind(peerPlain)
		}
		return nil
	default:
		return nil
	}
	if r.peer != peerReliable {
		return nil
	}
	next := f.Ack - 1
	progressed := false
	// The round-trip sample is the newest record acknowledged for the
	// first time (cumulatively or selectively) and never resent: a
	// record buffered behind a hole was sampled when first SACKed, not
	// when the hole filled seconds later.
	var sample time.Duration
	now := time.Now()
	take := func(rec *sentRecord) {
		if !rec.resent && !rec.sacked {
			sample = now.Sub(rec.sentAt)
		}
	}
	for len(r.unacked) > 0 && r.unacked[0].f.Seq < next {
		take(r.unacked[0])
		r.dropFirst()
		progressed = true
	}
	for _, rec := range r.unacked {
		s := rec.f.Seq
		if s > next && s-next-1 < 32 && f.AckBits&(1<<(s-next-1)) != 0 {
			take(rec)
			rec.sacked = true
		}
	}
	if sample > 0 {
		r.measured(sample)
	}
	if progressed {
		// A backed-off rto stays until a record acknowledged without
		// having been resent gives a new sample (Karn): resetting it on
		// any progress resent whole windows again and again when the
		// round trip grew past the last sample.
		if sample > 0 {
			r.rto = r.baseRTO()
		}
		if len(r.unacked) == 0 {
			r.rtx.Stop()
		} else {
			r.rtx.Reset(r.rto)
		}
		select {
		case r.space <- struct{}{}:
		default:
		}
	}
	if !r.awaitAck {
		return nil
	}
	r.awaitAck = false
	var again []*sentRecord
	for _, rec := range r.unacked {
		if !rec.sacked {
			again = append(again, rec)
			rec.sentAt = now
			rec.resent = true
			rec.sending++
		}
	}
	if len(r.unacked) > 0 {
		r.rtx.Reset(r.rto)
	}
	return again
}

// rebound is called once resume has gone out on a new socket. The kept
// records go again when the peer's answer to it (an ack, which a peer
// sends on resume) says which of them it has, not at once: the peer may
// have most of them already, and a socket that is cut again after a few
// frames (a flaky network, a loaded relay) then still carries new records
// instead of the same oldest ones every time, which never made progress
// when the peer's acks kept arriving after the cut. If no answer comes,
// the retransmit timer sends them after rto as usual.
func (r *reliable) rebound() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.awaitAck = true
	r.rto = r.baseRTO()
	if len(r.unacked) > 0 {
		r.rtx.Reset(r.rto)
	}
	select {
	case r.space <- struct{}{}:
	default:
	}
}

// measured takes a round-trip sample (RFC 6298 §2, α = 1/8, β = 1/4).
func (r *reliable) measured(rtt time.Duration) {
	if r.srtt == 0 {
		r.srtt, r.rttvar = rtt, rtt/2
		return
	}
	d := r.srtt - rtt
	if d < 0 {
		d = -d
	}
	r.rttvar = (3*r.rttvar + d) / 4
	r.srtt = (7*r.srtt + rtt) / 8
}

// baseRTO is the rto without backoff: measured once there is a sample.
func (r *reliable) baseRTO() time.Duration {
	if r.srtt == 0 {
		return initialRTO
	}
	return min(max(r.srtt+max(4*r.rttvar, rtoSlack), minRTO), maxRTO)
}

// keeps reports whether records are kept (not given up on a plain peer).
func (r *reliable) keeps() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keep
}

// resend sends again at once every kept record from seq from on (those
// below it are acknowledged by a resume frame) and restarts the backoff.
func (r *reliable) resend(from uint32) {
	r.mu.Lock()
	for len(r.unacked) > 0 && r.unacked[0].f.Seq < from {
		r.dropFirst()
	}
	var again []*sentRecord
	now := time.Now()
	for _, rec := range r.unacked {
		again = append(again, rec)
		rec.sentAt = now
		rec.sacked = false
		rec.resent = true
		rec.sending++
	}
	r.rto = r.baseRTO()
	if len(r.unacked) > 0 {
		r.rtx.Reset(r.rto)
	}
	select {
	case r.space <- struct{}{}:
	default:
	}
	r.mu.Unlock()
	r.resent.Add(uint64(len(again)))
	r.sendAll(again)
}

// forceAck schedules an ack frame even if one is not due.
func (r *reliable) forceAck() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peer != peerReliable {
		return
	}
	r.ackDue = true
	r.ackTimer.Reset(0)
}

// dataArrived schedules an acknowledgement to a reliable peer: at once
// when a quarter of the sender's window has arrived unacknowledged,
// otherwise after ackDelay (a reply soon carries it instead).
func (r *reliable) dataArrived(size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peer != peerReliable {
		return
	}
	r.inRecs++
	r.inBytes += size
	if r.inRecs >= ackEveryRecords || r.inBytes >= ackEveryBytes {
		r.ackDue = true
		r.ackTimer.Reset(0)
		return
	}
	if !r.ackDue {
		r.ackDue = true
		r.ackTimer.Reset(ackDelay)
	}
}

// stamped notes that an outbound frame carries our ack: none is due.
func (r *reliable) stamped() {
	r.mu.Lock()
	r.ackDue = false
	r.inRecs, r.inBytes = 0, 0
	r.mu.Unlock()
}

func (r *reliable) sendAck() {
	r.mu.Lock()
	due := r.ackDue
	r.ackDue = false
	r.mu.Unlock()
	if !due {
		return
	}
	f := &frame.Frame{Version: frame.Version, StreamID: r.c.streamID, Kind: frame.KindAck}
	_ = r.c.sendFrame(r.c.ctx, f, true)
}

// retransmit resends the unacknowledged records not known to be buffered
// by the peer, then backs off.
func (r *reliable) retransmit() {
	r.mu.Lock()
	if r.peer != peerReliable {
		r.mu.Unlock()
		return
	}
	var resend []*sentRecord
	now := time.Now()
	for _, rec := range r.unacked {
		if !rec.sacked && now.Sub(rec.sentAt) >= r.rto/2 {
			resend = append(resend, rec)
			rec.sentAt = now
			rec.resent = true
			rec.sending++
		}
	}
	r.rto = min(2*r.rto, maxRTO)
	if len(r.unacked) > 0 {
		r.rtx.Reset(r.rto)
	}
	r.mu.Unlock()
	r.resent.Add(uint64(len(resend)))
	r.sendAll(resend)
}

// sendAll sends recs again, in order, ending each one's send; after a
// failed send the rest are not sent.
func (r *reliable) sendAll(recs []*sentRecord) {
	var err error
	for _, rec := range recs {
		if err == nil {
			err = r.c.sendFrame(r.c.ctx, rec.f, true)
		}
		r.sendDone(rec)
	}
}
