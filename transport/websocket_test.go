package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/jsonrpc"
)

// echoServe echoes every message until the connection ends.
func echoServe(ctx context.Context, s *WebSocket) {
	for {
		msg, err := s.Read(ctx)
		if err != nil {
			return
		}
		if err := s.Write(ctx, msg, false); err != nil {
			return
		}
	}
}

func newWSServer(t *testing.T, opts HandlerOptions) *httptest.Server {
	t.Helper()
	if opts.Serve == nil {
		opts.Serve = echoServe
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = 1 << 20
	}
	srv := httptest.NewServer(NewHandler(opts))
	t.Cleanup(srv.Close)
	return srv
}

func wsURL(srv *httptest.Server) string { return "ws" + strings.TrimPrefix(srv.URL, "http") }

// upgradeRequest builds a well-formed websocket upgrade request.
func upgradeRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return req
}

func TestHandlerHTTP(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{
		Authenticate: func(r *http.Request) error {
			if r.Header.Get("Authorization") != "Bearer good" {
				return errors.New("invalid or missing bearer token")
			}
			return nil
		},
	})
	tests := []struct {
		name        string
		method      string
		path        string
		upgrade     bool
		header      map[string]string
		status      int
		body        string // exact when not "*"
		allow       string
		contentType string
	}{
		{name: "readyz GET", method: "GET", path: "/readyz", status: 200, body: ""},
		{name: "readyz HEAD", method: "HEAD", path: "/readyz", status: 200, body: ""},
		{name: "readyz POST", method: "POST", path: "/readyz", status: 405, body: "", allow: "GET,HEAD"},
		{name: "readyz PUT", method: "PUT", path: "/readyz", status: 405, allow: "GET,HEAD", body: "*"},
		{name: "other path", method: "GET", path: "/other", status: 404, body: ""},
		{name: "other path upgrade", method: "GET", path: "/ws", upgrade: true, status: 404, body: ""},
		// Origin is refused first, on every path, whatever its value
		// (as observed on the reference).
		{name: "origin refused", method: "GET", path: "/", upgrade: true,
			header: map[string]string{"Origin": "http://evil.example", "Authorization": "Bearer good"}, status: 403, body: ""},
		{name: "origin refused before auth", method: "GET", path: "/", upgrade: true,
			header: map[string]string{"Origin": "null"}, status: 403, body: ""},
		{name: "empty origin refused", method: "GET", path: "/", upgrade: true,
			header: map[string]string{"Origin": "", "Authorization": "Bearer good"}, status: 403, body: ""},
		{name: "readyz with Origin", method: "GET", path: "/readyz", header: map[string]string{"Origin": "http://x"}, status: 403, body: ""},
		{name: "other path with Origin", method: "GET", path: "/other", header: map[string]string{"Origin": "http://x"}, status: 403, body: ""},
		{name: "POST with Origin", method: "POST", path: "/", header: map[string]string{"Origin": "http://x"}, status: 403, body: ""},
		{name: "auth refused", method: "GET", path: "/", upgrade: true, status: 401,
			body: "invalid or missing bearer token", contentType: "text/plain; charset=utf-8"},
		{name: "auth wrong token", method: "GET", path: "/", upgrade: true, header: map[string]string{"Authorization": "Bearer bad"},
			status: 401, body: "invalid or missing bearer token", contentType: "text/plain; charset=utf-8"},
		{name: "POST upgrade", method: "POST", path: "/", upgrade: true, status: 405, body: "Request method must be `GET`",
			contentType: "text/plain; charset=utf-8"},
		// The upgrade headers are checked before authentication, with the
		// reference's texts.
		{name: "GET / without upgrade", method: "GET", path: "/", status: 400,
			body: "Connection header did not include 'upgrade'", contentType: "text/plain; charset=utf-8"},
		{name: "no Upgrade header", method: "GET", path: "/", header: map[string]string{
			"Connection": "keep-alive, Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="},
			status: 400, body: "`Upgrade` header did not include 'websocket'"},
		{name: "bad version", method: "GET", path: "/", upgrade: true, header: map[string]string{"Sec-WebSocket-Version": "8"},
			status: 400, body: "`Sec-WebSocket-Version` header did not include '13'"},
		{name: "no key", method: "GET", path: "/", header: map[string]string{
			"Connection": "upgrade", "Upgrade": "WebSocket", "Sec-WebSocket-Version": "13"},
			status: 400, body: "`Sec-WebSocket-Key` header missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req *http.Request
			if tt.upgrade {
				req = upgradeRequest(t, tt.method, srv.URL+tt.path)
			} else {
				var err error
				if req, err = http.NewRequest(tt.method, srv.URL+tt.path, nil); err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range tt.header {
				req.Header[http.CanonicalHeaderKey(k)] = []string{v}
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d (body %q)", resp.StatusCode, tt.status, body)
			}
			if tt.body != "*" && string(body) != tt.body {
				t.Errorf("body %q, want %q", body, tt.body)
			}
			if tt.allow != "" && resp.Header.Get("Allow") != tt.allow {
				t.Errorf("Allow %q, want %q", resp.Header.Get("Allow"), tt.allow)
			}
			if tt.contentType != "" && resp.Header.Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tt.contentType)
			}
		})
	}
}

func TestHandlerUpgradeAndEcho(t *testing.T) {
	peer := make(chan string, 1)
	srv := newWSServer(t, HandlerOptions{
		Authenticate: func(r *http.Request) error { return nil },
		Serve: func(ctx context.Context, s *WebSocket) {
			peer <- s.Describe()
			echoServe(ctx, s)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("status %d", resp.StatusCode)
	}
	if d := <-peer; !strings.HasPrefix(d, "exec-server websocket 127.0.0.1:") {
		t.Errorf("Describe = %q", d)
	}
	for _, tc := range []struct {
		typ websocket.MessageType
		msg string
	}{
		{websocket.MessageText, `{"id":1,"method":"initialize"}`},
		{websocket.MessageBinary, `{"id":2,"method":"binary is read too"}`},
		{websocket.MessageText, strings.Repeat("x", 512<<10)},
	} {
		if err := c.Write(ctx, tc.typ, []byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		typ, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Replies always go out as text.
		if typ != websocket.MessageText || string(got) != tc.msg {
			t.Errorf("echo = %v %.40q, want text %.40q", typ, got, tc.msg)
		}
	}
}

func TestHandlerMessageLimit(t *testing.T) {
	srv := newWSServer(t, HandlerOptions{MaxMessageBytes: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	// At the limit: fine.
	if err := c.Write(ctx, websocket.MessageText, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || len(got) != 1000 {
		t.Fatalf("echo of 1000 bytes: %d bytes, %v", len(got), err)
	}
	// Over the limit: that connection ends.
	_ = c.Write(ctx, websocket.MessageText, make([]byte, 1001))
	if _, _, err := c.Read(ctx); err == nil {
		t.Fatal("a message over the limit was echoed")
	} else if s := websocket.CloseStatus(err); s != websocket.StatusMessageTooBig {
		t.Logf("closed with %v", err)
	}
}

func TestHandlerZeroMessageLimitIsNotZero(t *testing.T) {
	// HandlerOptions' zero value must still carry messages.
	srv := httptest.NewServer(NewHandler(HandlerOptions{Serve: echoServe}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	msg := strings.Repeat("y", 100<<10)
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != msg {
		t.Fatalf("echo with zero MaxMessageBytes: %d bytes, %v", len(got), err)
	}
}

func TestHandlerMaxConnections(t *testing.T) {
	var serving atomic.Int32
	srv := newWSServer(t, HandlerOptions{
		MaxConnections: 1,
		Serve: func(ctx context.Context, s *WebSocket) {
			serving.Add(1)
			defer serving.Add(-1)
			echoServe(ctx, s)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err == nil {
		t.Fatal("second connection accepted with MaxConnections 1")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection: resp %v, err %v; want 503", resp, err)
	}
	// /readyz does not count as a connection.
	if r, err := http.Get(srv.URL + "/readyz"); err != nil || r.StatusCode != 200 {
		t.Fatalf("readyz while full: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	// Once the first connection ends its slot is free again.
	first.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
		if err == nil {
			c.CloseNow()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed after the first connection closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The server pings, a peer that does not answer for a while is not cut
// off, and one that reads answers the pings.
func TestHandlerPings(t *testing.T) {
	// Not shorter: a ping's write gets the interval as its deadline, and
	// coder/websocket closes the connection when a write's deadline passes
	// mid-write; at 10 ms a pinging goroutine descheduled on a loaded
	// machine closed the connection in 8 of 1000 runs.
	srv := newWSServer(t, HandlerOptions{PingInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pings := make(chan struct{}, 1000)
	c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return true // and answer it
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	// Not reading for a while: pings go unanswered (each one waits an
	// interval for its pong), the connection stays open.
	time.Sleep(350 * time.Millisecond)
	type result struct {
		msg []byte
		err error
	}
	echo := make(chan result, 1)
	go func() {
		_, msg, err := c.Read(ctx) // answers the pings as it meets them
		echo <- result{msg, err}
	}()
	for i := range 3 {
		select {
		case <-pings:
		case r := <-echo:
			t.Fatalf("read ended after %d pings: %q %v", i, r.msg, r.err)
		case <-ctx.Done():
			t.Fatalf("%d pings in 10 s with a 100 ms interval", i)
		}
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("after pings")); err != nil {
		t.Fatal(err)
	}
	if r := <-echo; r.err != nil || string(r.msg) != "after pings" {
		t.Fatalf("echo after pings: %q %v", r.msg, r.err)
	}
}

func TestWebSocketStreamClose(t *testing.T) {
	closed := make(chan error, 1)
	srv := newWSServer(t, HandlerOptions{Serve: func(ctx context.Context, s *WebSocket) {
		_, err := s.Read(ctx)
		closed <- err
		_ = s.Close()
		_ = s.Close() // twice is fine
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close(websocket.StatusNormalClosure, "bye")
	select {
	case err := <-closed:
		if !IsClosed(err) {
			t.Errorf("IsClosed(%v) = false after the peer closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server Read did not end after the peer closed")
	}
}

func TestWebSocketParseErrorText(t *testing.T) {
	// With a jsonrpc.Conn on top, a malformed message is answered with the
	// reference's websocket wording (observed): "failed to parse websocket
	// JSON-RPC message from exec-server websocket 127.0.0.1:PORT: ...".
	srv := newWSServer(t, HandlerOptions{Serve: func(ctx context.Context, s *WebSocket) {
		c := jsonrpc.NewConn(s, jsonrpc.Options{})
		_ = c.Run(ctx, func(*jsonrpc.Message) jsonrpc.Action { return jsonrpc.Inline })
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("[1]")); err != nil {
		t.Fatal(err)
	}
	_, got, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\{"error":\{"code":-32600,"message":"failed to parse websocket JSON-RPC message from exec-server websocket 127\.0\.0\.1:[0-9]+: expected a JSON-RPC object"\},"id":-1\}$`)
	if !re.Match(got) {
		t.Errorf("reply %s", got)
	}
}

func TestIsClosed(t *testing.T) {
	if !IsClosed(net.ErrClosed) || !IsClosed(fmt.Errorf("read: %w", net.ErrClosed)) {
		t.Error("net.ErrClosed not recognised")
	}
	if IsClosed(errors.New("other")) || IsClosed(io.ErrUnexpectedEOF) {
		t.Error("unrelated error reported as closed")
	}
}

// Every message is latency-sensitive and written in one piece: accepted
// connections must have TCP_NODELAY (Go's default, which Listen keeps).
func TestListenSetsNoDelay(t *testing.T) {
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not return")
	}
	if c == nil {
		t.Fatal("Accept failed")
	}
	defer c.Close()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("accepted %T, want *net.TCPConn", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if v == 0 {
		t.Error("TCP_NODELAY not set on an accepted connection")
	}
	// The listener serves HTTP too.
	l.Close()
	if _, err := l.Accept(); err == nil {
		t.Error("Accept after Close succeeded")
	}
	if _, err := Listen("127.0.0.1:-1"); err == nil {
		t.Error("Listen on a bad address succeeded")
	}
}

// The listener binds the family that was asked for, and reports it:
// 0.0.0.0 is IPv4 only, not a dual-stack [::] (issue 14).
func TestListenBindsTheAskedFamily(t *testing.T) {
	tests := []struct {
		addr, wantPrefix string
		v6               bool
	}{
		{"0.0.0.0:0", "0.0.0.0:", false},
		{"127.0.0.1:0", "127.0.0.1:", false},
		{"[::1]:0", "[::1]:", true},
		{"[::]:0", "[::]:", true},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			l, err := Listen(tc.addr)
			if err != nil {
				if tc.v6 {
					t.Skipf("no IPv6 here: %v", err)
				}
				t.Fatal(err)
			}
			defer l.Close()
			got := l.Addr().String()
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Fatalf("Listen(%s) bound %s, want %s...", tc.addr, got, tc.wantPrefix)
			}
			if tc.addr != "0.0.0.0:0" {
				return
			}
			// Not reachable over IPv6 loopback (when the host has it).
			probe, err := net.Listen("tcp6", "[::1]:0")
			if err != nil {
				return
			}
			probe.Close()
			_, port, _ := net.SplitHostPort(got)
			if c, err := net.DialTimeout("tcp6", "[::1]:"+port, 2*time.Second); err == nil {
				c.Close()
				t.Fatalf("0.0.0.0 listener accepted an IPv6 connection on [::1]:%s", port)
			}
		})
	}
}

// A peer that closes, with a normal close frame or with none at all (a CLI
// that just exits), ends the stream with io.EOF: not an error to log. A
// close with an error status stays an error.
func TestWebSocketPeerCloseIsEOF(t *testing.T) {
	cases := []struct {
		name    string
		close   func(c *websocket.Conn)
		wantEOF bool
	}{
		{"no close frame", func(c *websocket.Conn) { c.CloseNow() }, true},
		{"normal closure", func(c *websocket.Conn) { c.Close(websocket.StatusNormalClosure, "") }, true},
		{"going away", func(c *websocket.Conn) { c.Close(websocket.StatusGoingAway, "") }, true},
		{"policy violation", func(c *websocket.Conn) { c.Close(websocket.StatusPolicyViolation, "no") }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			srv := newWSServer(t, HandlerOptions{Serve: func(ctx context.Context, s *WebSocket) {
				_, err := s.Read(ctx)
				got <- err
			}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.close(c)
			select {
			case err := <-got:
				if isEOF := err == io.EOF; isEOF != tc.wantEOF {
					t.Errorf("Read after the peer's close = %v, want io.EOF: %v", err, tc.wantEOF)
				}
			case <-ctx.Done():
				t.Fatal("Read did not return after the peer closed")
			}
		})
	}
}
