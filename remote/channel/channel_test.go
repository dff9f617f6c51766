package channel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/frame"
	"github.com/execgo/exec-server/remote/noise"
)

var _ jsonrpc.Stream = (*Channel)(nil)

// ciphers runs a real handshake and returns the initiator's and the
// responder's (send, recv) pairs.
func ciphers(t testing.TB) (iSend, iRecv, rSend, rRecv *noise.CipherState) {
	t.Helper()
	is, err := noise.GenerateKeypair()
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := noise.GenerateKeypair()
	in, err := noise.NewInitiator(is, rs.Public(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := in.WriteMessage1([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	re := noise.NewResponder(rs, nil)
	if _, err := re.ReadMessage1(m1); err != nil {
		t.Fatal(err)
	}
	m2, rSend, rRecv, err := re.WriteMessage2(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, iSend, iRecv, err = in.ReadMessage2(m2)
	if err != nil {
		t.Fatal(err)
	}
	return iSend, iRecv, rSend, rRecv
}

// recorder is a Sender that keeps copies of the frames.
type recorder struct {
	mu     sync.Mutex
	frames []*frame.Frame
}

func (r *recorder) Send(_ context.Context, f *frame.Frame) error {
	g, err := frame.Unmarshal(f.Marshal()) // what the wire carries
	if err != nil {
		return err
	}
	if err := frame.Validate(g); err != nil {
		return err
	}
	r.mu.Lock()
	r.frames = append(r.frames, g)
	r.mu.Unlock()
	return nil
}

func (r *recorder) take() []*frame.Frame {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.frames
	r.frames = nil
	return f
}

// pair makes a sending channel a (frames recorded) and a receiving one b
// (fed by hand with Deliver).
func pair(t testing.TB, opts Options) (a *Channel, rec *recorder, b *Channel) {
	iSend, iRecv, rSend, rRecv := ciphers(t)
	rec = &recorder{}
	a = New("s", rec, iSend, iRecv, Options{})
	b = New("s", &recorder{}, rSend, rRecv, opts)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, rec, b
}

func jsonOf(n int) []byte {
	// A JSON string of n bytes in all (n ≥ 2).
	return append(append([]byte{'"'}, bytes.Repeat([]byte{'x'}, n-2)...), '"')
}

func readN(t *testing.T, c *Channel, n int) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out [][]byte
	for range n {
		m, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("Read after %d: %v", len(out), err)
		}
		out = append(out, m)
	}
	return out
}

func TestMessagesAndRecords(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		sizes   []int
		more    bool
		records []int // ciphertext sizes
	}{
		{"one small message, one record", []int{10}, false, []int{4 + 10 + 16}},
		{"two messages flushed each", []int{10, 20}, false, []int{30, 40}},
		{"two messages coalesced with more", []int{10, 20}, true, []int{4 + 10 + 4 + 20 + 16}},
		{"exactly one full record", []int{61436}, false, []int{61456}},
		{"one byte over a record", []int{61437}, false, []int{61456, 17}},
		{"150 KB", []int{150000}, false, []int{61456, 61456, 150000 + 4 - 2*61440 + 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, rec, b := pair(t, Options{})
			var want [][]byte
			for i, n := range tt.sizes {
				m := jsonOf(n)
				want = append(want, m)
				if err := a.Write(ctx, m, tt.more && i < len(tt.sizes)-1); err != nil {
					t.Fatal(err)
				}
			}
			frames := rec.take()
			var sizes []int
			for i, f := range frames {
				sizes = append(sizes, len(f.Payload))
				if f.Seq != uint32(i) || f.Ack != 0 || f.AckBits != 0 || f.SegmentCount != 1 {
					t.Fatalf("frame %d: %+v", i, f)
				}
				if err := b.Deliver(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tt.records) {
				t.Fatalf("records %v, want %v", sizes, tt.records)
			}
			got := readN(t, b, len(want))
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("message %d differs (%d bytes, want %d)", i, len(got[i]), len(want[i]))
				}
			}
		})
	}
}

func TestReorderWindow(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		order   []int
		wantErr error
		want    int // messages readable
	}{
		{"in order", seqRange(0, 70), nil, 70},
		{"reversed within the window", append(reverse(seqRange(0, 65)), seqRange(65, 70)...), nil, 70},
		{"gap of 64 is accepted", append([]int{64}, seqRange(0, 64)...), nil, 65},
		{"gap of 65 is refused", []int{65}, ErrGap, 0},
		{"duplicates are dropped", []int{1, 1, 0, 0, 1, 2, 2}, nil, 3},
		{"random shuffle in blocks of 32", shuffleBlocks(70, 32), nil, 70},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case needs a receiver with the sender's keys: redo the
			// writes on a fresh pair with the same messages.
			a, rec, b := pair(t, Options{})
			for i := range 70 {
				if err := a.Write(ctx, fmt.Appendf(nil, "%d", i), false); err != nil {
					t.Fatal(err)
				}
			}
			frames := rec.take()
			var err error
			for _, i := range tt.order {
				if err = b.Deliver(ctx, frames[i]); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			got := readN(t, b, tt.want)
			for i, m := range got {
				if string(m) != fmt.Sprint(i) {
					t.Fatalf("message %d is %q", i, m)
				}
			}
			if tt.wantErr != nil {
				if _, err := b.Read(ctx); !errors.Is(err, tt.wantErr) {
					t.Fatalf("Read after the error: %v", err)
				}
			}
		})
	}
}

func seqRange(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func reverse(s []int) []int {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
	return s
}

func shuffleBlocks(n, block int) []int {
	r := rand.New(rand.NewPCG(1, 2))
	var s []int
	for from := 0; from < n; from += block {
		b := seqRange(from, min(from+block, n))
		r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
		s = append(s, b...)
	}
	return s
}

func TestBufferLimit(t *testing.T) {
	ctx := context.Background()
	a, rec, b := pair(t, Options{})
	// One 20-record message: 19 full records held behind a missing
	// first one overflow 1 MiB at the 18th.
	if err := a.Write(ctx, jsonOf(20*MaxRecordPlaintext-4), false); err != nil {
		t.Fatal(err)
	}
	frames := rec.take()
	var err error
	held := 0
	for _, f := range frames[1:] {
		if err = b.Deliver(ctx, f); err != nil {
			break
		}
		held++
	}
	if !errors.Is(err, ErrGap) || held != 17 {
		t.Fatalf("err = %v after %d held records", err, held)
	}
}

// rawSender seals arbitrary plaintext records with a's cipher, to build
// what a broken or hostile peer would send.
func rawRecords(t *testing.T, plaintexts ...[]byte) (*Channel, []*frame.Frame) {
	iSend, _, rSend, rRecv := ciphers(t)
	b := New("s", &recorder{}, rSend, rRecv, Options{})
	t.Cleanup(func() { b.Close() })
	var fs []*frame.Frame
	for i, p := range plaintexts {
		ct, err := iSend.Encrypt(nil, p)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, frame.Data("s", uint32(i), ct))
	}
	return b, fs
}

func prefixed(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		records  [][]byte
		tamper   bool
		wantErr  error
		wantMsgs int
	}{
		{"record over 60 KiB", [][]byte{make([]byte, MaxRecordPlaintext+1)}, false, ErrBadRecord, 0},
		{"zero length prefix", [][]byte{make([]byte, 4)}, false, ErrBadMessage, 0},
		{"length over 64 MiB", [][]byte{{0x04, 0, 0, 1}}, false, ErrBadMessage, 0},
		{"bad JSON after a good message", [][]byte{prefixed("1", "{x")}, false, ErrBadMessage, 0},
		{"tampered record", [][]byte{prefixed("1")}, true, noise.ErrDecrypt, 0},
		{"message split across records", [][]byte{prefixed("[1,2]")[:6], prefixed("[1,2]")[6:]}, false, nil, 1},
		{"two messages in one record", [][]byte{prefixed("1", "2")}, false, nil, 2},
		{"empty record", [][]byte{{}, prefixed("1")}, false, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, fs := rawRecords(t, tt.records...)
			if tt.tamper {
				fs[0].Payload[0] ^= 1
			}
			var err error
			for _, f := range fs {
				if err = b.Deliver(ctx, f); err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			readN(t, b, tt.wantMsgs)
			if tt.wantErr != nil && b.Err() == nil {
				t.Fatal("the channel did not end")
			}
		})
	}
}

func TestPeerResetAndIgnoredFrames(t *testing.T) {
	ctx := context.Background()
	a, rec, b := pair(t, Options{})
	a.Write(ctx, []byte("1"), false)
	for _, f := range []*frame.Frame{
		{Version: 1, StreamID: "s", Kind: frame.KindHeartbeat},
		{Version: 1, StreamID: "s", Kind: frame.KindAck},
		frame.Resume("s", 0),
		frame.Handshake("s", []byte{1}),
	} {
		if err := b.Deliver(ctx, f); err != nil {
			t.Fatalf("%s: %v", f.Kind, err)
		}
	}
	if err := b.Deliver(ctx, rec.take()[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.Deliver(ctx, frame.Reset("s", "x")); !errors.Is(err, ErrPeerReset) {
		t.Fatalf("reset: %v", err)
	}
	// The message delivered before the reset is still read, then the
	// reset.
	readN(t, b, 1)
	if _, err := b.Read(ctx); !errors.Is(err, ErrPeerReset) {
		t.Fatalf("Read = %v", err)
	}
	if err := b.Write(ctx, []byte("1"), false); !errors.Is(err, ErrPeerReset) {
		t.Fatalf("Write after reset = %v", err)
	}
}

func TestQueueFull(t *testing.T) {
	ctx := context.Background()
	a, rec, b := pair(t, Options{QueueLen: 2})
	for range 3 {
		a.Write(ctx, []byte("1"), false)
	}
	var err error
	for _, f := range rec.take() {
		if err = b.Deliver(ctx, f); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v", err)
	}

	// With WaitWhenFull, Deliver waits for Read instead.
	a, rec, b = pair(t, Options{QueueLen: 1, WaitWhenFull: true})
	for range 3 {
		a.Write(ctx, []byte("1"), false)
	}
	errc := make(chan error, 1)
	go func() {
		for _, f := range rec.take() {
			if err := b.Deliver(ctx, f); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	readN(t, b, 3)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// blockSender never completes a Send until ctx ends.
type blockSender struct{ entered chan struct{} }

func (s *blockSender) Send(ctx context.Context, _ *frame.Frame) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

func TestCloseUnblocks(t *testing.T) {
	iSend, iRecv, _, _ := ciphers(t)
	s := &blockSender{entered: make(chan struct{})}
	var reason []error
	c := New("s", s, iSend, iRecv, Options{OnClose: func(err error) { reason = append(reason, err) }})
	werr := make(chan error, 1)
	go func() { werr <- c.Write(context.Background(), []byte("1"), false) }()
	rerr := make(chan error, 1)
	go func() { _, err := c.Read(context.Background()); rerr <- err }()
	<-s.entered
	c.Close()
	if err := <-werr; err == nil {
		t.Fatal("blocked Write returned nil after Close")
	}
	if err := <-rerr; err != io.EOF {
		t.Fatalf("Read after Close = %v", err)
	}
	c.Close()
	c.Fail(errors.New("later"))
	if len(reason) != 1 || reason[0] != nil {
		t.Fatalf("OnClose calls: %v", reason)
	}
}

func TestWriteLimits(t *testing.T) {
	a, _, _ := pair(t, Options{})
	if err := a.Write(context.Background(), nil, false); err == nil {
		t.Fatal("empty message accepted")
	}
}

// A byte stream cut into records anywhere is accepted or refused alike,
// and when accepted yields the same messages.
func FuzzDeframe(f *testing.F) {
	f.Add(prefixed("1", "[2]", `{"a":3}`), uint16(3))
	f.Add([]byte{0, 0, 0, 0}, uint16(1))
	f.Add([]byte{0, 0, 0, 2, '{'}, uint16(2))
	f.Fuzz(func(t *testing.T, stream []byte, cut uint16) {
		if len(stream) > 1<<16 {
			return
		}
		run := func(step int) (int, error) {
			// Fixed keys: a handshake per run would slow fuzzing down.
			iSend := noise.NewCipherState([32]byte{1})
			b := New("s", &recorder{}, noise.NewCipherState([32]byte{2}), noise.NewCipherState([32]byte{1}), Options{QueueLen: 1 << 16})
			defer b.Close()
			seq := uint32(0)
			for p := stream; len(p) > 0; {
				n := min(step, len(p))
				ct, _ := iSend.Encrypt(nil, p[:n])
				p = p[n:]
				if err := b.Deliver(context.Background(), frame.Data("s", seq, ct)); err != nil {
					return len(b.msgs), err
				}
				seq++
			}
			return len(b.msgs), nil
		}
		n1, err1 := run(len(stream) + 1)
		n2, err2 := run(int(cut)%16 + 1)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("one record: %d, %v; cut every %d: %d, %v", n1, err1, int(cut)%16+1, n2, err2)
		}
		if err1 == nil && n1 != n2 {
			t.Fatalf("messages %d vs %d", n1, n2)
		}
	})
}

// Any arrival order of records yields the messages in order, each once,
// up to the first error.
func FuzzReorder(f *testing.F) {
	f.Add([]byte{0, 1, 2})
	f.Add([]byte{3, 2, 1, 0, 0, 4})
	f.Add([]byte{65})
	const n = 80
	sender := noise.NewCipherState([32]byte{1})
	var cts [][]byte
	for i := range n {
		ct, _ := sender.Encrypt(nil, prefixed(fmt.Sprint(i)))
		cts = append(cts, ct)
	}
	f.Fuzz(func(t *testing.T, order []byte) {
		b := New("s", &recorder{}, noise.NewCipherState([32]byte{2}), noise.NewCipherState([32]byte{1}), Options{QueueLen: n})
		defer b.Close()
		var err error
		for _, o := range order {
			i := int(o) % n
			if err = b.Deliver(context.Background(), frame.Data("s", uint32(i), cts[i])); err != nil {
				if !errors.Is(err, ErrGap) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
		}
		for i := 0; len(b.msgs) > 0; i++ {
			if m := <-b.msgs; string(m) != fmt.Sprint(i) {
				t.Fatalf("message %d is %q", i, m)
			}
		}
	})
}

func TestSkipJSONCheck(t *testing.T) {
	for _, skip := range []bool{false, true} {
		iSend := noise.NewCipherState([32]byte{1})
		b := New("s", &recorder{}, noise.NewCipherState([32]byte{2}), noise.NewCipherState([32]byte{1}), Options{SkipJSONCheck: skip})
		ct, _ := iSend.Encrypt(nil, prefixed("{x"))
		err := b.Deliver(context.Background(), frame.Data("s", 0, ct))
		if skip != (err == nil) || !skip && !errors.Is(err, ErrBadMessage) {
			t.Fatalf("skip=%v: err = %v", skip, err)
		}
		if skip {
			if m := readN(t, b, 1); string(m[0]) != "{x" {
				t.Fatalf("got %q", m[0])
			}
		}
		b.Close()
	}
}
