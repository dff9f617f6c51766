package relay

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// legOf is the relay's leg of role for env (waits for it).
func legOf(t *testing.T, r *testRelay, role, env string) *leg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for l := range r.legs {
			if l.role == role && l.env == env && !l.ending() {
				r.mu.Unlock()
				return l
			}
		}
		r.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %s leg for %s", role, env)
	return nil
}

// batchFrames are frames of sizes 1 B to 100 KiB (past corkMax, so a batch
// is written in more than one piece), each one distinct.
func batchFrames(n int) [][]byte {
	sizes := []int{1, 1000, 1024, 5000, 70 << 10, 100 << 10, 16, 3000}
	var out [][]byte
	for i := range n {
		out = append(out, dataFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", uint32(i), bytes.Repeat([]byte{byte(i)}, sizes[i%len(sizes)])))
	}
	return out
}

// A batch of frames handed to an idle leg (a peer link's inbox does) goes
// out in one write when it fits corkMax, byte-exact and in order. Written
// frame by frame it took one syscall each.
func TestLegBatchOneWrite(t *testing.T) {
	p := newPair(t, Options{})
	l := legOf(t, p.r, roleEnvironment, "E")
	if l.cc == nil {
		t.Fatal("the executor's socket is not a corkConn")
	}
	var fs []outFrame
	var want [][]byte
	for i := range 16 {
		b := dataFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", uint32(i), bytes.Repeat([]byte{byte(i)}, 1000))
		want = append(want, b)
		fs = append(fs, outFrame{b: bytes.Clone(b)})
	}
	before := l.cc.writes.Load()
	if ok, _ := l.sendBatch(fs); !ok {
		t.Fatal("sendBatch failed")
	}
	for i, w := range want {
		if got := read(t, p.exec); !bytes.Equal(got, w) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if n := l.cc.writes.Load() - before; n != 1 {
		t.Fatalf("16 frames of 1 KiB took %d writes, want 1", n)
	}

	// Larger than corkMax: still in order and byte-exact, fewer writes
	// than frames.
	want = batchFrames(40)
	fs = fs[:0]
	for _, b := range want {
		fs = append(fs, outFrame{b: bytes.Clone(b)})
	}
	before = l.cc.writes.Load()
	done := make(chan bool, 1)
	go func() { ok, _ := l.sendBatch(fs); done <- ok }()
	for i, w := range want {
		if got := read(t, p.exec); !bytes.Equal(got, w) {
			t.Fatalf("frame %d of the large batch differs (%d bytes, want %d)", i, len(got), len(w))
		}
	}
	if !<-done {
		t.Fatal("sendBatch failed")
	}
	if n := l.cc.writes.Load() - before; n >= uint64(len(want)) {
		t.Fatalf("%d frames took %d writes", len(want), n)
	}
}

// Frames that queue while the executor does not read (harness sockets
// contend for its socket: one writes, the others queue) are written by
// the leg's writer in batches (fewer writes than frames), in order per
// stream and byte-exact once the executor reads again.
func TestLegWriterBatchesQueuedFrames(t *testing.T) {
	p := newPair(t, Options{})
	const harnesses, perStream = 3, 1500
	sid := func(h int) string { return fmt.Sprintf("0f8b1d2e-aaaa-4bbb-8ccc-%012d", h) }
	var hs []*websocket.Conn
	for i := range harnesses {
		p.bundle = p.r.connect(t, "E", randomKey())
		h := p.harness(t)
		write(t, h, resumeFrame(sid(i))) // binds the stream to h
		if got := read(t, p.exec); !bytes.Equal(got, resumeFrame(sid(i))) {
			t.Fatal("resume not routed")
		}
		hs = append(hs, h)
	}
	l := legOf(t, p.r, roleEnvironment, "E")
	before := l.cc.writes.Load()
	frameOf := func(h, i int) []byte {
		return dataFrame(sid(h), uint32(i), bytes.Repeat([]byte{byte(i), byte(h)}, 2000+i%7))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sent := make(chan error, harnesses)
	for hi, h := range hs {
		go func() {
			for i := range perStream {
				if err := h.Write(ctx, websocket.MessageBinary, frameOf(hi, i)); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
	}
	// Wait until frames wait in the leg's queue, then read.
	deadline := time.Now().Add(30 * time.Second)
	for l.unsent.Load() < 8 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if l.unsent.Load() < 8 {
		t.Fatal("no frames queued for the executor")
	}
	next := make([]int, harnesses)
	for range harnesses * perStream {
		got := read(t, p.exec)
		f, err := peekFrame(got)
		if err != nil {
			t.Fatal(err)
		}
		var hi int
		fmt.Sscanf(f.StreamID[len(f.StreamID)-12:], "%d", &hi)
		if want := frameOf(hi, next[hi]); !bytes.Equal(got, want) {
			t.Fatalf("stream %d: frame %d differs", hi, next[hi])
		}
		next[hi]++
	}
	for range harnesses {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	if n := l.cc.writes.Load() - before; n >= harnesses*perStream {
		t.Fatalf("%d frames took %d writes: not batched", harnesses*perStream, n)
	} else {
		t.Logf("%d frames, %d writes", harnesses*perStream, n)
	}
}

// Frames of a peer link's inbox in pooled buffers (legBatch.addBuf): on
// an idle socket they are written at once and their buffers go back to
// the pool; on a busy one they queue, and their buffers must stay theirs
// until written: the pool's next users scribbling on what they get never
// changes what the executor reads.
func TestLegBatchPooledBuffers(t *testing.T) {
	p := newPair(t, Options{})
	l := legOf(t, p.r, roleEnvironment, "E")
	frames := batchFrames(24)
	for _, busy := range []bool{false, true} {
		var bt legBatch
		if busy {
			l.wmu.Lock() // as if a write were in progress: the batch queues
		}
		pooled := 0
		for _, f := range frames {
			lb := getLinkBuf(len(f))
			var b []byte
			if lb != nil {
				pooled++
				b = lb.b[:len(f):len(f)]
				copy(b, f)
			} else {
				b = bytes.Clone(f)
			}
			bt.addBuf(l, b, lb)
		}
		if pooled == 0 {
			t.Fatal("no frame of the batch in a pooled buffer")
		}
		bt.flush()
		for range 4 * len(frames) {
			if lb := getLinkBuf(3000); lb != nil {
				for i := range lb.b {
					lb.b[i] = 0xee
				}
				defer lb.free()
			}
			if lb := getLinkBuf(60 << 10); lb != nil {
				for i := range lb.b {
					lb.b[i] = 0xee
				}
				defer lb.free()
			}
		}
		if busy {
			l.wmu.Unlock()
		}
		for i, w := range frames {
			if got := read(t, p.exec); !bytes.Equal(got, w) {
				t.Fatalf("busy %v: frame %d differs (%d bytes, want %d)", busy, i, len(got), len(w))
			}
		}
	}
}

// heldConn is a client socket whose writes wait in a buffer while held,
// so that several frames reach the relay in one TCP write.
type heldConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// release writes what was held, in one write, and stops holding.
func (c *heldConn) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// dialHeld dials url's websocket through a heldConn.
func dialHeld(t *testing.T, url string) (*websocket.Conn, *heldConn) {
	t.Helper()
	var hc *heldConn
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		hc = &heldConn{Conn: c}
		return hc, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c, hc
}

// Frames a harness socket's one read brings, all toward the executor, go
// out in one write (leg.sendFrom gathers them, releaseHeld writes them
// before the reader reads again), byte-exact and in order; without the
// gathering each was its own write.
func TestReaderGathersTowardOneSocket(t *testing.T) {
	p := newPair(t, Options{})
	l := legOf(t, p.r, roleEnvironment, "E")
	if l.cc == nil {
		t.Fatal("the executor's socket is not a corkConn")
	}
	n := len(p.r.rec.all())
	h, hc := dialHeld(t, p.bundle["url"].(string))
	p.r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Role == roleHarness })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// 12 frames of 200 bytes: one read of the relay's 4 KiB buffer.
	const frames = 12
	var want [][]byte
	hc.mu.Lock()
	hc.hold = true
	hc.mu.Unlock()
	for i := range frames {
		b := dataFrame("0f8b1d2e-aaaa-4bbb-8ccc-123456789abc", uint32(i+1), bytes.Repeat([]byte{byte(i)}, 200))
		want = append(want, b)
		if err := h.Write(ctx, websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
	}
	before := l.cc.writes.Load()
	if err := hc.release(); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if got := read(t, p.exec); !bytes.Equal(got, w) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if n := l.cc.writes.Load() - before; n != 1 {
		t.Fatalf("%d frames read at once took %d writes to the executor, want 1", frames, n)
	}
}

// Frames of one executor read for two harness sockets, interleaved: each
// run of frames toward one socket goes in one write, and every frame
// reaches its socket byte-exact and in order (switching sockets writes
// and lets go of the one gathered for first).
func TestReaderGathersPerSocket(t *testing.T) {
	r := startRelay(t, Options{})
	r.attach(t, "E")
	reg := r.register(t, "E", randomKey())
	n := len(r.rec.all())
	exec, hc := dialHeld(t, reg["url"].(string))
	r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Env == "E" })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	sids := []string{"0f8b1d2e-aaaa-4bbb-8ccc-00000000000a", "0f8b1d2e-aaaa-4bbb-8ccc-00000000000b"}
	var hs []*websocket.Conn
	var legs []*leg
	for i, sid := range sids {
		n := len(r.rec.all())
		h := dial(t, r.connect(t, "E", randomKey())["url"].(string))
		r.rec.wait(t, n, 5*time.Second, func(e Event) bool { return e.Kind == "attach" && e.Role == roleHarness })
		// The stream's first frame binds it to this socket.
		first := dataFrame(sid, 1, []byte("open"))
		if err := h.Write(ctx, websocket.MessageBinary, first); err != nil {
			t.Fatal(err)
		}
		if got := read(t, exec); !bytes.Equal(got, first) {
			t.Fatalf("stream %d's first frame differs", i)
		}
		hs = append(hs, h)
	}
	r.mu.Lock()
	for l := range r.legs {
		if l.role == roleHarness {
			legs = append(legs, l)
		}
	}
	r.mu.Unlock()
	if len(legs) != 2 || legs[0].cc == nil || legs[1].cc == nil {
		t.Fatalf("%d harness legs, want 2 on corkConns", len(legs))
	}
	var before uint64
	for _, l := range legs {
		before += l.cc.writes.Load()
	}

	// Runs toward A, B: [A A] [B B] [A] [B] [A A] = 5 writes.
	order := []int{0, 0, 1, 1, 0, 1, 0, 0}
	want := make([][][]byte, 2)
	hc.mu.Lock()
	hc.hold = true
	hc.mu.Unlock()
	for i, to := range order {
		b := dataFrame(sids[to], uint32(i+2), bytes.Repeat([]byte{byte(i)}, 200))
		want[to] = append(want[to], b)
		if err := exec.Write(ctx, websocket.MessageBinary, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := hc.release(); err != nil {
		t.Fatal(err)
	}
	for to, h := range hs {
		for i, w := range want[to] {
			if got := read(t, h); !bytes.Equal(got, w) {
				t.Fatalf("socket %d's frame %d differs", to, i)
			}
		}
	}
	var after uint64
	for _, l := range legs {
		after += l.cc.writes.Load()
	}
	if n := after - before; n != 5 {
		t.Fatalf("5 runs of frames toward two sockets took %d writes, want 5", n)
	}
}
