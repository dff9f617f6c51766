package relay

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/internal/rawsock"
	"github.com/execgo/exec-server/internal/test/tcptest"
)

// TestWSBinaryHeader: the header a link's reader writes ahead of a frame
// is the one RFC 6455 gives (final, binary, unmasked, the length in the
// fewest bytes); coder/websocket reading each size back is in
// TestLinkReaderWritesFrames.
func TestWSBinaryHeader(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x82, 0}},
		{125, []byte{0x82, 125}},
		{126, []byte{0x82, 126, 0, 126}},
		{65535, []byte{0x82, 126, 0xff, 0xff}},
		{65536, []byte{0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
		{200 << 10, []byte{0x82, 127, 0, 0, 0, 0, 0, 3, 0x20, 0}},
	} {
		var b [10]byte
		if got := wsBinaryHeader(&b, tc.n); !bytes.Equal(got, tc.want) {
			t.Errorf("%d bytes: header % x, want % x", tc.n, got, tc.want)
		}
	}
}

// TestLinkReaderWritesFrames: frames crossing a peer link are written to
// their socket by the link's reader (no hand-off to the leg's goroutine),
// byte-exact and in order both ways, at every header size; and when a
// harness does not read, what its socket's buffer does not take is
// written later by the socket's own goroutine (a carry), still in order,
// while the link goes on carrying others' frames.
func TestLinkReaderWritesFrames(t *testing.T) {
	url := startNATS(t)
	opts := withLinks(func(o *Options) { o.SlowHarness = time.Minute })
	a := startNode(t, url, "a", "", opts)
	b := startNode(t, url, "b", "", opts)
	waitLinks(t, 10*time.Second, a, b)
	reg := a.register(t, "E1", randomKey())
	exec := dial(t, reg["url"].(string))
	a.executorOn(t, "E1", 10*time.Second)
	// The harness's receive buffer is small (and not grown by the
	// kernel), so a burst it does not read overflows the relay's socket.
	h := dialRcvBuf(t, b.connect(t, "E1", randomKey())["url"].(string), 8<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	readExact := func(c *websocket.Conn, want []byte, what string) {
		t.Helper()
		typ, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if typ != websocket.MessageBinary || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v message of %d bytes, want the %d sent", what, typ, len(got), len(want))
		}
	}
	payload := func(n, seed int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*7 + seed)
		}
		return p
	}

	// Every header size, one frame at a time, both ways.
	seq := uint32(0)
	for _, n := range []int{1, 60, 125, 126, 1000, 65000, 65535, 65536, 70000, 200 << 10} {
		up := dataFrame(benchSID, seq, payload(n, 1))
		write(t, h, up)
		readExact(exec, up, fmt.Sprintf("up, %d-byte payload", n))
		down := dataFrame(benchSID, seq, payload(n, 2))
		write(t, exec, down)
		readExact(h, down, fmt.Sprintf("down, %d-byte payload", n))
		seq++
	}
	inline := a.FleetStats().LinkInline + b.FleetStats().LinkInline
	if inline < 10 {
		t.Fatalf("%d of 20 frames written by the links' readers; want most", inline)
	}

	// The harness stops reading; the executor sends more than the
	// relay's socket buffer (grown by the kernel up to 4 MiB here) holds.
	var sent [][]byte
	for i := range 100 {
		sent = append(sent, dataFrame(benchSID, seq, payload(60<<10, i)))
		seq++
	}
	burst := make(chan error, 1)
	go func() {
		for _, f := range sent {
			if err := exec.Write(ctx, websocket.MessageBinary, f); err != nil {
				burst <- err
				return
			}
		}
		burst <- nil
	}()
	deadline := time.Now().Add(30 * time.Second)
	for b.carries.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no write left a carry with the harness not reading")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Meanwhile the link carries the other direction.
	up := dataFrame(benchSID, seq, payload(100, 3))
	write(t, h, up)
	readExact(exec, up, "up while the harness is not reading")
	for i, f := range sent {
		readExact(h, f, fmt.Sprintf("down, frame %d of the burst", i))
	}
	if err := <-burst; err != nil {
		t.Fatal(err)
	}
}

// dialRcvBuf dials url's websocket with the socket's receive buffer set
// to n bytes before it connects.
func dialRcvBuf(t *testing.T, url string, n int) *websocket.Conn {
	t.Helper()
	d := &net.Dialer{Control: tcptest.BufControl(syscall.SO_RCVBUF, n)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// TestPeerLinkSenderWritesIdleLink: a message on an idle link is sealed
// and written by its sender (no hand-off to the link's writer); when the
// kernel takes only part, the writer sends the rest before anything
// queued meanwhile, so the peer opens every record, in order.
func TestPeerLinkSenderWritesIdleLink(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler), stop: make(chan struct{})}
	s.opts.FleetNodeBytes = 64 << 20
	f := &fabric{s: s, links: map[string]*peerLink{}}
	// Small buffers: the first large message overflows them.
	mine, theirs := tcptest.Pair(t, 16<<10, 8<<10)
	dialer, acceptor := testSeals(t)
	pl := f.newLink("z", "id", rawsock.Wrap(mine), acceptor[0], acceptor[1]) // as dialLink and acceptLink do
	if pl.rs == nil {
		t.Fatal("a TCP link has no descriptor to write without waiting")
	}
	t.Cleanup(func() {
		pl.close()
		s.wg.Wait()
	})
	rr := recordReader{r: theirs, ls: dialer[1], max: linkMaxRecord(1 << 20)}
	theirs.SetDeadline(time.Now().Add(30 * time.Second))
	var pt []byte // what is left of the record being read
	readMsg := func(i int, want []byte) {
		t.Helper()
		var err error
		if len(pt) == 0 {
			if pt, err = rr.next(); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		var m linkMsg
		if m, pt, err = parseLinkMsg(pt, 1<<20); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(m.key) != fmt.Sprint("z-", i) || !bytes.Equal(m.payload, want) {
			t.Fatalf("message %d: key %q, %d bytes; want %d bytes", i, m.key, len(m.payload), len(want))
		}
	}

	// One small message on the idle link: its sender writes it.
	if err := pl.send(linkDownFrame, "z-0", []byte("ping")); err != nil {
		t.Fatal(err)
	}
	readMsg(0, []byte("ping"))
	if n := f.st.linkSenderWrites.Load(); n != 1 {
		t.Fatalf("sender writes %d, want 1", n)
	}

	// Large messages, the link idle before each, the peer not reading,
	// the writer not started yet: the kernel takes part of one, and the
	// ones after it wait for the writer, which sends the rest first.
	var want [][]byte
	for i := 1; i <= 40; i++ {
		p := make([]byte, 60<<10)
		for j := range p {
			p[j] = byte(i*131 + j)
		}
		want = append(want, p)
		time.Sleep(2 * linkIdleGap)
		if err := pl.send(linkDownFrame, fmt.Sprint("z-", i), p); err != nil {
			t.Fatal(err)
		}
	}
	if f.st.linkCarries.Load() == 0 {
		t.Fatalf("no carry in %d sender writes with the peer not reading", f.st.linkSenderWrites.Load())
	}
	s.wg.Add(1)
	go pl.writer()
	for i, p := range want {
		readMsg(i+1, p)
	}
}

// TestGatherFitsOneWrite: a link's whole gather (a header and a payload
// per frame) is one writev; past rawsock.MaxIov the rest would be carried
// and written by another goroutine.
func TestGatherFitsOneWrite(t *testing.T) {
	if 2*corkFrames > rawsock.MaxIov {
		t.Fatalf("a gather of %d frames is %d slices, one writev takes %d", corkFrames, 2*corkFrames, rawsock.MaxIov)
	}
}
