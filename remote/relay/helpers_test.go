package relay

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/execgo/exec-server/internal/rawsock"
	"github.com/execgo/exec-server/remote/noise"
)

// recorder keeps the relay's events for assertions.
type recorder struct {
	mu sync.Mutex
	ev []Event
	ch chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) add(e Event) {
	r.mu.Lock()
	r.ev = append(r.ev, e)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) count(match func(Event) bool) int {
	n := 0
	for _, e := range r.all() {
		if match(e) {
			n++
		}
	}
	return n
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.ev...)
}

// wait returns the first event after index from that matches.
func (r *recorder) wait(t *testing.T, from int, d time.Duration, match func(Event) bool) (Event, int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		evs := r.all()
		for i := from; i < len(evs); i++ {
			if match(evs[i]) {
				return evs[i], i
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no matching event within %s; events: %s", d, describe(evs[from:]))
		}
		select {
		case <-r.ch:
		case <-time.After(min(left, 50*time.Millisecond)):
		}
	}
}

func describe(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Kind + "/" + e.Role + " " + e.Env + " " + e.Code + " " + http.StatusText(e.Status) + "; ")
	}
	return b.String()
}

type testRelay struct {
	*Server
	base string
	rec  *recorder
}

const (
	execToken    = "exec-token-1"
	harnessToken = "harness-token-1"
)

func startRelay(t *testing.T, opts Options) *testRelay {
	t.Helper()
	rec := newRecorder()
	if opts.ExecutorTokens == nil && !opts.InsecureNoAuth {
		opts.ExecutorTokens = NewTokens(execToken)
	}
	if opts.HarnessTokens == nil && !opts.InsecureNoAuth {
		opts.HarnessTokens = NewTokens(harnessToken)
	}
	opts.OnEvent = rec.add
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return &testRelay{Server: s, base: hs.URL, rec: rec}
}

func randomKey() PublicKey {
	kp, err := noise.GenerateKeypair()
	if err != nil {
		panic(err)
	}
	return kp.Public()
}

// post sends a registry request and decodes the answer.
func post(t testing.TB, url, token string, body any, hdr ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest("POST", url, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: answer is not JSON: %q", url, b)
		}
	}
	return resp.StatusCode, m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r *testRelay) env(id string) string { return r.base + "/cloud/environment/" + id }

func (r *testRelay) register(t testing.TB, env string, key PublicKey) map[string]any {
	t.Helper()
	st, m := post(t, r.env(env)+"/register", execToken, map[string]any{"security_profile": SecurityProfile, "executor_public_key": key})
	if st != 200 {
		t.Fatalf("register: %d %v", st, m)
	}
	return m
}

func (r *testRelay) connect(t testing.TB, env string, key PublicKey) map[string]any {
	t.Helper()
	st, m := post(t, r.env(env)+"/connect", harnessToken, map[string]any{"harness_public_key": key})
	if st != 200 {
		t.Fatalf("connect: %d %v", st, m)
	}
	return m
}

func (r *testRelay) validate(t *testing.T, env, reg string, key PublicKey, authz string) bool {
	t.Helper()
	st, m := post(t, r.env(env)+"/validate", execToken,
		map[string]any{"executor_registration_id": reg, "harness_public_key": key, "harness_key_authorization": authz},
		"X-Codex-Noise-Stream-Id", "s-1")
	if st != 200 {
		t.Fatalf("validate: %d %v", st, m)
	}
	return m["valid"] == true
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		st := 0
		if resp != nil {
			st = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", url, err, st)
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// dialStatus dials and returns the refused upgrade's status and reason.
func dialStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, nil)
	if err == nil {
		c.CloseNow()
		return 101, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get(RejectionHeader)
}

// A few RelayMessageFrame encoders (remote/frame).
func rawFrame(stream string, bodyTag byte, body []byte) []byte {
	b := []byte{0x08, 0x01, 0x12}
	b = binary.AppendUvarint(b, uint64(len(stream)))
	b = append(b, stream...)
	b = append(b, bodyTag)
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

func dataFrame(stream string, seq uint32, payload []byte) []byte {
	var d []byte
	if seq != 0 {
		d = append(d, 0x08)
		d = binary.AppendUvarint(d, uint64(seq))
	}
	d = append(d, 0x18, 0x01, 0x22)
	d = binary.AppendUvarint(d, uint64(len(payload)))
	d = append(d, payload...)
	return rawFrame(stream, 0x2A, d)
}

func handshakeFrame(stream string, payload []byte) []byte {
	h := append([]byte{0x0A}, binary.AppendUvarint(nil, uint64(len(payload)))...)
	return rawFrame(stream, 0x52, append(h, payload...))
}

func resumeFrame(stream string) []byte { return rawFrame(stream, 0x3A, nil) }

// fields decodes one level of protobuf: the last length-delimited value
// of each field number (enough for the frames of this schema).
func fields(b []byte) map[uint64][]byte {
	out := map[uint64][]byte{}
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil
		}
		b = b[n:]
		switch tag & 7 {
		case 0:
			_, m := binary.Uvarint(b)
			if m <= 0 {
				return nil
			}
			b = b[m:]
		case 2:
			l, m := binary.Uvarint(b)
			if m <= 0 || l > uint64(len(b)-m) {
				return nil
			}
			out[tag>>3] = b[m : m+int(l)]
			b = b[m+int(l):]
		default:
			return nil
		}
	}
	return out
}

// resetReason decodes a reset frame's reason ("" if b is not a reset).
func resetReason(b []byte) string {
	r, ok := fields(b)[8]
	if !ok {
		return ""
	}
	return string(fields(r)[1])
}

func read(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageBinary {
		t.Fatalf("read: %v message", typ)
	}
	return b
}

func write(t *testing.T, c *websocket.Conn, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageBinary, b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// tcpOf is the TCP connection under c (a rawsock.Conn's).
func tcpOf(t *testing.T, c net.Conn) *net.TCPConn {
	t.Helper()
	if s, ok := c.(*rawsock.Conn); ok {
		c = s.Conn
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("%T is not a TCP connection", c)
	}
	return tc
}
