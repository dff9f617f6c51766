package relay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/remote/harness"
)

// waitLinks waits until each node has a peer link to every other one.
func waitLinks(tb testing.TB, d time.Duration, nodes ...*fleetNode) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ok := true
		for _, n := range nodes {
			if n.FleetStats().Links != int64(len(nodes)-1) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				tb.Logf("node %s: %+v", n.name, n.FleetStats())
			}
			tb.Fatalf("peer links not up after %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func withLinks(more func(*Options)) func(*Options) {
	return func(o *Options) {
		o.PeerListen = "127.0.0.1:0"
		if more != nil {
			more(o)
		}
	}
}

// cutLinks drops n's peer links (its TCP connections), the node staying up.
func (n *fleetNode) cutLinks() {
	n.fab.mu.Lock()
	var pls []*peerLink
	for _, pl := range n.fab.links {
		pls = append(pls, pl)
	}
	n.fab.mu.Unlock()
	for _, pl := range pls {
		pl.conn.Close()
	}
}

// Frames of every size cross byte for byte both ways on a peer link, and
// none through NATS.
func TestPeerLinkRoutesAcrossNodes(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", withLinks(nil))
	b := startNode(t, url, "b", "", withLinks(nil))
	waitLinks(t, 10*time.Second, a, b)
	routesAcrossNodes(t, a, b)
	sa, sb := a.FleetStats(), b.FleetStats()
	if sa.LinkFramesOut != sa.FramesOut || sb.LinkFramesOut != sb.FramesOut || sa.LinkFramesIn != sa.FramesIn || sb.LinkFramesIn != sb.FramesIn || sb.LinkFramesOut == 0 || sa.LinkFramesOut == 0 {
		t.Fatalf("frames not all on the link: a %+v b %+v", sa, sb)
	}
	// The writer counts a batch after its write returns, and the echo it
	// carried can reach the harness before that (a loaded machine): wait
	// for the counts to come in.
	for deadline := time.Now().Add(10 * time.Second); ; {
		sa, sb = a.FleetStats(), b.FleetStats()
		if sa.LinkBatches > 0 && sb.LinkBatches > 0 && sa.LinkMessages >= sa.LinkFramesOut {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("link writes not counted: a %+v b %+v", sa, sb)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The remote/executor and remote/harness ends (reliability extension)
// across a link.
func TestPeerLinkReliableEnds(t *testing.T) {
	front, nodes, ctx, ch := threeNodeStream(t, withLinks(nil))
	_ = front
	waitLinks(t, 10*time.Second, nodes...)
	if err := exchange(ctx, ch, 0, 300); err != nil {
		t.Fatal(err)
	}
	// The stream was opened before the links may have been up: a new
	// one rides the link.
	ch2 := dialStream(ctx, t, nodes[1].base, "E", harness.Options{})
	if err := exchange(ctx, ch2, 0, 300); err != nil {
		t.Fatal(err)
	}
	if st := nodes[1].FleetStats(); st.LinkFramesOut == 0 || st.LinkFramesIn == 0 {
		t.Fatalf("nothing crossed on the link: %+v", st)
	}
}

// A link lost mid-stream: the reliable stream resumes without a reset
// (its harness redials; the leg it gets rides a new link or NATS).
func TestPeerLinkLossReliable(t *testing.T) {
	_, nodes, ctx, first := threeNodeStream(t, withLinks(func(o *Options) { o.TakeoverGrace = 10 * time.Second }))
	a, b := nodes[0], nodes[1]
	// The helper's own stream rides a link too when the links came up
	// before it (a loaded machine): until both its ends have spoken it is
	// not known to be reliable, and a cut link would end it with a reset.
	if err := exchange(ctx, first, 0, 10); err != nil {
		t.Fatal(err)
	}
	waitLinks(t, 10*time.Second, nodes...)
	ch := dialStream(ctx, t, b.base, "E", harness.Options{})
	if err := exchange(ctx, ch, 0, 100); err != nil {
		t.Fatal(err)
	}
	if st := b.FleetStats(); st.LinkLegs == 0 {
		t.Fatalf("the stream's leg is not on a link: %+v", st)
	}
	errc := make(chan error, 1)
	go func() { errc <- exchange(ctx, ch, 100, 400) }()
	time.Sleep(20 * time.Millisecond)
	b.cutLinks()
	if err := <-errc; err != nil {
		t.Fatalf("after the link went: %v", err)
	}
	if err := exchange(ctx, ch, 500, 100); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if k := n.rec.count(func(e Event) bool { return e.Kind == "reset" }); k != 0 {
			t.Fatalf("node %s reset %d streams", n.name, k)
		}
	}
	if st := a.FleetStats(); st.LinkDowns == 0 {
		t.Fatalf("the home did not see the link go: %+v", st)
	}
}

// A link lost under a plain stream (raw frames, no reliability
// extension): the harness socket ends and the executor sees the stream
// reset, as when a node is lost.
func TestPeerLinkLossPlain(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", withLinks(nil))
	b := startNode(t, url, "b", "", withLinks(nil))
	waitLinks(t, 10*time.Second, a, b)
	reg := a.register(t, "E", randomKey())
	e := dial(t, reg["url"].(string))
	a.executorOn(t, "E", 10*time.Second)
	h := dial(t, b.connect(t, "E", randomKey())["url"].(string))
	write(t, h, dataFrame(benchSID, 0, []byte("hello")))
	if got := read(t, e); !bytes.Contains(got, []byte("hello")) {
		t.Fatalf("executor got %q", got)
	}
	if st := b.FleetStats(); st.LinkLegs != 1 {
		t.Fatalf("the leg is not on the link: %+v", st)
	}
	a.cutLinks()
	got := read(t, e)
	if s, _, _ := peek(got); s != benchSID || resetReason(got) != "harness_disconnected" {
		t.Fatalf("after the link went, executor got %q %q", s, resetReason(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := h.Read(ctx); websocket.CloseStatus(err) == -1 {
		t.Fatalf("harness socket: %v, want a close", err)
	}
}

// A harness that stops reading fills its own leg's window and socket; a
// leg of another environment on the same link goes on (the link's reader
// never waits on one harness socket).
func TestPeerLinkSlowHarnessDoesNotStallLink(t *testing.T) {
	url := startNATS(t)
	slow := withLinks(func(o *Options) { o.SlowHarness = time.Minute })
	a := startNode(t, url, "a", "", slow)
	b := startNode(t, url, "b", "", slow)
	waitLinks(t, 10*time.Second, a, b)
	var execs []*websocket.Conn
	for _, env := range []string{"E1", "E2"} {
		reg := a.register(t, env, randomKey())
		execs = append(execs, dial(t, reg["url"].(string)))
		a.executorOn(t, env, 10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// h1 sends one frame (binding its stream) and never reads again.
	h1 := dial(t, b.connect(t, "E1", randomKey())["url"].(string))
	h2 := dial(t, b.connect(t, "E2", randomKey())["url"].(string))
	write(t, h1, dataFrame(benchSID, 0, []byte("bind")))
	read(t, execs[0])
	big := dataFrame(benchSID, 1, make([]byte, 200<<10))
	flooded := make(chan error, 1)
	go func() {
		// Far more than h1's window, queue and socket buffers hold: the
		// executor's writes stop once E1's window is spent.
		for range 200 {
			if err := execs[0].Write(ctx, websocket.MessageBinary, big); err != nil {
				flooded <- err
				return
			}
		}
		flooded <- nil
	}()
	// Wait until E1's window toward b is spent: the link's reader has
	// handed b as much as the window lets it.
	for a.FleetStats().CreditWaits == 0 {
		if ctx.Err() != nil {
			t.Fatal("E1's window never filled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// E2 round trips while h1 is stuck.
	for i := range 50 {
		write(t, h2, dataFrame(benchSID, uint32(i), []byte(fmt.Sprint("ping ", i))))
		if got := read(t, execs[1]); !bytes.Contains(got, []byte(fmt.Sprint("ping ", i))) {
			t.Fatalf("E2 executor got %q", got)
		}
		write(t, execs[1], dataFrame(benchSID, uint32(i), []byte(fmt.Sprint("pong ", i))))
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		_, got, err := h2.Read(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("E2 round trip %d while E1's harness is stuck: %v", i, err)
		}
		if !bytes.Contains(got, []byte(fmt.Sprint("pong ", i))) {
			t.Fatalf("E2 harness got %q", got)
		}
	}
	select {
	case err := <-flooded:
		t.Fatalf("E1's executor was not held back by the window: %v", err)
	default:
	}
}

// A peer address nobody answers at: the nodes route through NATS.
func TestPeerLinkUnreachableFallsBackToNATS(t *testing.T) {
	url := startNATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	a := startNode(t, url, "a", "", withLinks(nil))
	b := startNode(t, url, "b", "", withLinks(func(o *Options) { o.PeerAdvertise = dead }))
	// a (the smaller name) dials b's advertised address, and fails.
	deadline := time.Now().Add(10 * time.Second)
	for a.FleetStats().LinkDialFails == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dial failed: %+v", a.FleetStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	routesAcrossNodes(t, a, b)
	sa, sb := a.FleetStats(), b.FleetStats()
	if sa.Links+sb.Links != 0 || sa.LinkFramesOut+sb.LinkFramesOut != 0 || sa.FramesOut == 0 || sb.FramesOut == 0 {
		t.Fatalf("a %+v b %+v", sa, sb)
	}
}

// Only a peer proving the fleet's secret gets a link: a wrong proof, a
// node with another secret and a stranger are dropped before anything
// they send is read as frames.
func TestPeerLinkAuthentication(t *testing.T) {
	url := startNATS(t)
	a := startNode(t, url, "a", "", withLinks(nil))
	addr := a.fab.linkAddr

	// A stranger's bytes.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(appendLinkMsg(nil, linkUpFrame, "z-1", []byte("frame")))
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		t.Fatalf("stranger: read %d bytes, %v; want a close", n, err)
	}
	c.Close()

	// The right greeting, a wrong proof.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nd := make([]byte, linkNonce)
	rand.Read(nd)
	c.Write(append([]byte(linkMagic), appendName(nil, "z", nd)...))
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if name, _, err := readName(br); err != nil || name != "a" {
		t.Fatalf("acceptor's greeting: %q %v", name, err)
	}
	io.ReadFull(br, make([]byte, 32)) // its proof
	c.Write(make([]byte, 32))         // ours, wrong
	if n, err := io.Copy(io.Discard, br); err != nil || n != 0 {
		t.Fatalf("wrong proof: read %d bytes, %v; want a close", n, err)
	}
	c.Close()

	// A node with another secret: no link either way.
	b := startNode(t, url, "b", "", withLinks(func(o *Options) { o.URLSecret = bytes.Repeat([]byte{9}, 32) }))
	deadline := time.Now().Add(10 * time.Second)
	for a.FleetStats().LinkDialFails == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a linked to a node with another secret: %+v", a.FleetStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sa, sb := a.FleetStats(), b.FleetStats(); sa.Links+sb.Links != 0 || sa.LinkRefused < 2 {
		t.Fatalf("a %+v b %+v", sa, sb)
	}
}

// FuzzLinkMsg: the message decoder never panics, bounds what it
// allocates, and reads back what appendLinkMsg wrote.
func FuzzLinkMsg(f *testing.F) {
	f.Add(appendLinkMsg(nil, linkUpFrame, "a-1", []byte("hello")))
	f.Add(appendLinkMsg(appendLinkMsg(nil, linkCredit, "b-22", []byte{1, 2}), linkDownClose, "b-22", nil))
	f.Add([]byte{linkDownFrame, 0, 0, 0, 0, 1})
	f.Add([]byte{linkDownFrame, 1, 0xff, 0xff, 0xff, 0xff, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 1 << 16
		var out []byte
		rest := b
		for len(rest) > 0 {
			var m linkMsg
			var err error
			m, rest, err = parseLinkMsg(rest, max)
			if err != nil {
				break
			}
			if !validLinkKind(m.kind) || len(m.key) == 0 || len(m.key) > linkMaxKey || len(m.payload) > max {
				t.Fatalf("accepted %+v", m)
			}
			out = appendLinkMsg(out, m.kind, string(m.key), m.payload)
		}
		// What decoded re-encodes to a prefix of the input.
		if !bytes.HasPrefix(b, out) {
			t.Fatalf("re-encoded %x not a prefix of %x", out, b)
		}
	})
}

// testSeals: a link's two directions as both ends derive them, each end
// with its own counters.
func testSeals(tb testing.TB) (dialer, acceptor [2]*linkSeal) {
	tb.Helper()
	key := linkKey(fleetSecret)
	nd, na := bytes.Repeat([]byte{1}, linkNonce), bytes.Repeat([]byte{2}, linkNonce)
	for _, end := range []*[2]*linkSeal{&dialer, &acceptor} {
		d2a, a2d, err := linkSeals(key, "z", "a", nd, na)
		if err != nil {
			tb.Fatal(err)
		}
		*end = [2]*linkSeal{d2a, a2d}
	}
	// [0]: what the end sends with, [1]: what it reads with.
	acceptor[0], acceptor[1] = acceptor[1], acceptor[0]
	return dialer, acceptor
}

// FuzzLinkRecord: the record reader never panics, allocates at most its
// bound before a record opens, and opens only what the peer sealed, in
// order: whatever the input, the plaintexts it returns are a prefix of
// the records sealed.
func FuzzLinkRecord(f *testing.F) {
	dialer, _ := testSeals(f)
	var sealed []byte
	var msgs [][]byte
	for i, m := range [][]byte{
		appendLinkMsg(nil, linkUpFrame, "z-1", []byte("hello")),
		appendLinkMsg(appendLinkMsg(nil, linkCredit, "z-1", []byte{1, 2}), linkUpDone, "z-1", nil),
		appendLinkMsg(nil, linkUpFrame, "z-2", bytes.Repeat([]byte{7}, 300)),
	} {
		var err error
		sealed, err = sealRecords(sealed, dialer[0], m)
		if err != nil {
			f.Fatal(err)
		}
		msgs = append(msgs, m)
		f.Add(bytes.Clone(sealed), uint8(i))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint8(0))
	f.Add([]byte{0, 0, 0, 16}, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, flip uint8) {
		if len(b) > 0 {
			b = bytes.Clone(b)
			b[int(flip)%len(b)] ^= flip >> 4
		}
		_, acceptor := testSeals(t)
		const max = 4 << 10
		rr := recordReader{r: bytes.NewReader(b), ls: acceptor[1], max: max}
		for i := 0; ; i++ {
			pt, err := rr.next()
			if cap(rr.buf) > max {
				t.Fatalf("allocated %d bytes, bound %d", cap(rr.buf), max)
			}
			if err != nil {
				return
			}
			if i >= len(msgs) || !bytes.Equal(pt, msgs[i]) {
				t.Fatalf("record %d opened to %x", i, pt)
			}
		}
	})
}

type lostLeg chan struct{}

func (l lostLeg) linkLost() { close(l) }

// A peer that stops reading: the link's queue is bounded (the budgets
// plus slack); past it the link closes and its legs are told, rather than
// the queue growing.
func TestPeerLinkQueueBound(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
	f := &fabric{s: s, links: map[string]*peerLink{}}
	mine, theirs := net.Pipe()
	defer theirs.Close() // never read
	_, acceptor := testSeals(t)
	pl := f.newLink("z", "id", mine, acceptor[0], acceptor[1])
	f.links["z"] = pl
	lost := make(lostLeg)
	if !pl.attach("z-1", lost) {
		t.Fatal("attach")
	}
	s.wg.Add(1)
	go pl.writer()
	payload := make([]byte, 32<<10)
	var sent int
	for ; sent < 10_000; sent++ {
		if pl.send(linkDownFrame, "z-1", payload) != nil {
			break
		}
	}
	if sent == 10_000 {
		t.Fatalf("%d MiB queued toward a peer that reads nothing", sent*len(payload)>>20)
	}
	if max := pl.maxPend + len(payload); sent*len(payload) > 2*max {
		t.Fatalf("%d bytes taken before the bound (%d)", sent*len(payload), max)
	}
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the leg was not told the link went")
	}
	if pl.send(linkCredit, "z-1", nil) != errLinkDown {
		t.Fatal("a closed link took a message")
	}
	s.wg.Wait()
	if f.links["z"] != nil || f.st.linkDowns.Load() != 1 {
		t.Fatalf("links %v, downs %d", f.links, f.st.linkDowns.Load())
	}
}

// A wildcard peer listener without an advertised address is refused:
// peers would dial themselves.
func TestPeerLinkWildcardNeedsAdvertise(t *testing.T) {
	nc := natsConn(t)
	_, err := New(Options{InsecureNoAuth: true, URLSecret: fleetSecret, NATS: nc, NodeName: "w", PeerListen: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "PeerAdvertise") {
		t.Fatalf("wildcard peer listener without PeerAdvertise: %v", err)
	}
	s, err := New(Options{InsecureNoAuth: true, URLSecret: fleetSecret, NATS: nc, NodeName: "w", PeerListen: "0.0.0.0:0", PeerAdvertise: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// linkUnderTest: a link of a bare fabric (this end, the acceptor) whose
// peer is the test: it writes records on peer, sealed with seal.
type linkUnderTest struct {
	f    *fabric
	pl   *peerLink
	rl   *remoteLeg // leg z-1, its inbox never drained
	peer net.Conn
	seal *linkSeal
}

func startLinkUnderTest(t *testing.T) *linkUnderTest {
	s := &Server{log: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
	f := &fabric{s: s, links: map[string]*peerLink{}, remote: map[string]*remoteLeg{}, fwd: map[string]*fwdLeg{}}
	mine, theirs := net.Pipe()
	dialer, acceptor := testSeals(t)
	pl := f.newLink("z", "id", mine, acceptor[0], acceptor[1])
	f.links["z"] = pl
	rl := &remoteLeg{f: f, key: "z-1", node: "z", link: pl}
	f.remote[rl.key] = rl
	s.wg.Add(1)
	go pl.reader(bufio.NewReader(mine))
	t.Cleanup(func() {
		theirs.Close()
		pl.close()
		s.wg.Wait()
	})
	return &linkUnderTest{f: f, pl: pl, rl: rl, peer: theirs, seal: dialer[0]}
}

// record seals msgs as the peer's next record.
func (lt *linkUnderTest) record(t *testing.T, msgs []byte) []byte {
	t.Helper()
	r, err := sealRecords(nil, lt.seal, msgs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// write sends b on a goroutine: the link may close before reading it all.
func (lt *linkUnderTest) write(b []byte) {
	go lt.peer.Write(b)
}

func (lt *linkUnderTest) queued() int {
	lt.rl.in.mu.Lock()
	defer lt.rl.in.mu.Unlock()
	return len(lt.rl.in.q)
}

func (lt *linkUnderTest) waitQueued(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for lt.queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames delivered, want %d", lt.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (lt *linkUnderTest) waitClosed(t *testing.T) {
	t.Helper()
	select {
	case <-lt.pl.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the link stayed up (%d frames delivered)", lt.queued())
	}
}

// Records are sealed: one changed, replayed, reordered or cut closes the
// link, and nothing of it is delivered.
func TestPeerLinkSealedRecords(t *testing.T) {
	frame := func(s string) []byte { return appendLinkMsg(nil, linkUpFrame, "z-1", []byte(s)) }
	for _, tc := range []struct {
		name string
		bad  func(t *testing.T, lt *linkUnderTest, first []byte) []byte
	}{
		{"flipped bit", func(t *testing.T, lt *linkUnderTest, _ []byte) []byte {
			r := lt.record(t, frame("two"))
			r[len(r)-20] ^= 1
			return r
		}},
		{"flipped length", func(t *testing.T, lt *linkUnderTest, _ []byte) []byte {
			r := lt.record(t, append(frame("two"), frame("three")...))
			r[3]-- // the last byte goes with the next record
			return r
		}},
		{"replayed", func(t *testing.T, lt *linkUnderTest, first []byte) []byte {
			return first
		}},
		{"reordered", func(t *testing.T, lt *linkUnderTest, _ []byte) []byte {
			lt.record(t, frame("two")) // sealed, never sent
			return lt.record(t, frame("three"))
		}},
		{"plaintext", func(t *testing.T, lt *linkUnderTest, _ []byte) []byte {
			m := frame("two")
			return append(binary.BigEndian.AppendUint32(nil, uint32(len(m)+linkTag)), append(m, make([]byte, linkTag)...)...)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := startLinkUnderTest(t)
			first := lt.record(t, frame("one"))
			lt.write(first)
			lt.waitQueued(t, 1)
			lt.write(tc.bad(t, lt, first))
			lt.waitClosed(t)
			if n := lt.queued(); n != 1 {
				t.Fatalf("%d frames delivered, want the first only", n)
			}
			if got := string(lt.rl.in.q[0].b); got != "one" {
				t.Fatalf("delivered %q", got)
			}
		})
	}
}

// A peer that ignores credits (sends past a leg's window) has its link
// closed; the leg's inbox stays within the window.
func TestPeerLinkReceiveBound(t *testing.T) {
	for _, size := range []int{100, 60 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			lt := startLinkUnderTest(t)
			payload := make([]byte, size)
			go func() {
				for i := 0; i < 1000; i++ {
					if _, err := lt.peer.Write(lt.record(t, appendLinkMsg(nil, linkUpFrame, "z-1", payload))); err != nil {
						return
					}
				}
			}()
			lt.waitClosed(t)
			maxPayload := lt.f.linkMaxPayload()
			lt.rl.in.mu.Lock()
			n, b := len(lt.rl.in.q), lt.rl.in.bytes
			lt.rl.in.mu.Unlock()
			if n > fabWindowFrames+linkInboxSlack || b > fabWindowBytes+maxPayload {
				t.Fatalf("inbox holds %d frames, %d bytes", n, b)
			}
			if n < min(fabWindowFrames, fabWindowBytes/size) {
				t.Fatalf("closed at %d frames of %d bytes, within the window", n, size)
			}
		})
	}
}

// Connections that never greet do not keep a real peer out: each gives
// back its handshake slot after linkHSFirst, and one address holds at
// most linkMaxAuthIP of them.
func TestPeerLinkIdleHandshakes(t *testing.T) {
	url := startNATS(t)
	// "a" dials "b": b's listener is the one held.
	b := startNode(t, url, "b", "", withLinks(nil))
	addr := b.fab.linkAddr
	var (
		stopped atomic.Bool
		held    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   = map[net.Conn]bool{}
	)
	for range 2 * linkMaxAuth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
			for !stopped.Load() {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				held.Add(1)
				mu.Lock()
				conns[c] = true
				mu.Unlock()
				if stopped.Load() {
					c.Close()
				}
				t0 := time.Now()
				io.Copy(io.Discard, c) // until the node drops it
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				// Refill a slot that was held at once; dropped at
				// once (no slot), retry more slowly (bounded load).
				if time.Since(t0) < 100*time.Millisecond {
					time.Sleep(20 * time.Millisecond)
				} else {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	defer func() {
		stopped.Store(true)
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for held.Load() < linkMaxAuth {
		time.Sleep(time.Millisecond)
	}
	a := startNode(t, url, "a", "", withLinks(nil))
	waitLinks(t, 30*time.Second, a, b)
}

// BenchmarkLinkSeal: the sealing's own cost, seal and open of a record
// holding frames messages of a 1 KiB frame each (the writer seals one
// record per batch), per frame.
func BenchmarkLinkSeal(b *testing.B) {
	for _, frames := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", frames), func(b *testing.B) {
			dialer, acceptor := testSeals(b)
			var msgs []byte
			for range frames {
				msgs = appendLinkMsg(msgs, linkUpFrame, "z-123456789", make([]byte, 1024))
			}
			var wire bytes.Buffer
			rr := recordReader{r: &wire, ls: acceptor[1], max: linkMaxRecord(64 << 10)}
			var out []byte
			b.SetBytes(int64(len(msgs) / frames))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += frames {
				var err error
				out, err = sealRecords(out[:0], dialer[0], msgs)
				if err != nil {
					b.Fatal(err)
				}
				wire.Write(out)
				if _, err := rr.next(); err != nil {
					b.Fatal(err)
				}
				wire.Reset()
			}
		})
	}
}

// TestPeerLinkWriterBatches: what the writer sends opens, in order and
// byte-exact, whether a batch went out as one record sealed in place
// (sealBatch) or, past linkRecordMax, cut into several.
func TestPeerLinkWriterBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"one small", []int{1}},
		{"one record", []int{100, 60 << 10, 0, 7, 60 << 10}},
		{"exactly full", []int{linkRecordMax - linkHeader - 3}},
		{"several records", []int{600 << 10, 600 << 10, 600 << 10, 5, 900 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{log: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
			s.opts.FleetNodeBytes = 64 << 20
			f := &fabric{s: s, links: map[string]*peerLink{}}
			mine, theirs := net.Pipe()
			dialer, acceptor := testSeals(t)
			pl := f.newLink("z", "id", mine, acceptor[0], acceptor[1])
			var want [][]byte
			for i, n := range tc.sizes {
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(i*131 + j)
				}
				want = append(want, p)
				if err := pl.send(linkDownFrame, fmt.Sprint("z-", i), p); err != nil {
					t.Fatal(err)
				}
			}
			// Everything queued before the writer starts: one batch.
			s.wg.Add(1)
			go pl.writer()
			t.Cleanup(func() {
				theirs.Close()
				pl.close()
				s.wg.Wait()
			})
			rr := recordReader{r: theirs, ls: dialer[1], max: linkMaxRecord(1 << 20)}
			theirs.SetDeadline(time.Now().Add(30 * time.Second))
			for i := 0; i < len(want); {
				pt, err := rr.next()
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				for len(pt) > 0 {
					var m linkMsg
					m, pt, err = parseLinkMsg(pt, 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					if string(m.key) != fmt.Sprint("z-", i) || !bytes.Equal(m.payload, want[i]) {
						t.Fatalf("message %d: key %q, %d bytes; want %d bytes", i, m.key, len(m.payload), len(want[i]))
					}
					i++
				}
			}
		})
	}
}
