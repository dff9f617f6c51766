package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// The ops tests (API, logs, metrics) use this small websocket client of
// their own, so that they depend on the wire only.

// opsLogBuffer is a log destination safe for concurrent writes.
type opsLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *opsLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *opsLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds or 10 s pass.
func opsWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// opsServer is a Server serving a loopback listener until the test ends.
type opsServer struct {
	srv  *Server
	url  string // ws://127.0.0.1:PORT
	http string // http://127.0.0.1:PORT
	logs *opsLogBuffer
	stop context.CancelFunc
	done chan error // Serve's result
}

func startOpsServer(t *testing.T, cfg Config) *opsServer {
	t.Helper()
	logs := &opsLogBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &opsServer{srv: New(cfg), logs: logs, stop: cancel, done: make(chan error, 1)}
	scheme := "ws"
	if cfg.TLSConfig != nil {
		scheme = "wss"
	}
	o.url = scheme + "://" + l.Addr().String()
	o.http = "http://" + l.Addr().String()
	go func() { o.done <- o.srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-o.done:
		case <-time.After(15 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
	})
	return o
}

// opsClient speaks JSON-RPC over one websocket through the project's one
// engine (jsonrpc.Conn over transport.DialWebSocket). Notifications queue
// (unbounded: the read loop never waits on the test) until next takes them.
type opsClient struct {
	t    *testing.T
	conn *jsonrpc.Conn
	ws   *transport.WebSocket

	mu    sync.Mutex
	notes []opsMsg
	more  chan struct{} // signalled when notes grows or the connection ends
	ended bool
}

func dialOps(t *testing.T, url string, h http.Header) *opsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, err := transport.DialWebSocket(ctx, url, transport.DialOptions{Header: h, MaxMessageBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c := &opsClient{t: t, ws: ws, conn: jsonrpc.NewConn(ws, jsonrpc.Options{}), more: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.conn.Run(context.Background(), func(m *jsonrpc.Message) jsonrpc.Action {
			c.mu.Lock()
			c.notes = append(c.notes, opsMsg{Method: m.Method, Params: append(json.RawMessage(nil), m.Params...)})
			c.mu.Unlock()
			c.signal()
			return jsonrpc.Inline
		})
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
		c.signal()
	}()
	t.Cleanup(func() { _ = c.conn.Close(); <-done })
	return c
}

func (c *opsClient) signal() {
	select {
	case c.more <- struct{}{}:
	default:
	}
}

type opsErr struct {
	Code    int
	Message string
}

type opsMsg struct {
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *opsErr
}

// next returns the next notification (30 s at most: a loaded CI machine).
func (c *opsClient) next() opsMsg {
	deadline := time.After(30 * time.Second)
	for {
		c.mu.Lock()
		if len(c.notes) > 0 {
			m := c.notes[0]
			c.notes = c.notes[1:]
			c.mu.Unlock()
			return m
		}
		ended := c.ended
		c.mu.Unlock()
		if ended {
			c.t.Fatal("connection ended while waiting for a notification")
		}
		select {
		case <-c.more:
		case <-deadline:
			c.t.Fatal("no notification within 30 s")
		}
	}
}

// call sends a request and returns its reply (result or error).
func (c *opsClient) call(method string, params any) opsMsg {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res json.RawMessage
	err := c.conn.Call(ctx, method, params, &res)
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return opsMsg{Error: &opsErr{Code: je.Code, Message: je.Message}}
	case err != nil:
		c.t.Fatalf("%s: %v", method, err)
	}
	return opsMsg{Result: res}
}

func (c *opsClient) init() string {
	m := c.call("initialize", map[string]any{"clientName": "ops-test"})
	if m.Error != nil {
		c.t.Fatalf("initialize: %s", m.Error.Message)
	}
	if err := c.conn.Notify(context.Background(), "initialized", nil); err != nil {
		c.t.Fatal(err)
	}
	var r struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(m.Result, &r)
	return r.SessionID
}

func opsStartParams(id, dir string, argv ...string) map[string]any {
	return map[string]any{"processId": id, "argv": argv, "cwd": "file://" + dir, "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false}
}

// startPid starts `echo $$; exec sleep 1000` and returns the shell's pid,
// read from its pushed output.
func (c *opsClient) startPid(id, dir string) int {
	c.t.Helper()
	if m := c.call("process/start", opsStartParams(id, dir, "/bin/sh", "-c", "echo $$; exec sleep 1000")); m.Error != nil {
		c.t.Fatalf("process/start: %s", m.Error.Message)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "\n") {
		m := c.next()
		if m.Method != "process/output" {
			continue
		}
		var p struct {
			Chunk string `json:"chunk"`
		}
		_ = json.Unmarshal(m.Params, &p)
		b, _ := base64.StdEncoding.DecodeString(p.Chunk)
		out.Write(b)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		c.t.Fatalf("pid line %q", out.String())
	}
	return pid
}

// alive reports whether pid runs (a zombie counts as dead).
func opsAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	b := string(raw)
	i := strings.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}
