package relay

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgo/exec-server/internal/rawsock"
)

// Peer links: the data plane between two relay nodes without NATS.
//
// Through NATS a cross-node frame crosses two more processes each way
// (relay → NATS server → relay) and, in the receiving node, a hand-off
// from the NATS client's read loop to the leg's subscription goroutine.
// With Options.PeerListen every node also listens for its peers and
// advertises the address in its heartbeats (membership.go); the node with
// the smaller name of each pair dials the other, so there is one link per
// pair. NATS keeps requests (rly.req), home announcements, heartbeats and
// the KV store; only the legs' frames, closes and credits move to links.
//
// A leg chooses its transport once, when it attaches: the forwarder lists
// the links it has up (node → link id) in its attach request and the home
// answers "link" only if it has the same link up to the forwarder's node.
// Both ends then use that link for the leg's life, so the leg's order is
// the link's order; otherwise both use NATS as before. The same credits
// bound what a leg has in flight (fabric.go), so a link's queue holds at
// most the peer budgets plus control messages, and a receiver never waits
// on one leg with the link's reader: it writes a record's frames to an
// idle socket itself, in one write that does not wait (linkGather), and
// hands anything else to the leg's own delivery goroutine (inbox).
//
// A link's loss ends its legs the way a node's loss does: the home drops
// its remote legs (reliable streams wait for the harness to resume), the
// forwarder closes its harness sockets, which redial, once the home moved
// or died (fwdLeg.linkLost).
//
// The wire, after the handshake (dialLink, acceptLink), is a sequence of
// sealed records [length u32 BE][AES-256-GCM ciphertext and tag], the
// length being the record's additional data. Each direction has its own
// key, derived with HKDF from the link key and the handshake (both names,
// both nonces, the direction), and a counter nonce, so a record changed,
// replayed, reordered or dropped fails to open and closes the link, its
// legs ending as with a lost link. A record's plaintext is what the writer
// gathered in one batch (up to linkRecordMax and one message more): a
// sequence of messages [kind u8][key length u8][payload length u32 BE]
// [key][payload], the key being the leg id.

const (
	linkUpFrame   = 'f' // forwarder → home: a frame
	linkUpDone    = 'd' // forwarder → home: the harness socket went
	linkDownFrame = 'F' // home → forwarder: a frame
	linkDownClose = 'c' // home → forwarder: close (payload: the reason)
	linkDownCut   = 'x' // home → forwarder: cut
	linkCredit    = 'k' // either way: credit (uvarint frames, uvarint bytes)

	linkHeader = 6
	linkMaxKey = 140        // a leg id: node name, '-', a uint64
	linkMagic  = "RLYPEER2" // 2: sealed records; a node speaking 1 (plain) gets no link, its legs use NATS
	linkNonce  = 32
	linkHSWait = 5 * time.Second
	// linkHSFirst: the dialer speaks first; a connection that has not
	// sent its greeting by then gives back its handshake slot.
	linkHSFirst = time.Second
	// linkMaxAuthIP: handshakes in progress from one address (an IPv6
	// /64), so that idle connections from one place cannot hold every
	// slot of linkMaxAuth.
	linkMaxAuthIP = 4
	// linkRecordMax: a record's plaintext is cut at the first message
	// boundary past this; the reader allows this plus one message.
	linkRecordMax = 1 << 20
	linkTag       = 16 // the GCM tag
	// linkInboxSlack: messages a leg's inbox may hold past its window
	// (done, close, cut: control messages no credit bounds).
	linkInboxSlack = 8
	linkRedial     = 2 * time.Second // between dials to the same peer
	linkMaxAuth    = 16              // handshakes in progress on the listener
	// Control messages a link may have queued besides the frames credits
	// bound (closes, credits: at most a few per leg).
	linkQueueSlack = 8 << 20
	linkQueueMax   = 1 << 20 // messages
)

var errLinkDown = errors.New("peer link down")

// linkMsg is one decoded message; key and payload are only valid until
// the next read.
type linkMsg struct {
	kind    byte
	key     []byte
	payload []byte
	buf     *linkBuf // the payload's pooled buffer, if it has one
}

// linkBuf is a pooled buffer for a frame that came in on a link. A frame
// toward a socket is copied out of its record (the record's buffer is
// reused for the next), and most are written at once by the inbox's
// goroutine (leg.sendBatch on an idle socket): their buffers go back to
// the pool then, instead of 60 KiB of garbage per frame for the GC (the
// payload's allocation and zeroing were 13 % of the link reader's time).
// A frame the leg keeps (queued, or sent another way) keeps its buffer:
// it is never put back, the GC takes it.
type linkBuf struct{ b []byte }

// linkBufClasses: a 1 KiB message's frame fits the first, a full Noise
// transport message's (65 535 bytes) the second; larger frames are not
// pooled.
var linkBufClasses = [2]int{4 << 10, 66 << 10}

// linkBufFree holds the buffers given back, per class, bounded (1 MiB of
// small ones, 2 MiB of large ones per process): a free list rather than a
// sync.Pool, whose size follows the last burst until the GC's next cycles
// (survivors of a node's death took on hundreds of streams at once, and
// their RSS must stay under its bound).
var linkBufFree = [2]chan *linkBuf{make(chan *linkBuf, 256), make(chan *linkBuf, 32)}

// getLinkBuf is a buffer of at least n bytes, nil past the classes and
// for a frame under half its class: a frame the leg queues keeps its
// buffer, and the queue's bound counts the frame's bytes, not the
// buffer's, so a buffer may be at most twice what is counted.
func getLinkBuf(n int) *linkBuf {
	for i, c := range linkBufClasses {
		if n <= c {
			if n <= c/2 {
				return nil
			}
			select {
			case lb := <-linkBufFree[i]:
				return lb
			default:
				return &linkBuf{b: make([]byte, c)}
			}
		}
	}
	return nil
}

// free gives lb back; past the free list's bound it is the GC's.
func (lb *linkBuf) free() {
	for i, c := range linkBufClasses {
		if len(lb.b) == c {
			select {
			case linkBufFree[i] <- lb:
			default:
			}
			return
		}
	}
}

func validLinkKind(k byte) bool {
	switch k {
	case linkUpFrame, linkUpDone, linkDownFrame, linkDownClose, linkDownCut, linkCredit:
		return true
	}
	return false
}

// parseLinkMsg decodes one message from the front of b (a record's
// plaintext) and returns the rest. The key and payload point into b:
// valid until the record's buffer is reused (own copies the payload out).
// maxPayload bounds the payload.
func parseLinkMsg(b []byte, maxPayload int) (linkMsg, []byte, error) {
	if len(b) < linkHeader {
		return linkMsg{}, nil, fmt.Errorf("peer link: a message header cut at %d bytes", len(b))
	}
	m := linkMsg{kind: b[0]}
	kl := int(b[1])
	n := binary.BigEndian.Uint32(b[2:])
	if !validLinkKind(m.kind) {
		return linkMsg{}, nil, fmt.Errorf("peer link: unknown message kind %#x", m.kind)
	}
	if kl == 0 || kl > linkMaxKey {
		return linkMsg{}, nil, fmt.Errorf("peer link: key length %d", kl)
	}
	if int64(n) > int64(maxPayload) {
		return linkMsg{}, nil, fmt.Errorf("peer link: payload of %d bytes over %d", n, maxPayload)
	}
	b = b[linkHeader:]
	if int64(len(b)) < int64(kl)+int64(n) {
		return linkMsg{}, nil, fmt.Errorf("peer link: a message of %d bytes cut at %d", kl+int(n), len(b))
	}
	m.key = b[:kl]
	if n > 0 {
		m.payload = b[kl : kl+int(n) : kl+int(n)]
	}
	return m, b[kl+int(n):], nil
}

// own copies the payload out of the record, into a pooled buffer (m.buf)
// when one fits: the message is kept past the record (queued).
func (m *linkMsg) own() {
	if len(m.payload) == 0 {
		return
	}
	if m.buf = getLinkBuf(len(m.payload)); m.buf != nil {
		p := m.buf.b[:len(m.payload):len(m.payload)]
		copy(p, m.payload)
		m.payload = p
		return
	}
	m.payload = bytes.Clone(m.payload)
}

// appendLinkMsg encodes one message onto b.
func appendLinkMsg(b []byte, kind byte, key string, payload []byte) []byte {
	return append(appendLinkHeader(b, kind, key, len(payload)), payload...)
}

// appendLinkHeader encodes a message's header and key for a payload of n
// bytes.
func appendLinkHeader(b []byte, kind byte, key string, n int) []byte {
	b = append(b, kind, byte(len(key)), 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(n))
	return append(b, key...)
}

// linkSeal is one direction's AEAD and its counter nonce.
type linkSeal struct {
	aead  cipher.AEAD
	ctr   uint64
	nonce [12]byte
	ad    [4]byte // the record's length: kept here, as a local it escapes (1 alloc per record)
}

var errLinkWrap = errors.New("peer link: record counter exhausted")

// next is the nonce of the next record: 4 zero bytes and the counter.
// The counter never repeats: at its end the link closes (2^64 records
// will not happen, but the check costs nothing).
func (ls *linkSeal) next() ([]byte, error) {
	if ls.ctr == math.MaxUint64 {
		return nil, errLinkWrap
	}
	binary.BigEndian.PutUint64(ls.nonce[4:], ls.ctr)
	ls.ctr++
	return ls.nonce[:], nil
}

// linkSeals derives the two directions' keys of a link from the link key
// and the handshake: both names and both nonces, and the direction, so
// no two links nor the two directions of one share a key.
func linkSeals(key []byte, dialer, acceptor string, nd, na []byte) (d2a, a2d *linkSeal, err error) {
	salt := append(append([]byte(nil), nd...), na...)
	mk := func(dir string) (*linkSeal, error) {
		info := []byte("exec-relay peer link v1 seal " + dir)
		info = append(info, 0, byte(len(dialer)))
		info = append(info, dialer...)
		info = append(info, byte(len(acceptor)))
		info = append(info, acceptor...)
		k, err := hkdf.Key(sha256.New, key, salt, string(info), 32)
		if err != nil {
			return nil, err
		}
		blk, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		g, err := cipher.NewGCM(blk)
		if err != nil {
			return nil, err
		}
		return &linkSeal{aead: g}, nil
	}
	if d2a, err = mk("dialer to acceptor"); err != nil {
		return nil, nil, err
	}
	if a2d, err = mk("acceptor to dialer"); err != nil {
		return nil, nil, err
	}
	return d2a, a2d, nil
}

// recordCut is how much of msgs (encoded messages, written by this node)
// goes in one record: whole messages, up to linkRecordMax bytes, and at
// least one.
func recordCut(msgs []byte) int {
	i := 0
	for i < len(msgs) {
		m := linkHeader + int(msgs[i+1]) + int(binary.BigEndian.Uint32(msgs[i+2:]))
		if i > 0 && i+m > linkRecordMax {
			break
		}
		i += m
	}
	return i
}

// sealRecords appends msgs to dst as sealed records.
func sealRecords(dst []byte, ls *linkSeal, msgs []byte) ([]byte, error) {
	for len(msgs) > 0 {
		n := recordCut(msgs)
		nonce, err := ls.next()
		if err != nil {
			return dst, err
		}
		binary.BigEndian.PutUint32(ls.ad[:], uint32(n+linkTag))
		dst = append(dst, ls.ad[:]...)
		dst = ls.aead.Seal(dst, nonce, msgs[:n], ls.ad[:])
		msgs = msgs[n:]
	}
	return dst, nil
}

// recordReader opens the records a peer sends.
type recordReader struct {
	r   io.Reader
	ls  *linkSeal
	buf []byte // reused: a record's plaintext is parsed before the next read
	max int    // largest ciphertext and tag accepted
}

var errLinkRecord = errors.New("peer link: a record failed authentication")

// next reads and opens one record; its plaintext is valid until the next
// call. The length is checked before anything is allocated.
func (rr *recordReader) next() ([]byte, error) {
	hdr := rr.ls.ad[:]
	if _, err := io.ReadFull(rr.r, hdr); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr)
	if n <= linkTag || int64(n) > int64(rr.max) {
		return nil, fmt.Errorf("peer link: a record of %d bytes (limit %d)", n, rr.max)
	}
	if cap(rr.buf) < int(n) {
		rr.buf = make([]byte, n)
	}
	b := rr.buf[:n]
	if _, err := io.ReadFull(rr.r, b); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	nonce, err := rr.ls.next()
	if err != nil {
		return nil, err
	}
	pt, err := rr.ls.aead.Open(b[:0], nonce, b, hdr)
	if err != nil {
		return nil, errLinkRecord
	}
	return pt, nil
}

// linkMaxPayload bounds a message's payload: a frame and its envelope.
func (f *fabric) linkMaxPayload() int { return max(f.s.opts.MaxFrameBytes+1024, 64<<10) }

// linkMaxRecord bounds a record's ciphertext and tag.
func linkMaxRecord(maxPayload int) int {
	return linkRecordMax + linkHeader + linkMaxKey + maxPayload + linkTag
}

// peerLink is one authenticated connection to another node.
type peerLink struct {
	f    *fabric
	node string // the other node
	id   string // both ends name the link alike (from the handshake's nonces)
	conn net.Conn
	tx   *linkSeal // the writer's
	rx   *linkSeal // the reader's
	out  []byte    // the writer's sealed records, reused
	// rs writes without waiting (writeNow); nil: every message goes
	// through the writer.
	rs  *rawsock.Conn
	one []byte // writeNow's record, reused (the writing token's)

	mu    sync.Mutex
	pend  []byte // encoded messages waiting for the writer
	count int    // messages in pend
	spare []byte
	// writing: the writer or a sender (writeNow) is sealing and writing:
	// the token for tx and the socket's write side. carry: what
	// writeNow's write left, written by the writer before anything else.
	// last: when the last message was sent (unix ns).
	writing bool
	carry   []byte
	last    int64
	legs    map[string]linkLeg // legs using the link, by key
	closed  bool
	wake    chan struct{} // cap 1: pend became non-empty
	done    chan struct{} // closed with the link
	maxPend int
}

// linkLeg is a leg riding a link: told when the link goes.
type linkLeg interface{ linkLost() }

func (f *fabric) newLink(node, id string, conn net.Conn, tx, rx *linkSeal) *peerLink {
	pl := &peerLink{
		f: f, node: node, id: id, conn: conn, tx: tx, rx: rx,
		legs:    make(map[string]linkLeg),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		maxPend: f.s.opts.FleetNodeBytes + linkQueueSlack,
	}
	pl.rs = rawsock.Of(conn)
	return pl
}

// send queues one message, or writes it when the link is idle
// (writeNow); errLinkDown once the link has gone. The payload is copied:
// the caller may reuse it.
func (pl *peerLink) send(kind byte, key string, payload []byte) error {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return errLinkDown
	}
	if len(pl.pend)+linkHeader+len(key)+len(payload) > pl.maxPend || pl.count >= linkQueueMax {
		// Credits bound frames far below this: a peer that stopped
		// reading. Its legs end as with a lost node.
		pl.mu.Unlock()
		pl.f.s.log.Warn("fleet: peer link queue full, closing it", "node", pl.node)
		// The sender may hold a leg's locks (a credit message, a leg's
		// Close): its legs are told on a goroutine of their own, not
		// inside this call.
		if legs, ok := pl.shut(); ok {
			pl.f.s.wg.Add(1)
			go func() {
				defer pl.f.s.wg.Done()
				tellLost(legs)
			}()
		}
		return errLinkDown
	}
	wasEmpty := len(pl.pend) == 0
	now := time.Now().UnixNano()
	idle := now-pl.last > int64(linkIdleGap)
	pl.last = now
	if wasEmpty && idle && !pl.writing && len(pl.carry) == 0 && pl.rs != nil {
		pl.writing = true
		pl.mu.Unlock()
		pl.writeNow(kind, key, payload)
		return nil
	}
	if wasEmpty {
		// Room for the record's length: a batch that is one record
		// is sealed where it lies (sealBatch).
		pl.pend = append(pl.pend[:0], 0, 0, 0, 0)
	}
	pl.pend = appendLinkMsg(pl.pend, kind, key, payload)
	pl.count++
	pl.mu.Unlock()
	if wasEmpty {
		pl.kick()
	}
	return nil
}

// linkIdleGap: a message sent this long after the link's last one finds
// it idle, and is written by its sender (writeNow); closer ones go through
// the writer, which gathers what comes while it writes.
const linkIdleGap = 100 * time.Microsecond

// writeNow seals one message and writes it with one write(2) that does
// not wait, on the sender's goroutine: an idle link's message is not
// handed to the writer goroutine, a wake-up on another core. What the
// kernel does not take now is the writer's to write (carry), before
// anything queued meanwhile. The caller took the writing token.
func (pl *peerLink) writeNow(kind byte, key string, payload []byte) {
	buf := appendLinkMsg(append(pl.one[:0], 0, 0, 0, 0), kind, key, payload)
	out, err := pl.sealBatch(buf)
	n := 0
	if err == nil {
		n, err = pl.rs.TryWritev([][]byte{out})
	}
	pl.mu.Lock()
	if err == nil && n < len(out) {
		pl.carry = append(pl.carry[:0], out[n:]...)
		pl.f.st.linkCarries.Add(1)
	}
	if cap(out) <= linkKeepOne && len(out) > 0 && &out[0] == &buf[0] {
		pl.one = out[:0]
	}
	pl.writing = false
	kick := len(pl.pend) > 0 || len(pl.carry) > 0
	pl.mu.Unlock()
	if err != nil {
		pl.f.s.log.Warn("fleet: peer link write failed", "node", pl.node, "err", err)
		// The sender may hold a leg's locks: its legs are told on a
		// goroutine of their own (as send's full queue).
		if legs, ok := pl.shut(); ok {
			pl.f.s.wg.Add(1)
			go func() {
				defer pl.f.s.wg.Done()
				tellLost(legs)
			}()
		}
		return
	}
	pl.f.st.linkBatches.Add(1)
	pl.f.st.linkMsgs.Add(1)
	pl.f.st.linkSenderWrites.Add(1)
	if kick {
		pl.kick()
	}
}

// linkKeepOne: the largest record buffer writeNow keeps for the next.
const linkKeepOne = 128 << 10

func (pl *peerLink) kick() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// writer writes what is queued, every message queued meanwhile in one
// write: while a write is in the kernel, the next batch gathers.
func (pl *peerLink) writer() {
	defer pl.f.s.wg.Done()
	for {
		select {
		case <-pl.wake:
		case <-pl.done:
			return
		}
		pl.mu.Lock()
		if pl.writing {
			// writeNow kicks again once it is done.
			pl.mu.Unlock()
			continue
		}
		var buf []byte
		n := pl.count
		if len(pl.pend) > 0 {
			buf = pl.pend
			pl.pend, pl.count = pl.spare[:0], 0
			pl.spare = nil
		}
		carry := pl.carry
		pl.carry = nil
		if len(buf) == 0 && len(carry) == 0 {
			pl.mu.Unlock()
			continue
		}
		pl.writing = true
		pl.mu.Unlock()
		var err error
		if len(carry) > 0 {
			pl.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
			_, err = pl.conn.Write(carry)
		}
		var out []byte
		if err == nil && len(buf) > 0 {
			out, err = pl.sealBatch(buf)
			if err == nil {
				pl.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
				_, err = pl.conn.Write(out)
			}
		}
		switch {
		case len(out) > 0 && &out[0] == &buf[0]:
			buf = out // sealed in place: the tag may have grown it
		case out == nil: // nothing sealed: pl.out is as it was
		case cap(out) <= linkKeepBuf:
			pl.out = out[:0]
		default:
			pl.out = nil
		}
		pl.mu.Lock()
		pl.writing = false
		more := len(pl.pend) > 0
		if pl.carry == nil && cap(carry) <= linkKeepOne {
			pl.carry = carry[:0]
		}
		// A batch of a few 60 KiB frames grows past 1 MiB: the
		// buffer is kept up to linkKeepBuf, else every batch that size
		// grew a new one (growslice was 8 % of a cross-node stream's
		// CPU in BenchmarkFleetThroughput).
		if buf != nil && cap(buf) <= linkKeepBuf && pl.spare == nil && !pl.closed {
			pl.spare = buf[:0]
		}
		pl.mu.Unlock()
		if err != nil {
			pl.f.s.log.Warn("fleet: peer link write failed", "node", pl.node, "err", err)
			pl.close()
			return
		}
		if len(buf) > 0 {
			pl.f.st.linkBatches.Add(1)
			pl.f.st.linkMsgs.Add(uint64(n))
		}
		if more {
			pl.kick()
		}
	}
}

// linkKeepBuf: the largest batch buffer a link keeps for the next batch
// (one kept as spare, one as out: up to twice this per link, idle or not,
// and one link per other node). A batch sealed in place is one record,
// at most linkRecordMax plus the message that crossed it and append's
// overshoot; larger ones are copied into records anyway.
const linkKeepBuf = 2 * linkRecordMax

// sealBatch seals a batch from the writer's queue ([4 bytes of room]
// [messages]). A batch that is one record (up to linkRecordMax) is
// sealed in place, its length written in the room before it: no copy
// of the batch, no second buffer. A larger one is cut into records in
// pl.out.
func (pl *peerLink) sealBatch(buf []byte) ([]byte, error) {
	msgs := buf[4:]
	if recordCut(msgs) != len(msgs) {
		return sealRecords(pl.out[:0], pl.tx, msgs)
	}
	nonce, err := pl.tx.next()
	if err != nil {
		return nil, err
	}
	if cap(buf)-len(buf) < linkTag {
		// Seal appends the tag: make room so that it stays in place.
		buf = append(buf, make([]byte, linkTag)...)[:len(buf)]
		msgs = buf[4:]
	}
	ad := buf[:4]
	binary.BigEndian.PutUint32(ad, uint32(len(msgs)+linkTag))
	sealed := pl.tx.aead.Seal(msgs[:0], nonce, msgs, ad)
	return buf[:4+len(sealed)], nil
}

// reader dispatches what the peer sends until the link fails.
func (pl *peerLink) reader(br *bufio.Reader) {
	defer pl.f.s.wg.Done()
	defer pl.close()
	maxPayload := pl.f.linkMaxPayload()
	rr := recordReader{r: br, ls: pl.rx, max: linkMaxRecord(maxPayload)}
	err := pl.read(&rr, maxPayload)
	select {
	case <-pl.done:
	default:
		pl.f.s.log.Warn("fleet: peer link lost", "node", pl.node, "err", err)
	}
}

// read opens records and dispatches their messages until an error: a
// record that does not open, a message that does not parse or a peer
// past a leg's window all end the link.
func (pl *peerLink) read(rr *recordReader, maxPayload int) error {
	var g linkGather
	defer g.flush()
	for {
		pt, err := rr.next()
		if err != nil {
			return err
		}
		for len(pt) > 0 {
			var m linkMsg
			m, pt, err = parseLinkMsg(pt, maxPayload)
			if err != nil {
				return err
			}
			if err := pl.dispatch(m, maxPayload, &g); err != nil {
				return err
			}
		}
		// The gathered frames point into the record: written (or
		// copied) before the next one is read.
		g.flush()
	}
}

func (pl *peerLink) dispatch(m linkMsg, maxPayload int, g *linkGather) error {
	f := pl.f
	switch m.kind {
	case linkCredit:
		frames, n := binary.Uvarint(m.payload)
		if n <= 0 {
			return nil
		}
		bytes, k := binary.Uvarint(m.payload[n:])
		if k <= 0 {
			return nil
		}
		f.credited(pl, m.key, frames, bytes)
	case linkUpFrame, linkUpDone:
		f.mu.Lock()
		rl := f.remote[string(m.key)]
		f.mu.Unlock()
		if rl == nil || rl.link != pl {
			return nil
		}
		if !rl.in.fits(len(m.payload), maxPayload) {
			return fmt.Errorf("peer link: leg %s past its window (the peer ignores credits)", m.key)
		}
		if m.kind == linkUpFrame {
			f.countLinkIn(len(m.payload))
			if g.addUp(rl, m.payload) {
				f.st.linkInline.Add(1)
				return nil
			}
		}
		g.flushFor(&rl.in)
		m.own()
		rl.in.push(inMsg{kind: m.kind, b: m.payload, buf: m.buf})
	default:
		f.mu.Lock()
		fl := f.fwd[string(m.key)]
		f.mu.Unlock()
		if fl == nil || fl.offered[pl.node] != pl.id {
			return nil
		}
		if !fl.in.fits(len(m.payload), maxPayload) {
			return fmt.Errorf("peer link: leg %s past its window (the peer ignores credits)", m.key)
		}
		if m.kind == linkDownFrame {
			f.countLinkIn(len(m.payload))
			if g.addDown(fl, m.payload) {
				f.st.linkInline.Add(1)
				return nil
			}
		}
		g.flushFor(&fl.in)
		m.own()
		fl.fromLink(m.kind, m.payload, m.buf)
	}
	return nil
}

// linkGather is what a link's reader delivers itself: the frames of one
// record toward one socket, written in one write(2) that does not wait
// (corkConn.tryWritev) once the record is done or the next frame goes
// elsewhere. Handing each frame to its leg's inbox goroutine cost a
// wake-up on another core per frame on the cross-node path. The reader
// takes a frame only when nothing can make it wait: the leg's inbox idle
// (claimed: the leg's later frames queue behind these), the socket idle
// (its wmu taken), its frames bound and routed (Server.harnessTarget).
// Anything else goes to the inbox as before, after what was gathered for
// that leg. What the kernel does not take is written by a goroutine of
// the socket's, which holds the socket until then.
type linkGather struct {
	to    *leg
	ins   []*inbox   // claimed
	owed  []linkOwed // credit returned once written
	iov   [][]byte   // headers and frames
	hdrs  [][10]byte // the frames' websocket headers
	bytes int
}

type linkOwed struct {
	r *returned
	n int
}

// linkGatherBytes bounds what one write gathers.
const linkGatherBytes = 1 << 20

// addUp takes a frame from a harness on the link's node toward the
// environment's executor socket here.
func (g *linkGather) addUp(rl *remoteLeg, b []byte) bool {
	if rl.gone.Load() {
		return false
	}
	s := rl.f.s
	l := s.harnessTarget(rl, b)
	if l == nil || !g.take(l, &rl.in) {
		return false
	}
	s.routed.Add(1)
	g.add(b, &rl.back)
	return true
}

// addDown takes a frame from the home toward the harness socket here.
func (g *linkGather) addDown(fl *fwdLeg, b []byte) bool {
	select {
	case <-fl.ready:
	default:
		return false
	}
	if fl.l == nil || !g.take(fl.l, &fl.in) {
		return false
	}
	fl.initBack() // the inbox's, which the claim holds
	g.add(b, &fl.back)
	return true
}

// take makes l the gather's socket, in's leg claimed; false: neither.
func (g *linkGather) take(l *leg, in *inbox) bool {
	if g.to != l || len(g.hdrs) >= corkFrames || g.bytes >= linkGatherBytes {
		g.flush()
	}
	claimed := slices.Contains(g.ins, in)
	if !claimed && !in.claim() {
		return false
	}
	if g.to == nil {
		if l.cc == nil || l.cc.rs == nil || !l.lockIfIdle() {
			if !claimed {
				in.unclaim()
			}
			return false
		}
		if l.ending() {
			l.wmu.Unlock()
			if !claimed {
				in.unclaim()
			}
			return false
		}
		g.to = l
	}
	if !claimed {
		g.ins = append(g.ins, in)
	}
	return true
}

func (g *linkGather) add(b []byte, r *returned) {
	g.hdrs = append(g.hdrs, [10]byte{})
	h := wsBinaryHeader(&g.hdrs[len(g.hdrs)-1], len(b))
	g.iov = append(g.iov, h, b)
	g.bytes += len(b)
	g.owed = append(g.owed, linkOwed{r, len(b)})
}

// flushFor flushes if in's leg has frames gathered: its next message goes
// after them.
func (g *linkGather) flushFor(in *inbox) {
	if slices.Contains(g.ins, in) {
		g.flush()
	}
}

// flush writes what was gathered and lets the socket and the legs go.
func (g *linkGather) flush() {
	if l := g.to; l != nil {
		l.writeGathered(g.iov)
		g.to = nil
	}
	for _, in := range g.ins {
		in.unclaim()
	}
	for _, o := range g.owed {
		o.r.add(o.n)
	}
	clear(g.iov)
	clear(g.ins)
	clear(g.owed)
	g.iov, g.ins, g.owed, g.hdrs, g.bytes = g.iov[:0], g.ins[:0], g.owed[:0], g.hdrs[:0], 0
}

// attach puts a leg on the link; false if the link has gone.
func (pl *peerLink) attach(key string, l linkLeg) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return false
	}
	pl.legs[key] = l
	return true
}

func (pl *peerLink) detach(key string) {
	pl.mu.Lock()
	delete(pl.legs, key)
	pl.mu.Unlock()
}

func (pl *peerLink) up() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return !pl.closed
}

// close ends the link and every leg on it.
func (pl *peerLink) close() {
	if legs, ok := pl.shut(); ok {
		tellLost(legs)
	}
}

func tellLost(legs map[string]linkLeg) {
	for _, l := range legs {
		l.linkLost()
	}
}

// shut closes the link and returns its legs, once (ok false after).
func (pl *peerLink) shut() (legs map[string]linkLeg, ok bool) {
	pl.mu.Lock()
	if pl.closed {
		pl.mu.Unlock()
		return nil, false
	}
	pl.closed = true
	legs = pl.legs
	pl.legs = nil
	pl.pend, pl.spare = nil, nil
	close(pl.done)
	pl.mu.Unlock()
	pl.conn.Close()
	f := pl.f
	f.mu.Lock()
	if f.links[pl.node] == pl {
		delete(f.links, pl.node)
	}
	f.mu.Unlock()
	f.st.linkDowns.Add(1)
	return legs, true
}

// --- establishing links ----------------------------------------------------

// linkKey is the links' HMAC key, derived from the URL secret every node
// of a fleet shares (so a link key never signs a URL, nor the reverse).
func linkKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("exec-relay peer link v1"))
	return m.Sum(nil)
}

func linkProof(key []byte, role string, dialer, acceptor string, nd, na []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(role))
	m.Write([]byte{0, byte(len(dialer))})
	m.Write([]byte(dialer))
	m.Write([]byte{byte(len(acceptor))})
	m.Write([]byte(acceptor))
	m.Write(nd)
	m.Write(na)
	return m.Sum(nil)
}

func appendName(b []byte, name string, nonce []byte) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return append(b, nonce...)
}

func readName(r io.Reader) (string, []byte, error) {
	var l [1]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return "", nil, err
	}
	b := make([]byte, int(l[0])+linkNonce)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", nil, err
	}
	name := string(b[:l[0]])
	if !validNodeName(name) {
		return "", nil, fmt.Errorf("peer link: node name %q", name)
	}
	return name, b[l[0]:], nil
}

// The handshake, both ways proved with the fleet's shared secret:
//
//	dialer → magic, name, nonce D
//	acceptor → name, nonce A, HMAC("acc", names, D, A)
//	dialer → HMAC("dial", names, D, A)
//	acceptor → 'K'
//
// An end that does not prove it is dropped; nothing else is read before.
// Both ends then derive the record keys (linkSeals) from the same names
// and nonces; everything after 'K' is sealed records.

// dialLink dials node at addr; the caller registers the link.
func (f *fabric) dialLink(node, addr string) (*peerLink, *bufio.Reader, error) {
	conn, err := net.DialTimeout("tcp", addr, linkHSWait)
	if err != nil {
		return nil, nil, err
	}
	conn = rawsock.Wrap(conn)
	conn.SetDeadline(time.Now().Add(linkHSWait))
	nd := make([]byte, linkNonce)
	rand.Read(nd)
	b := append([]byte(linkMagic), appendName(nil, f.node, nd)...)
	if _, err := conn.Write(b); err != nil {
		conn.Close()
		return nil, nil, err
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	name, na, err := readName(br)
	if err == nil && name != node {
		err = fmt.Errorf("peer link: %s answered as %q", addr, name)
	}
	var proof [sha256.Size]byte
	if err == nil {
		_, err = io.ReadFull(br, proof[:])
	}
	if err == nil && !hmac.Equal(proof[:], linkProof(f.linkKey, "acc", f.node, node, nd, na)) {
		err = errors.New("peer link: the peer's proof does not match (another URL secret?)")
	}
	if err == nil {
		_, err = conn.Write(linkProof(f.linkKey, "dial", f.node, node, nd, na))
	}
	var ok [1]byte
	if err == nil {
		_, err = io.ReadFull(br, ok[:])
		if err == nil && ok[0] != 'K' {
			err = errors.New("peer link: refused")
		}
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	d2a, a2d, err := linkSeals(f.linkKey, f.node, node, nd, na)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return f.newLink(node, hex.EncodeToString(nd[:8])+hex.EncodeToString(na[:8]), conn, d2a, a2d), br, nil
}

// acceptLink runs the acceptor's half of the handshake.
func (f *fabric) acceptLink(conn net.Conn) (*peerLink, *bufio.Reader, error) {
	conn = rawsock.Wrap(conn)
	// The greeting comes at once from a real peer; an idle connection
	// gives its slot back after linkHSFirst.
	conn.SetDeadline(time.Now().Add(linkHSFirst))
	br := bufio.NewReaderSize(conn, 64<<10)
	magic := make([]byte, len(linkMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return nil, nil, err
	}
	if string(magic) != linkMagic {
		return nil, nil, errors.New("peer link: not a peer")
	}
	node, nd, err := readName(br)
	if err != nil {
		return nil, nil, err
	}
	if node == f.node {
		return nil, nil, errors.New("peer link: a peer with this node's name")
	}
	conn.SetDeadline(time.Now().Add(linkHSWait))
	na := make([]byte, linkNonce)
	rand.Read(na)
	b := appendName(nil, f.node, na)
	b = append(b, linkProof(f.linkKey, "acc", node, f.node, nd, na)...)
	if _, err := conn.Write(b); err != nil {
		return nil, nil, err
	}
	var proof [sha256.Size]byte
	if _, err := io.ReadFull(br, proof[:]); err != nil {
		return nil, nil, err
	}
	if !hmac.Equal(proof[:], linkProof(f.linkKey, "dial", node, f.node, nd, na)) {
		return nil, nil, errors.New("peer link: the dialer's proof does not match")
	}
	d2a, a2d, err := linkSeals(f.linkKey, node, f.node, nd, na)
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write([]byte{'K'}); err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return f.newLink(node, hex.EncodeToString(nd[:8])+hex.EncodeToString(na[:8]), conn, a2d, d2a), br, nil
}

// startLinks listens for peers (Options.PeerListen).
func (f *fabric) startLinks() error {
	ln, err := net.Listen("tcp", f.s.opts.PeerListen)
	if err != nil {
		return fmt.Errorf("peer listener: %w", err)
	}
	f.linkLn = ln
	f.linkAddr = f.s.opts.PeerAdvertise
	if f.linkAddr == "" {
		if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
			// Peers dialling 0.0.0.0 or :: would reach themselves.
			ln.Close()
			return fmt.Errorf("peer listener %s: a wildcard address needs PeerAdvertise (the address peers dial)", ln.Addr())
		}
		f.linkAddr = ln.Addr().String()
	}
	f.linkKey = linkKey(f.s.secret)
	f.s.wg.Add(1)
	go f.acceptLinks(ln)
	return nil
}

func (f *fabric) acceptLinks(ln net.Listener) {
	defer f.s.wg.Done()
	sem := make(chan struct{}, linkMaxAuth)
	var (
		perIPMu sync.Mutex
		perIP   = map[string]int{} // handshakes in progress by authIPKey
	)
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			select {
			case <-f.s.stop:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or another passing refusal: the
			// listener is still advertised, so keep accepting after a
			// pause (as net/http does) rather than leave peers hanging.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.s.log.Warn("fleet: peer link accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-f.s.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		ip := authIPKey(conn.RemoteAddr())
		perIPMu.Lock()
		if perIP[ip] >= linkMaxAuthIP {
			perIPMu.Unlock()
			f.st.linkRefused.Add(1)
			conn.Close() // one place holding handshakes open: drop
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			perIPMu.Unlock()
			conn.Close() // a flood of handshakes: drop, peers redial
			continue
		}
		perIP[ip]++
		perIPMu.Unlock()
		f.s.wg.Add(1)
		go func() {
			defer f.s.wg.Done()
			pl, br, err := f.acceptLink(conn)
			perIPMu.Lock()
			if perIP[ip]--; perIP[ip] == 0 {
				delete(perIP, ip)
			}
			perIPMu.Unlock()
			<-sem
			if err != nil {
				f.st.linkRefused.Add(1)
				f.s.log.Warn("fleet: peer link refused", "remote", conn.RemoteAddr().String(), "err", err)
				conn.Close()
				return
			}
			f.register(pl, br)
		}()
	}
}

// authIPKey groups handshakes by where they come from: the IPv4
// address, or an IPv6 address's /64 (one host often has a whole one).
func authIPKey(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return ta.IP.Mask(net.CIDRMask(64, 128)).String()
}

// register makes pl the link to its node (replacing an older one) and
// starts its reader and writer.
func (f *fabric) register(pl *peerLink, br *bufio.Reader) {
	f.mu.Lock()
	if f.linksClosed {
		// The node is closing: closeLinks has run, and would not
		// see this one.
		f.mu.Unlock()
		pl.conn.Close()
		return
	}
	old := f.links[pl.node]
	f.links[pl.node] = pl
	f.mu.Unlock()
	if old != nil {
		old.close()
	}
	f.st.linkUps.Add(1)
	f.s.wg.Add(2)
	go pl.reader(br)
	go pl.writer()
}

// peerHeard: a heartbeat from node advertising addr. The node with the
// smaller name dials.
func (f *fabric) peerHeard(node, addr string) {
	if f.linkLn == nil || addr == "" || node <= f.node {
		return
	}
	now := time.Now()
	f.mu.Lock()
	if pl := f.links[node]; pl != nil || f.dialing[node] || now.Before(f.nextDial[node]) {
		f.mu.Unlock()
		return
	}
	f.dialing[node] = true
	f.nextDial[node] = now.Add(linkRedial)
	f.mu.Unlock()
	f.s.wg.Add(1)
	go func() {
		defer f.s.wg.Done()
		pl, br, err := f.dialLink(node, addr)
		f.mu.Lock()
		delete(f.dialing, node)
		f.mu.Unlock()
		if err != nil {
			f.st.linkDialFails.Add(1)
			f.s.log.Warn("fleet: cannot link to peer, its legs use NATS", "node", node, "addr", addr, "err", err)
			return
		}
		f.register(pl, br)
	}()
}

// linkIDs are the links up now, by node: an attach request offers them.
func (f *fabric) linkIDs() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.links) == 0 {
		return nil
	}
	m := make(map[string]string, len(f.links))
	for n, pl := range f.links {
		m[n] = pl.id
	}
	return m
}

// linkTo is the link to node if its id is id.
func (f *fabric) linkTo(node, id string) *peerLink {
	if id == "" {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if pl := f.links[node]; pl != nil && pl.id == id {
		return pl
	}
	return nil
}

func (f *fabric) closeLinks() {
	if f.linkLn != nil {
		f.linkLn.Close()
	}
	f.mu.Lock()
	f.linksClosed = true
	var pls []*peerLink
	for _, pl := range f.links {
		pls = append(pls, pl)
	}
	f.mu.Unlock()
	for _, pl := range pls {
		pl.close()
	}
}

// --- a remote leg's inbound frames -------------------------------------------

// inbox hands a leg's messages from the link's reader to the leg's own
// goroutine, when the reader cannot write them itself without waiting
// (linkGather): the socket busy, or more to do than a write. The leg's
// window bounds it.
type inMsg struct {
	kind byte
	b    []byte
	buf  *linkBuf // b's pooled buffer, if any
}

type inbox struct {
	mu    sync.Mutex
	q     []inMsg
	bytes int // in q
	spare []inMsg
	// busy: a batch is being handled (by the inbox's goroutine), or the
	// link's reader claimed the leg to write its frames itself (claim).
	busy    bool
	wake    chan struct{}
	running atomic.Bool
}

func (in *inbox) push(m inMsg) {
	in.mu.Lock()
	wasEmpty := len(in.q) == 0
	in.q = append(in.q, m)
	in.bytes += len(m.b)
	in.mu.Unlock()
	if wasEmpty {
		select {
		case in.wake <- struct{}{}:
		default:
		}
	}
}

// fits: one more message of n bytes stays within what a peer respecting
// the leg's credits can have queued (its window, a frame larger than the
// window alone, and a few control messages). The reader checks before it
// pushes; a peer past it has its link closed, so a peer ignoring credits
// cannot grow a leg's inbox without bound.
func (in *inbox) fits(n, maxPayload int) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.q) < fabWindowFrames+linkInboxSlack && in.bytes+n <= fabWindowBytes+maxPayload
}

// claim gives the link's reader the leg's delivery, for frames it writes
// itself (linkGather), when nothing is queued or being handled: the
// leg's frames stay in order. unclaim gives it back; until then the
// reader pushes nothing (it is the one pusher).
func (in *inbox) claim() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.q) > 0 || in.busy {
		return false
	}
	in.busy = true
	return true
}

func (in *inbox) unclaim() {
	in.mu.Lock()
	in.busy = false
	in.mu.Unlock()
}

// take returns what is queued (nil if nothing), swapping buffers; busy
// until recycle.
func (in *inbox) take() []inMsg {
	in.mu.Lock()
	q := in.q
	if len(q) > 0 {
		in.busy = true
	}
	in.q = in.spare[:0]
	in.spare = nil
	in.bytes = 0
	in.mu.Unlock()
	return q
}

// run hands what is pushed to handle, in order, until quit; flush runs
// after each batch taken (handle may gather frames for one write).
func (in *inbox) run(quit <-chan struct{}, handle func(inMsg), flush func()) {
	for {
		select {
		case <-in.wake:
		case <-quit:
			return
		}
		q := in.take()
		for _, m := range q {
			handle(m)
		}
		flush()
		in.recycle(q)
	}
}

// start runs the inbox's goroutine once (the leg owns it; it ends with
// quit).
func (in *inbox) start(f *fabric, quit <-chan struct{}, handle func(inMsg), flush func()) {
	if in.running.Swap(true) {
		return
	}
	f.s.wg.Add(1)
	go func() {
		defer f.s.wg.Done()
		in.run(quit, handle, flush)
	}()
}

// legBatch gathers the frames an inbox's batch sends to one socket, so
// they go in one write (leg.sendBatch). Used by one goroutine at a time.
type legBatch struct {
	to   *leg
	fs   []outFrame
	bufs []*linkBuf // the pooled buffers of fs's frames
	// cur is the pooled buffer of the frame being handled (set by the
	// inbox's handler around upTo): add takes it with the frame. One
	// not taken (the frame went another way) is left to the GC.
	cur *linkBuf
}

// add gathers b (the batch keeps it) for l, sending what was gathered
// for another leg first.
func (bt *legBatch) add(l *leg, b []byte) {
	if bt.to != l {
		bt.flush()
		bt.to = l
	}
	bt.fs = append(bt.fs, outFrame{b: b})
	if bt.cur != nil {
		bt.bufs = append(bt.bufs, bt.cur)
		bt.cur = nil
	}
}

// addBuf is add of a frame in the pooled buffer lb (nil: none).
func (bt *legBatch) addBuf(l *leg, b []byte, lb *linkBuf) {
	bt.cur = lb
	bt.add(l, b)
	bt.cur = nil
}

// flush sends what is gathered; the frames' pooled buffers go back once
// the leg no longer holds them (written at once).
func (bt *legBatch) flush() {
	if len(bt.fs) > 0 {
		_, kept := bt.to.sendBatch(bt.fs)
		if !kept {
			for _, lb := range bt.bufs {
				lb.free()
			}
		}
		clear(bt.fs)
		bt.fs = bt.fs[:0]
		clear(bt.bufs)
		bt.bufs = bt.bufs[:0]
	}
	bt.to = nil
}

func (in *inbox) recycle(q []inMsg) {
	clear(q)
	in.mu.Lock()
	if len(q) > 0 {
		in.busy = false
	}
	if in.spare == nil && cap(q) <= 4*fabWindowFrames {
		in.spare = q[:0]
	}
	in.mu.Unlock()
}

// countLinkIn counts a frame of n bytes that came in on a peer link.
func (f *fabric) countLinkIn(n int) {
	f.st.framesIn.Add(1)
	f.st.bytesIn.Add(uint64(n))
	f.st.linkFramesIn.Add(1)
	f.st.linkBytesIn.Add(uint64(n))
}
