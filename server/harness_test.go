package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// wire is one received message, decoded loosely.
type wire struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw string
}

// peer is a test client: it sends raw messages (valid or not) over a
// transport stream and collects what comes back.
type peer struct {
	t    testing.TB
	send func(string) error
	msgs chan wire
	stop func()
	mu   sync.Mutex
	seen []wire // messages received but not yet consumed by a wait
}

// newPeer reads st until it ends; stop ends the connection.
func newPeer(t testing.TB, st jsonrpc.Stream, stop func()) *peer {
	ctx := context.Background()
	p := &peer{t: t, msgs: make(chan wire, 1<<14), stop: stop}
	p.send = func(line string) error { return st.Write(ctx, []byte(line), false) }
	go func() {
		defer close(p.msgs)
		for {
			msg, err := st.Read(ctx)
			if err != nil {
				return
			}
			var w wire
			if err := json.Unmarshal(msg, &w); err != nil {
				t.Errorf("server sent invalid JSON %q: %v", msg, err)
				return
			}
			w.raw = string(msg)
			p.msgs <- w
		}
	}()
	t.Cleanup(stop)
	return p
}

// stdioPeer serves s over an in-memory stdio pair.
func stdioPeer(t testing.TB, s *Server) *peer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeStreamWith(ctx, transport.NewStdio(inR, outW, outW, 64<<20), StreamOptions{EndSessionOnClose: true})
	}()
	var once sync.Once
	return newPeer(t, transport.NewStdio(outR, inW, nil, 128<<20), func() {
		once.Do(func() {
			inW.Close()
			cancel()
			<-done
			outR.Close()
		})
	})
}

// wsPeer dials the websocket server at url.
func wsPeer(t *testing.T, url string) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	ws, err := transport.DialWebSocket(ctx, url, transport.DialOptions{MaxMessageBytes: 256 << 20})
	if err != nil {
		cancel()
		t.Fatalf("dial %s: %v", url, err)
	}
	return newPeer(t, ws, func() {
		ws.Close()
		cancel()
	})
}

// wsServer starts s behind an httptest server and returns its ws:// URL.
func wsServer(t *testing.T, s *Server) string {
	ctx, cancel := context.WithCancel(context.Background())
	hs := httptest.NewServer(s.Handler(ctx))
	t.Cleanup(func() {
		cancel()
		hs.Close()
		s.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}

var idCounter struct {
	sync.Mutex
	n int
}

func (p *peer) raw(line string) { p.t.Helper(); _ = p.send(line) }

// request sends a request and returns its id.
func (p *peer) request(method string, params any) string {
	p.t.Helper()
	idCounter.Lock()
	idCounter.n++
	id := fmt.Sprint(idCounter.n)
	idCounter.Unlock()
	b, err := json.Marshal(map[string]any{"id": json.RawMessage(id), "method": method, "params": params})
	if err != nil {
		p.t.Fatal(err)
	}
	p.raw(string(b))
	return id
}

// wait returns the first not-yet-consumed message matching f.
func (p *peer) wait(what string, f func(wire) bool) wire {
	p.t.Helper()
	p.mu.Lock()
	for i, w := range p.seen {
		if f(w) {
			p.seen = append(p.seen[:i], p.seen[i+1:]...)
			p.mu.Unlock()
			return w
		}
	}
	p.mu.Unlock()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case w, ok := <-p.msgs:
			if !ok {
				p.t.Fatalf("connection closed while waiting for %s", what)
			}
			if f(w) {
				return w
			}
			p.mu.Lock()
			p.seen = append(p.seen, w)
			p.mu.Unlock()
		case <-timeout:
			p.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (p *peer) response(id string) wire {
	p.t.Helper()
	return p.wait("response "+id, func(w wire) bool { return string(w.ID) == id && w.Method == "" })
}

// call sends a request and returns its result, failing on an error.
func (p *peer) call(method string, params any) json.RawMessage {
	p.t.Helper()
	w := p.response(p.request(method, params))
	if w.Error != nil {
		p.t.Fatalf("%s: error %d %s", method, w.Error.Code, w.Error.Message)
	}
	return w.Result
}

// callErr sends a request and returns its error code and message.
func (p *peer) callErr(method string, params any) (int, string) {
	p.t.Helper()
	w := p.response(p.request(method, params))
	if w.Error == nil {
		p.t.Fatalf("%s: expected an error, got result %s", method, w.Result)
	}
	return w.Error.Code, w.Error.Message
}

func (p *peer) init() string {
	p.t.Helper()
	var r struct {
		SessionID string `json:"sessionId"`
	}
	mustUnmarshal(p.t, p.call("initialize", map[string]any{"clientName": "test"}), &r)
	p.raw(`{"method":"initialized","params":{}}`)
	return r.SessionID
}

// events collects one process's notifications until process/closed.
func (p *peer) events(id string) []wire {
	p.t.Helper()
	var out []wire
	for {
		w := p.wait("events of "+id, func(w wire) bool {
			return strings.HasPrefix(w.Method, "process/") && strings.Contains(string(w.Params), `"processId":"`+id+`"`)
		})
		out = append(out, w)
		if w.Method == "process/closed" {
			return out
		}
	}
}

func mustUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
}

func startParams(t *testing.T, id string, tty bool, argv ...string) map[string]any {
	return map[string]any{
		"processId": id, "argv": argv, "cwd": "file://" + t.TempDir(),
		"env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": tty,
	}
}

// checkGoroutines fails if goroutines started during the test outlive it.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func pipePair(t *testing.T) (*io.PipeReader, *io.PipeWriter) {
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close(); r.Close() })
	return r, w
}

// lineSink collects written lines.
type lineSink struct {
	ch  chan string
	buf []byte
}

func (l *lineSink) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		l.ch <- string(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func newStdio(r io.Reader, w io.Writer, limit int) *transport.Stdio {
	return transport.NewStdio(r, w, nil, limit)
}
