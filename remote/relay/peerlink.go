package relay

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
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
// on one leg with the link's reader: frames toward a harness socket go to
// its queue (which the window always fits), frames toward an executor to
// the leg's own delivery goroutine (inbox).
//
// A link's loss ends its legs the way a node's loss does: the home drops
// its remote legs (reliable streams wait for the harness to resume), the
// forwarder closes its harness sockets, which redial, once the home moved
// or died (fwdLeg.linkLost).
//
// The wire, after the handshake (linkHandshake), is a sequence of messages
// [kind u8][key length u8][payload length u32 BE][key][payload], the key
// being the leg id.

const (
	linkUpFrame   = 'f' // forwarder → home: a frame
	linkUpDone    = 'd' // forwarder → home: the harness socket went
	linkDownFrame = 'F' // home → forwarder: a frame
	linkDownClose = 'c' // home → forwarder: close (payload: the reason)
	linkDownCut   = 'x' // home → forwarder: cut
	linkCredit    = 'k' // either way: credit (uvarint frames, uvarint bytes)

	linkHeader  = 6
	linkMaxKey  = 140 // a leg id: node name, '-', a uint64
	linkMagic   = "RLYPEER1"
	linkNonce   = 32
	linkHSWait  = 5 * time.Second
	linkRedial  = 2 * time.Second // between dials to the same peer
	linkMaxAuth = 16              // handshakes in progress on the listener
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
}

func validLinkKind(k byte) bool {
	switch k {
	case linkUpFrame, linkUpDone, linkDownFrame, linkDownClose, linkDownCut, linkCredit:
		return true
	}
	return false
}

// readLinkMsg decodes one message from r. The payload is freshly
// allocated (the receiver keeps it: it is queued to a socket); the key
// uses keyBuf. maxPayload bounds the payload.
func readLinkMsg(r *bufio.Reader, keyBuf []byte, maxPayload int) (linkMsg, error) {
	var hdr [linkHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return linkMsg{}, err
	}
	m := linkMsg{kind: hdr[0]}
	kl := int(hdr[1])
	n := binary.BigEndian.Uint32(hdr[2:])
	if !validLinkKind(m.kind) {
		return linkMsg{}, fmt.Errorf("peer link: unknown message kind %#x", m.kind)
	}
	if kl == 0 || kl > linkMaxKey {
		return linkMsg{}, fmt.Errorf("peer link: key length %d", kl)
	}
	if int64(n) > int64(maxPayload) {
		return linkMsg{}, fmt.Errorf("peer link: payload of %d bytes over %d", n, maxPayload)
	}
	m.key = keyBuf[:kl]
	if _, err := io.ReadFull(r, m.key); err != nil {
		return linkMsg{}, io.ErrUnexpectedEOF
	}
	if n > 0 {
		m.payload = make([]byte, n)
		if _, err := io.ReadFull(r, m.payload); err != nil {
			return linkMsg{}, io.ErrUnexpectedEOF
		}
	}
	return m, nil
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

// peerLink is one authenticated connection to another node.
type peerLink struct {
	f    *fabric
	node string // the other node
	id   string // both ends name the link alike (from the handshake's nonces)
	conn net.Conn

	mu      sync.Mutex
	pend    []byte // encoded messages waiting for the writer
	count   int    // messages in pend
	spare   []byte
	legs    map[string]linkLeg // legs using the link, by key
	closed  bool
	wake    chan struct{} // cap 1: pend became non-empty
	done    chan struct{} // closed with the link
	maxPend int
}

// linkLeg is a leg riding a link: told when the link goes.
type linkLeg interface{ linkLost() }

func (f *fabric) newLink(node, id string, conn net.Conn) *peerLink {
	return &peerLink{
		f: f, node: node, id: id, conn: conn,
		legs:    make(map[string]linkLeg),
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		maxPend: f.s.opts.FleetNodeBytes + linkQueueSlack,
	}
}

// send queues one message; errLinkDown once the link has gone. The
// payload is copied: the caller may reuse it.
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
	pl.pend = appendLinkMsg(pl.pend, kind, key, payload)
	pl.count++
	pl.mu.Unlock()
	if wasEmpty {
		pl.kick()
	}
	return nil
}

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
		buf, n := pl.pend, pl.count
		pl.pend, pl.count = pl.spare[:0], 0
		pl.spare = nil
		pl.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		pl.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err := pl.conn.Write(buf)
		pl.mu.Lock()
		more := len(pl.pend) > 0
		if cap(buf) <= 1<<20 && pl.spare == nil && !pl.closed {
			pl.spare = buf[:0]
		}
		pl.mu.Unlock()
		if err != nil {
			pl.f.s.log.Warn("fleet: peer link write failed", "node", pl.node, "err", err)
			pl.close()
			return
		}
		pl.f.st.linkBatches.Add(1)
		pl.f.st.linkMsgs.Add(uint64(n))
		if more {
			pl.kick()
		}
	}
}

// reader dispatches what the peer sends until the link fails.
func (pl *peerLink) reader(br *bufio.Reader) {
	defer pl.f.s.wg.Done()
	defer pl.close()
	keyBuf := make([]byte, linkMaxKey)
	maxPayload := max(pl.f.s.opts.MaxFrameBytes+1024, 64<<10)
	for {
		m, err := readLinkMsg(br, keyBuf, maxPayload)
		if err != nil {
			select {
			case <-pl.done:
			default:
				pl.f.s.log.Warn("fleet: peer link lost", "node", pl.node, "err", err)
			}
			return
		}
		pl.dispatch(m)
	}
}

func (pl *peerLink) dispatch(m linkMsg) {
	f := pl.f
	switch m.kind {
	case linkCredit:
		frames, n := binary.Uvarint(m.payload)
		if n <= 0 {
			return
		}
		bytes, k := binary.Uvarint(m.payload[n:])
		if k <= 0 {
			return
		}
		f.credited(pl, m.key, frames, bytes)
	case linkUpFrame, linkUpDone:
		f.mu.Lock()
		rl := f.remote[string(m.key)]
		f.mu.Unlock()
		if rl == nil || rl.link != pl {
			return
		}
		if m.kind == linkUpFrame {
			f.countLinkIn(len(m.payload))
		}
		rl.in.push(inMsg{kind: m.kind, b: m.payload})
	default:
		f.mu.Lock()
		fl := f.fwd[string(m.key)]
		f.mu.Unlock()
		if fl == nil {
			return
		}
		if m.kind == linkDownFrame {
			f.countLinkIn(len(m.payload))
		}
		fl.fromLink(pl, m.kind, m.payload)
	}
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

// dialLink dials node at addr; the caller registers the link.
func (f *fabric) dialLink(node, addr string) (*peerLink, *bufio.Reader, error) {
	conn, err := net.DialTimeout("tcp", addr, linkHSWait)
	if err != nil {
		return nil, nil, err
	}
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
	conn.SetDeadline(time.Time{})
	return f.newLink(node, hex.EncodeToString(nd[:8])+hex.EncodeToString(na[:8]), conn), br, nil
}

// acceptLink runs the acceptor's half of the handshake.
func (f *fabric) acceptLink(conn net.Conn) (*peerLink, *bufio.Reader, error) {
	conn.SetDeadline(time.Now().Add(linkHSWait))
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
	if _, err := conn.Write([]byte{'K'}); err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return f.newLink(node, hex.EncodeToString(nd[:8])+hex.EncodeToString(na[:8]), conn), br, nil
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
		select {
		case sem <- struct{}{}:
		default:
			conn.Close() // a flood of handshakes: drop, peers redial
			continue
		}
		f.s.wg.Add(1)
		go func() {
			defer f.s.wg.Done()
			pl, br, err := f.acceptLink(conn)
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

// inbox hands a remote leg's frames from the link's reader to the leg's
// own goroutine: writing to the executor socket may wait (its queue is
// shared by every leg of the environment), and the reader must not. The
// leg's window bounds it.
type inMsg struct {
	kind byte
	b    []byte
}

type inbox struct {
	mu      sync.Mutex
	q       []inMsg
	spare   []inMsg
	wake    chan struct{}
	running atomic.Bool
}

func (in *inbox) push(m inMsg) {
	in.mu.Lock()
	wasEmpty := len(in.q) == 0
	in.q = append(in.q, m)
	in.mu.Unlock()
	if wasEmpty {
		select {
		case in.wake <- struct{}{}:
		default:
		}
	}
}

// take returns what is queued (nil if nothing), swapping buffers.
func (in *inbox) take() []inMsg {
	in.mu.Lock()
	q := in.q
	in.q = in.spare[:0]
	in.spare = nil
	in.mu.Unlock()
	return q
}

// run hands what is pushed to handle, in order, until quit.
func (in *inbox) run(quit <-chan struct{}, handle func(inMsg)) {
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
		in.recycle(q)
	}
}

// start runs the inbox's goroutine once (the leg owns it; it ends with
// quit).
func (in *inbox) start(f *fabric, quit <-chan struct{}, handle func(inMsg)) {
	if in.running.Swap(true) {
		return
	}
	f.s.wg.Add(1)
	go func() {
		defer f.s.wg.Done()
		in.run(quit, handle)
	}()
}

func (in *inbox) recycle(q []inMsg) {
	clear(q)
	in.mu.Lock()
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
