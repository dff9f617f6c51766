package channel

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

// lossyLink carries frames to a channel through a goroutine that drops,
// duplicates and reorders them (every kind, acks included).
type lossyLink struct {
	mu                   sync.Mutex
	rng                  *rand.Rand
	drop, dup, reorder   float64
	q                    chan []byte
	to                   *Channel
	dropped, duplicated  int
	reordered, delivered int
}

func newLossyLink(seed uint64, drop, dup, reorder float64) *lossyLink {
	return &lossyLink{rng: rand.New(rand.NewPCG(seed, 1)), drop: drop, dup: dup, reorder: reorder, q: make(chan []byte, 4096)}
}

func (l *lossyLink) Send(ctx context.Context, f *frame.Frame) error {
	b := f.Marshal()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rng.Float64() < l.drop {
		l.dropped++
		return nil
	}
	n := 1
	if l.rng.Float64() < l.dup {
		n = 2
		l.duplicated++
	}
	for range n {
		select {
		case l.q <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (l *lossyLink) stats() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d delivered, %d dropped, %d duplicated, %d reordered", l.delivered, l.dropped, l.duplicated, l.reordered)
}

// run delivers until the channel ends; with probability reorder a frame
// waits behind the next one.
func (l *lossyLink) run() {
	var held []byte
	for {
		var b []byte
		select {
		case b = <-l.q:
		case <-time.After(20 * time.Millisecond):
			if held == nil {
				if l.to.Err() != nil {
					return
				}
				continue
			}
			b, held = held, nil
		}
		l.mu.Lock()
		swap := held == nil && l.rng.Float64() < l.reorder
		if swap {
			l.reordered++
		}
		l.mu.Unlock()
		if swap {
			held = b
			continue
		}
		for _, m := range [][]byte{b, held} {
			if m == nil {
				continue
			}
			f, err := frame.Unmarshal(m)
			if err != nil {
				panic(err)
			}
			if err := l.to.Deliver(context.Background(), f); err != nil {
				return
			}
			l.mu.Lock()
			l.delivered++
			l.mu.Unlock()
		}
		held = nil
	}
}

// linkedPair connects two channels through lossy links.
func linkedPair(t *testing.T, relA, relB bool, drop, dup, reorder float64) (a, b *Channel, ab, ba *lossyLink) {
	ab, ba = newLossyLink(1, drop, dup, reorder), newLossyLink(2, drop, dup, reorder)
	k1, k2 := [32]byte{1}, [32]byte{2}
	a = New("s", ab, noise.NewCipherState(k1), noise.NewCipherState(k2), Options{Reliable: relA, WaitWhenFull: true, QueueLen: 8})
	b = New("s", ba, noise.NewCipherState(k2), noise.NewCipherState(k1), Options{Reliable: relB, WaitWhenFull: true, QueueLen: 8})
	ab.to, ba.to = b, a
	go ab.run()
	go ba.run()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, ab, ba
}

func message(seed, i int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
	n := 2 + r.IntN(150000)
	if r.IntN(4) > 0 {
		n = 2 + r.IntN(200)
	}
	return append(fmt.Appendf(nil, `["%d-%d",`, seed, i), append(jsonOf(n), ']')...)
}

// exchange writes n messages each way at once and checks that each side
// reads the other's, once each, in order.
func exchange(t *testing.T, a, b *Channel, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for side, c := range []*Channel{a, b} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := c.Write(ctx, message(side, i), i%3 == 0); err != nil {
					errs <- fmt.Errorf("side %d write %d: %w", side, i, err)
					return
				}
			}
			// Flush a held tail.
			if err := c.Write(ctx, []byte("null"), false); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			for i := range n {
				m, err := c.Read(ctx)
				if err != nil {
					errs <- fmt.Errorf("side %d read %d: %w", side, i, err)
					return
				}
				if want := message(1-side, i); !bytes.Equal(m, want) {
					errs <- fmt.Errorf("side %d message %d: %.40s, want %.40s", side, i, m, want)
					return
				}
			}
			if m, err := c.Read(ctx); err != nil || string(m) != "null" {
				errs <- fmt.Errorf("side %d tail: %q %v", side, m, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestReliableOverLossyLink(t *testing.T) {
	a, b, ab, ba := linkedPair(t, true, true, 0.1, 0.05, 0.1)
	exchange(t, a, b, 300)
	t.Logf("a→b %s; b→a %s; resent %d %d", ab.stats(), ba.stats(), a.Retransmitted(), b.Retransmitted())
	ab.mu.Lock()
	ba.mu.Lock()
	none := ab.dropped == 0 || ba.dropped == 0
	ba.mu.Unlock()
	ab.mu.Unlock()
	if none {
		t.Fatal("the link dropped nothing: the test proves nothing")
	}
}

// One end advertising changes nothing for a peer that does not (a codex
// 0.169 peer): no stall, no error.
func TestReliableWithPlainPeer(t *testing.T) {
	for _, tt := range []struct{ a, b bool }{{true, false}, {false, true}, {false, false}} {
		t.Run(fmt.Sprint(tt.a, tt.b), func(t *testing.T) {
			a, b, _, _ := linkedPair(t, tt.a, tt.b, 0, 0, 0)
			exchange(t, a, b, 150) // more than the in-flight window
		})
	}
}

func TestPlainStallsOnLoss(t *testing.T) {
	a, b, _, _ := linkedPair(t, false, false, 0.2, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for i := range 20 {
		a.Write(ctx, message(0, i), false)
	}
	got := 0
	for {
		if _, err := b.Read(ctx); err != nil {
			break
		}
		got++
	}
	if got == 20 {
		t.Fatal("every message arrived over a link that drops 20 %: the loss test proves nothing")
	}
}

// Arbitrary ack fields and frame kinds from a peer never break the
// sender's bookkeeping: no panic, the window stays within bounds.
func FuzzReliableInbound(f *testing.F) {
	f.Add([]byte{byte(frame.KindHeartbeat), 0, 0, 0x52, 0x4C, 0x59, 0x31, byte(frame.KindAck), 3, 0, 0, 0, 5})
	f.Add([]byte{byte(frame.KindData), 9, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, script []byte) {
		c := New("s", SenderFunc(func(context.Context, *frame.Frame) error { return nil }),
			noise.NewCipherState([32]byte{1}), noise.NewCipherState([32]byte{2}), Options{Reliable: true, QueueLen: 1 << 10})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		for i := range 10 {
			if err := c.Write(ctx, fmt.Appendf(nil, "%d", i), false); err != nil {
				t.Fatal(err)
			}
		}
		for len(script) >= 6 {
			g := &frame.Frame{Version: 1, StreamID: "s", Kind: frame.Kind(script[0] % 7),
				Ack: uint32(script[1]), AckBits: uint32(script[2])<<24 | uint32(script[3])<<16 | uint32(script[4])<<8 | uint32(script[5])}
			script = script[6:]
			if g.Kind == frame.KindData {
				g.SegmentCount, g.Payload = 1, make([]byte, 17)
			}
			c.Deliver(ctx, g)
		}
		c.rel.mu.Lock()
		defer c.rel.mu.Unlock()
		if len(c.rel.unacked) > maxInflight || c.rel.bytes < 0 {
			t.Fatalf("%d kept, %d bytes", len(c.rel.unacked), c.rel.bytes)
		}
	})
}

// reliablePeer returns the reliability state of a channel whose sends
// succeed and whose peer is known to be reliable.
func reliablePeer(t *testing.T) *reliable {
	c := New("s", SenderFunc(func(context.Context, *frame.Frame) error { return nil }),
		noise.NewCipherState([32]byte{1}), noise.NewCipherState([32]byte{2}), Options{Reliable: true})
	t.Cleanup(func() { c.Close() })
	r := c.rel
	r.mu.Lock()
	r.setKind(peerReliable)
	r.mu.Unlock()
	return r
}

// A kept record acknowledged while a send of it is under way keeps its
// payload until that send ends; only then does the buffer go back to
// the pool (it would otherwise be resealed under the send's feet).
func TestRecordRecycledAfterSend(t *testing.T) {
	r := reliablePeer(t)
	for _, tt := range []struct {
		name  string
		ackAt int // acknowledged after this many of the two sends ended
	}{{"ack during both sends", 0}, {"ack during the resend", 1}, {"ack after both", 2}} {
		t.Run(tt.name, func(t *testing.T) {
			r.mu.Lock()
			seq := uint32(len(r.unacked))
			if len(r.unacked) > 0 {
				seq = r.unacked[len(r.unacked)-1].f.Seq + 1
			}
			r.mu.Unlock()
			f := &frame.Frame{Kind: frame.KindData, Seq: seq, Payload: getRecord(MaxRecordPlaintext + noise.Overhead)[:10]}
			rec := r.sent(f) // the first send is under way
			if rec == nil {
				t.Fatal("record not kept")
			}
			r.mu.Lock()
			rec.sending++ // a retransmission of it too
			r.mu.Unlock()
			ack := func() { r.inbound(&frame.Frame{Kind: frame.KindAck, Ack: seq + 2}) }
			for i := range 2 {
				if i == tt.ackAt {
					ack()
				}
				if f.Payload == nil {
					t.Fatalf("payload recycled with %d of 2 sends still under way", 2-i)
				}
				r.sendDone(rec)
			}
			if tt.ackAt == 2 {
				if f.Payload == nil {
					t.Fatal("payload recycled before the record was acknowledged")
				}
				ack()
			}
			if f.Payload != nil {
				t.Fatal("payload not recycled once acknowledged and no send was under way")
			}
		})
	}
}

// The retransmission timeout follows the measured round trip (RFC 6298),
// takes no sample from a resent record (Karn) nor from a record that
// waited SACKed behind a hole, and keeps a backed-off value until a new
// sample.
func TestMeasuredRTO(t *testing.T) {
	r := reliablePeer(t)
	seq := uint32(0)
	// send keeps a record sent ago; resent marks it as sent again.
	send := func(ago time.Duration, resent bool) *sentRecord {
		rec := r.sent(&frame.Frame{Kind: frame.KindData, Seq: seq, Payload: make([]byte, 10)})
		r.sendDone(rec)
		r.mu.Lock()
		rec.sentAt = time.Now().Add(-ago)
		rec.resent = resent
		r.mu.Unlock()
		seq++
		return rec
	}
	ackAll := func() { r.inbound(&frame.Frame{Kind: frame.KindAck, Ack: seq + 1}) }
	state := func() (rto, srtt time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.rto, r.srtt
	}
	if rto, _ := state(); rto != initialRTO {
		t.Fatalf("rto %v before any sample, want %v", rto, initialRTO)
	}
	send(time.Millisecond, false)
	ackAll()
	if rto, srtt := state(); srtt < time.Millisecond || rto != minRTO {
		t.Fatalf("after a 1 ms sample: srtt %v rto %v, want srtt >= 1ms and rto %v", srtt, rto, minRTO)
	}
	for range 20 {
		send(400*time.Millisecond, false)
		ackAll()
	}
	rto, srtt := state()
	if srtt < 300*time.Millisecond || rto < srtt+rtoSlack {
		t.Fatalf("after 400 ms samples: srtt %v rto %v", srtt, rto)
	}
	// A resent record's ack says nothing about the round trip.
	send(3*time.Second, true)
	ackAll()
	if _, s := state(); s != srtt {
		t.Fatalf("srtt moved from %v to %v on a resent record", srtt, s)
	}
	// A record SACKed at once and acknowledged when its hole fills much
	// later: sampled when SACKed (as short), not when acknowledged.
	hole := send(0, true)
	late := send(500*time.Microsecond, false)
	r.inbound(&frame.Frame{Kind: frame.KindAck, Ack: hole.f.Seq + 1, AckBits: 1})
	_, s1 := state()
	r.mu.Lock()
	late.sentAt = time.Now().Add(-10 * time.Second)
	r.mu.Unlock()
	ackAll()
	if _, s2 := state(); s2 != s1 || s1 >= srtt {
		t.Fatalf("srtt %v, then %v after the SACK, %v once the hole filled: want a shorter value from the SACK, unchanged after", srtt, s1, s2)
	}
	// Backoff stays until a fresh sample.
	r.mu.Lock()
	r.rto = maxRTO
	r.mu.Unlock()
	send(0, true)
	ackAll()
	if rto, _ := state(); rto != maxRTO {
		t.Fatalf("backed-off rto reset to %v without a new sample", rto)
	}
	send(time.Millisecond, false)
	ackAll()
	if rto, _ := state(); rto >= maxRTO {
		t.Fatalf("rto %v still backed off after a new sample", rto)
	}
}

// cutSocket stands in for one relay socket between a and b that is cut
// after budget frames, counted both ways (as the relay's CutEvery fault
// does); frames after the cut are lost.
type cutSocket struct {
	mu     sync.Mutex
	budget int
	q      chan func()
	gone   chan struct{}
}

var errCut = fmt.Errorf("socket cut")

func newCutSocket(budget int) *cutSocket {
	s := &cutSocket{budget: budget, q: make(chan func(), 4096), gone: make(chan struct{})}
	go func() {
		// What was routed before the cut still arrives.
		for f := range s.q {
			f()
		}
	}()
	return s
}

// to is a sender onto the socket toward c. Deliveries run on the socket's
// goroutine, after the send returns: a burst of sends can use the whole
// budget before the peer's answer to its first frame gets through.
func (s *cutSocket) to(c *atomic.Pointer[Channel]) Sender {
	return SenderFunc(func(ctx context.Context, f *frame.Frame) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.budget == 0 {
			return errCut
		}
		s.budget--
		b := f.Marshal()
		s.q <- func() {
			g, err := frame.Unmarshal(b)
			if err != nil {
				panic(err)
			}
			if c := c.Load(); c != nil { // nil: not made yet
				c.Deliver(context.Background(), g)
			}
		}
		if s.budget == 0 {
			close(s.q)
			close(s.gone)
		}
		return nil
	})
}

// TestResumeProgressesThroughShortSockets: a stream whose socket is cut
// every 40 frames, again and again, still gets all its data through. Each
// Rebind used to send a resume and every kept record (up to 48) at once:
// the socket was cut before the peer's ack could come back, the next
// socket carried the same oldest records again, and nothing progressed
// (TestReliableThroughFaults/executor_socket_cut under load: the harness
// gave up its stream). Now the kept records follow the peer's answer, so
// each socket carries records the peer lacks.
func TestResumeProgressesThroughShortSockets(t *testing.T) {
	k1, k2 := [32]byte{1}, [32]byte{2}
	var cur atomic.Pointer[cutSocket]
	cur.Store(newCutSocket(1 << 30)) // uncut until both ends know each other
	var pa, pb atomic.Pointer[Channel]
	aSend := SenderFunc(func(ctx context.Context, f *frame.Frame) error { return cur.Load().to(&pb).Send(ctx, f) })
	bSend := SenderFunc(func(ctx context.Context, f *frame.Frame) error { return cur.Load().to(&pa).Send(ctx, f) })
	a := New("s", aSend, noise.NewCipherState(k1), noise.NewCipherState(k2), Options{Reliable: true, WaitWhenFull: true, QueueLen: 8})
	pa.Store(a)
	b := New("s", bSend, noise.NewCipherState(k2), noise.NewCipherState(k1), Options{Reliable: true, WaitWhenFull: true, QueueLen: 8})
	pb.Store(b)
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Write(ctx, []byte(`"hello"`), false); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Read(ctx); err != nil || string(m) != `"hello"` {
		t.Fatalf("first message %q %v", m, err)
	}
	if err := b.Write(ctx, []byte(`"hi"`), false); err != nil {
		t.Fatal(err)
	}
	if m, err := a.Read(ctx); err != nil || string(m) != `"hi"` {
		t.Fatalf("first answer %q %v", m, err)
	}
	if !a.Resumable() || !b.Resumable() {
		t.Fatal("the ends did not learn each other as reliable")
	}
	// From now on every socket is cut after 40 frames; the owner (this
	// goroutine) dials the next one a moment later, as the executor
	// does, and what is sent meanwhile is lost.
	cur.Store(newCutSocket(40))
	var sockets atomic.Int64
	go func() {
		for {
			select {
			case <-cur.Load().gone:
			case <-ctx.Done():
				return
			}
			time.Sleep(20 * time.Millisecond)
			cur.Store(newCutSocket(40))
			sockets.Add(1)
			if err := a.Rebind(ctx, aSend); err != nil {
				return
			}
		}
	}()
	const n = 600
	msg := func(i int) []byte { return fmt.Appendf(nil, `["m%d",%s1]`, i, strings.Repeat("1,", 100)) }
	go func() {
		for i := range n {
			if a.Write(ctx, msg(i), false) != nil {
				return
			}
		}
	}()
	for i := range n {
		m, err := b.Read(ctx)
		if err != nil {
			t.Fatalf("message %d of %d: %v (after %d socket cuts, %d records resent)", i, n, err, sockets.Load(), a.Retransmitted())
		}
		if !bytes.Equal(m, msg(i)) {
			t.Fatalf("message %d: %.40s", i, m)
		}
	}
	t.Logf("%d messages through %d sockets; %d records resent", n, sockets.Load(), a.Retransmitted())
}
