// Package interop holds protocol scenarios written once and run against any
// exec-server binary (ours, and the reference when EXEC_SERVER_REFERENCE
// names it), plus the small harness they speak through: start a server,
// dial it, send requests, collect responses and process events. The
// connection is the project's one JSON-RPC engine (jsonrpc.Conn over the
// transport streams); the harness adds only what protocol tests need on
// top: raw frames, unsolicited messages kept in order, and process events
// kept per process.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/tailbuf"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// Transport names how a client reaches a server.
type Transport string

// The two transports every server speaks.
const (
	Stdio     Transport = "stdio"
	WebSocket Transport = "ws"
)

// Server is a running exec-server child process.
type Server struct {
	// Name labels the server in reports ("ours", "reference").
	Name string
	// URL is the websocket address the server printed; empty for stdio.
	URL string

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	home    string
	stdio   *Client
	waitErr chan error
	stderr  *tailbuf.Buffer

	closeOnce sync.Once
}

// Spec says how to run a server binary.
type Spec struct {
	// Name labels the server in reports ("ours", "reference").
	Name string
	// Bin is the executable.
	Bin string
	// Reference: run as `Bin exec-server --listen ...` with CODEX_HOME set
	// to a fresh temp dir (the reference's command line); otherwise
	// `Bin [Args...] --listen ...`.
	Reference bool
	// Args come before --listen (e.g. a subcommand).
	Args []string
	// Extra come after --listen URL.
	Extra []string
}

// StartServer starts an exec-server on the given transport. For stdio the
// single connection is returned by Dial; for websocket Dial may be called
// many times.
func StartServer(ctx context.Context, spec Spec, tr Transport) (*Server, error) {
	listen := "stdio"
	if tr == WebSocket {
		listen = "ws://127.0.0.1:0"
	}
	name, bin, codexHome := spec.Name, spec.Bin, spec.Reference
	var args []string
	if codexHome {
		args = append(args, "exec-server")
	}
	args = append(args, spec.Args...)
	args = append(args, "--listen", listen)
	args = append(args, spec.Extra...)
	s := &Server{Name: name, waitErr: make(chan error, 1), stderr: &tailbuf.Buffer{Max: 8192}}
	// The server must outlive the start-up context; it is stopped by Close.
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	if codexHome {
		home, err := os.MkdirTemp("", "exec-server-codex-home-")
		if err != nil {
			return nil, err
		}
		s.home = home
		cmd.Env = append(cmd.Env, "CODEX_HOME="+home, "RUST_LOG=error")
	}
	cmd.Stderr = s.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd = cmd
	s.stdin = stdin
	go func() { s.waitErr <- cmd.Wait() }()

	if tr == Stdio {
		s.stdio = newClient(transport.NewStdio(stdout, stdin, stdin, maxMessage))
		return s, nil
	}
	// The bound URL is the first stdout line; the rest of stdout is drained
	// so the server never blocks on a full pipe.
	lineCh := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lineCh <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, br)
	}()
	select {
	case line := <-lineCh:
		if !strings.HasPrefix(line, "ws://") {
			s.Close()
			return nil, fmt.Errorf("%s did not print its ws URL (got %q); stderr: %s", name, line, s.stderr.String())
		}
		s.URL = line
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("%s: waiting for the ws URL: %w", name, ctx.Err())
	}
	return s, nil
}

// Stderr returns the last few KiB the server wrote to stderr.
func (s *Server) Stderr() string { return s.stderr.String() }

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool {
	select {
	case err := <-s.waitErr:
		s.waitErr <- err
		return true
	default:
		return false
	}
}

// Dial opens a connection: the stdio pipe pair (once) or a new websocket.
func (s *Server) Dial(ctx context.Context) (*Client, error) {
	if s.stdio != nil {
		c := s.stdio
		s.stdio = nil
		return c, nil
	}
	if s.URL == "" {
		return nil, errors.New("stdio server: Dial may be called only once")
	}
	ws, _, err := websocket.Dial(ctx, s.URL, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(maxMessage)
	return newClient(transport.NewWebSocket(ws, s.URL)), nil
}

// Close stops the server: SIGTERM, and SIGKILL if it is still there after
// two seconds (a server may write a profile on SIGTERM). Both servers kill
// their children when they exit. CODEX_HOME is removed. Close may be
// called more than once.
func (s *Server) Close() { s.closeOnce.Do(s.close) }

func (s *Server) close() {
	if s.cmd != nil && s.cmd.Process != nil {
		// stdin EOF ends a stdio server; SIGTERM a websocket one.
		_ = s.stdin.Close()
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.waitErr:
		case <-time.After(2 * time.Second):
			_ = s.cmd.Process.Kill()
			select {
			case <-s.waitErr:
			case <-time.After(5 * time.Second):
			}
		}
	}
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.home != "" {
		_ = os.RemoveAll(s.home)
	}
}

// maxMessage bounds one message from a server: far above what any
// workload receives (a 64 MiB fs/readFile result is about 90 MB).
const maxMessage = 1 << 30

// RPCError is an error response from the server.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// Msg is one message from the server.
type Msg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *RPCError       `json:"error,omitempty"`
	// Raw is the message as received.
	Raw []byte `json:"-"`
}

// Event is one process notification (output, exited or closed).
type Event struct {
	Method    string // process/output, process/exited, process/closed
	ProcessID string
	Seq       uint64
	Stream    string // output only
	Chunk     []byte // output only, decoded
	ExitCode  int    // exited only
	Raw       []byte // the notification
}

// Client is one JSON-RPC connection to a server.
type Client struct {
	conn *jsonrpc.Conn

	mu     sync.Mutex
	cond   *sync.Cond
	events map[string][]Event
	other  []*Msg // id -1 errors, unsolicited responses, other notifications
	err    error  // set when the connection has ended

	done chan struct{}
}

func newClient(st jsonrpc.Stream) *Client {
	c := &Client{
		// A test client takes whatever the server sends: the limits are
		// the server's business.
		conn: jsonrpc.NewConn(st, jsonrpc.Options{
			Concurrency: 1,
			QueueBytes:  256 << 20,
			Limits:      jsonrpc.Limits{MaxDepth: 1 << 16, MaxValues: 1 << 30},
		}),
		events: make(map[string][]Event),
		done:   make(chan struct{}),
	}
	c.cond = sync.NewCond(&c.mu)
	go func() {
		defer close(c.done)
		err := c.conn.Run(context.Background(), c.handle)
		if err == nil {
			err = jsonrpc.ErrClosed
		}
		c.mu.Lock()
		c.err = err
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	return c
}

// Done is closed when the connection has ended (the server closed it, or Close).
func (c *Client) Done() <-chan struct{} { return c.done }

// Close closes the connection and waits for its end.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// handle takes every message that is not a response to a Call: process
// events, other notifications, unsolicited responses. It runs on the read
// loop.
func (c *Client) handle(msg *jsonrpc.Message) jsonrpc.Action {
	if msg.Kind == jsonrpc.KindNotification && strings.HasPrefix(msg.Method, "process/") {
		var p struct {
			ProcessID string `json:"processId"`
			Seq       uint64 `json:"seq"`
			Stream    string `json:"stream"`
			Chunk     []byte `json:"chunk"`
			ExitCode  int    `json:"exitCode"`
		}
		if json.Unmarshal(msg.Params, &p) == nil {
			c.mu.Lock()
			c.events[p.ProcessID] = append(c.events[p.ProcessID], Event{Method: msg.Method, ProcessID: p.ProcessID,
				Seq: p.Seq, Stream: p.Stream, Chunk: p.Chunk, ExitCode: p.ExitCode, Raw: rawMessage(msg)})
			c.cond.Broadcast()
			c.mu.Unlock()
			return jsonrpc.Inline
		}
	}
	m := &Msg{ID: bytes.Clone(msg.ID), Method: msg.Method, Params: bytes.Clone(msg.Params),
		Result: bytes.Clone(msg.Result), Raw: rawMessage(msg)}
	if msg.Error != nil {
		m.Error = new(RPCError)
		_ = json.Unmarshal(msg.Error, m.Error)
	}
	c.keepOther(m)
	return jsonrpc.Inline
}

// rawMessage writes msg back as JSON (members in a fixed order; the
// values as received).
func rawMessage(msg *jsonrpc.Message) []byte {
	var b []byte
	add := func(key string, v []byte) {
		if v == nil {
			return
		}
		if len(b) == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), key...), `":`...)
		b = append(b, v...)
	}
	add("id", msg.ID)
	if msg.Method != "" {
		add("method", jsonrpc.AppendString(nil, msg.Method))
	}
	add("params", msg.Params)
	add("result", msg.Result)
	add("error", msg.Error)
	if len(b) == 0 {
		return []byte("{}")
	}
	return append(b, '}')
}

func (c *Client) keepOther(m *Msg) {
	c.mu.Lock()
	c.other = append(c.other, m)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// SendRaw writes one message exactly as given. Its answer, if any, is
// an unsolicited message (NextOther).
func (c *Client) SendRaw(ctx context.Context, b []byte) error { return c.conn.Send(ctx, b) }

// Notify sends a notification.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	return c.conn.Notify(ctx, method, params)
}

// Call sends a request and waits for its response. A server error comes
// back as *RPCError; result (when not nil) receives the result.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	m, err := c.CallMsg(ctx, method, params)
	if err != nil {
		return err
	}
	if m.Error != nil {
		return m.Error
	}
	if result != nil {
		return json.Unmarshal(m.Result, result)
	}
	return nil
}

// CallMsg sends a request and returns the response: Result, or Error for
// the server's error. Raw is the result or the error object.
func (c *Client) CallMsg(ctx context.Context, method string, params any) (*Msg, error) {
	var res json.RawMessage
	err := c.conn.Call(ctx, method, params, &res)
	var je *jsonrpc.Error
	switch {
	case err == nil:
		return &Msg{Result: res, Raw: res}, nil
	case errors.As(err, &je):
		raw, _ := json.Marshal(je)
		return &Msg{Error: &RPCError{Code: je.Code, Message: je.Message}, Raw: raw}, nil
	case errors.Is(err, jsonrpc.ErrClosed):
		return nil, fmt.Errorf("%s: connection closed: %w", method, err)
	}
	return nil, fmt.Errorf("%s: %w", method, err)
}

// Initialize runs initialize and sends initialized; it returns the session id.
func (c *Client) Initialize(ctx context.Context) (string, error) {
	var r struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.Call(ctx, "initialize", map[string]any{"clientName": "exec-server-interop"}, &r); err != nil {
		return "", err
	}
	return r.SessionID, c.Notify(ctx, "initialized", map[string]any{})
}

// waitFor blocks until cond (called with c.mu held) is true, the
// connection ends, or ctx is done.
func (c *Client) waitFor(ctx context.Context, cond func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond() {
		if c.err != nil {
			return fmt.Errorf("connection closed: %w", c.err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	return nil
}

// NextOther returns the oldest message that was neither a response to a
// pending Call nor a process event (id -1 errors, responses to SendRaw).
func (c *Client) NextOther(ctx context.Context) (*Msg, error) {
	var m *Msg
	err := c.waitFor(ctx, func() bool {
		if len(c.other) == 0 {
			return false
		}
		m = c.other[0]
		c.other = c.other[1:]
		return true
	})
	return m, err
}

// Events returns the events received so far for processID, sorted by seq.
func (c *Client) Events(processID string) []Event {
	c.mu.Lock()
	evs := append([]Event(nil), c.events[processID]...)
	c.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	return evs
}

// Arrived returns the events received so far for processID in the order
// they arrived.
func (c *Client) Arrived(processID string) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events[processID]...)
}

// WaitClosed waits for processID's process/closed event and returns all its
// events sorted by seq.
func (c *Client) WaitClosed(ctx context.Context, processID string) ([]Event, error) {
	err := c.waitFor(ctx, func() bool {
		for _, ev := range c.events[processID] {
			if ev.Method == "process/closed" {
				return true
			}
		}
		return false
	})
	if err != nil {
		return c.Events(processID), fmt.Errorf("waiting for %s to close: %w", processID, err)
	}
	return c.Events(processID), nil
}

// WaitOutput waits until processID's output so far contains want and
// returns that output.
func (c *Client) WaitOutput(ctx context.Context, processID string, want []byte) ([]byte, error) {
	var out []byte
	err := c.waitFor(ctx, func() bool {
		out = out[:0]
		evs := append([]Event(nil), c.events[processID]...)
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
		for _, ev := range evs {
			out = append(out, ev.Chunk...)
		}
		return bytes.Contains(out, want)
	})
	if err != nil {
		return out, fmt.Errorf("waiting for %q from %s (have %q): %w", want, processID, out, err)
	}
	return out, nil
}

// Output concatenates the output chunks of evs per stream.
func Output(evs []Event) map[string][]byte {
	out := map[string][]byte{}
	for _, ev := range evs {
		if ev.Method == "process/output" {
			out[ev.Stream] = append(out[ev.Stream], ev.Chunk...)
		}
	}
	return out
}

// B64 encodes b as standard base64 (the protocol's byte encoding).
func B64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// FileURI turns an absolute path into a file: URI.
func FileURI(path string) string { return (&url.URL{Scheme: "file", Path: path}).String() }
