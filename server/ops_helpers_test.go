package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
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

	"github.com/coder/websocket"
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

// opsClient speaks JSON-RPC over one websocket.
type opsClient struct {
	t       *testing.T
	c       *websocket.Conn
	id      int
	pending []opsMsg // notifications call read past, for next
}

func dialOps(t *testing.T, url string, h http.Header) *opsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &opsClient{t: t, c: c}
}

type opsMsg struct {
	ID     *int            `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *opsClient) write(v any) {
	b, _ := json.Marshal(v)
	if err := c.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next message (30 s at most: a loaded CI machine).
func (c *opsClient) next() opsMsg {
	if len(c.pending) > 0 {
		m := c.pending[0]
		c.pending = c.pending[1:]
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var m opsMsg
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("bad JSON %q: %v", b, err)
	}
	return m
}

// call sends a request and returns its reply; notifications that arrive
// first are kept for next (a process's output may overtake its start's
// reply: dropping it made startPid wait for output already read).
func (c *opsClient) call(method string, params any) opsMsg {
	c.id++
	id := c.id
	c.write(map[string]any{"id": id, "method": method, "params": params})
	var kept []opsMsg
	defer func() { c.pending = append(kept, c.pending...) }()
	for {
		m := c.next()
		if m.ID != nil && *m.ID == id {
			return m
		}
		if m.ID == nil {
			kept = append(kept, m)
		}
	}
}

func (c *opsClient) init() string {
	m := c.call("initialize", map[string]any{"clientName": "ops-test"})
	if m.Error != nil {
		c.t.Fatalf("initialize: %s", m.Error.Message)
	}
	c.write(map[string]any{"method": "initialized"})
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
