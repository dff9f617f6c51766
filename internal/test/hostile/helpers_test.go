package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/internal/test/procmark"
	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// binary is the exec-server built once for the whole suite.
var binary string

func TestMain(m *testing.M) {
	var err error
	if binary, err = testbin.ExecServer(); err != nil {
		fmt.Fprintln(os.Stderr, "building exec-server:", err)
		os.Exit(1)
	}
	removeState := testbin.SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

// hostileArgs returns the server flags of a test: the words of the
// environment variable env when it is set (HOSTILE_PARTIAL_ARGS=" " runs
// with the defaults), def otherwise.
func hostileArgs(env string, def ...string) []string {
	if v, ok := os.LookupEnv(env); ok {
		return strings.Fields(v)
	}
	return def
}

// full reports whether the heavier variants were asked for.
func full() bool { return os.Getenv("HOSTILE_FULL") != "" }

// server is one exec-server process under test.
type server struct {
	cmd    *exec.Cmd
	url    string // ws://127.0.0.1:PORT
	addr   string // 127.0.0.1:PORT
	stderr *lockedBuffer
	done   chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil // keep the log bounded
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer runs the binary on ws://127.0.0.1:0 with extra flags and
// returns once it printed its URL. It is killed at the end of the test.
func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--listen", "ws://127.0.0.1:0", "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return runServer(t, cmd, "server")
}

// runServer starts cmd (a server that prints its ws:// URL as stdout's
// first line) and returns once it did; it is killed at the end of the test,
// and its stderr (named name) is logged if the test failed.
func runServer(t *testing.T, cmd *exec.Cmd, name string) *server {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, s.stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = r.WriteTo(discard{}) // drain: a full pipe must not block the server
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "ws://") {
			t.Fatalf("first stdout line %q is not a ws:// URL; stderr: %s", line, s.stderr.String())
		}
		s.url = line
		s.addr = strings.TrimPrefix(line, "ws://")
	case <-time.After(10 * time.Second):
		t.Fatalf("%s printed no URL; stderr: %s", name, s.stderr.String())
	}
	return s
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (s *server) pid() int { return s.cmd.Process.Pid }

// memory returns the server's current and peak resident set, in bytes.
func (s *server) memory() (rss, hwm int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid()))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n << 10
		case "VmHWM:":
			hwm = n << 10
		}
	}
	return rss, hwm
}

// alive fails the test if the server process has exited.
func (s *server) alive(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
		t.Fatalf("server exited: %v; stderr: %s", s.cmd.ProcessState, s.stderr.String())
	default:
	}
}

// rpcError is a JSON-RPC error reply.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// client is a minimal, well-behaved websocket JSON-RPC client on the
// project's engine (jsonrpc.Conn): it always reads, and keeps only the
// errors answered with id -1; notifications are dropped.
type client struct {
	conn *jsonrpc.Conn
	noID chan *rpcError // errors answered with id -1 (unusable messages)
	done chan struct{}
}

func dial(ctx context.Context, t *testing.T, url string) *client {
	t.Helper()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	cl := newClient(c)
	go cl.readLoop()
	t.Cleanup(func() { cl.close() })
	return cl
}

// newClient wraps c; readLoop must run for calls to be answered.
func newClient(c *websocket.Conn) *client {
	c.SetReadLimit(128 << 20)
	cl := &client{noID: make(chan *rpcError, 16), done: make(chan struct{})}
	cl.conn = jsonrpc.NewConn(transport.NewWebSocket(c, "hostile"), jsonrpc.Options{
		Concurrency: 1,
		Limits:      jsonrpc.Limits{MaxDepth: 1 << 16, MaxValues: 1 << 30},
	})
	return cl
}

// readLoop runs the connection until it ends.
func (cl *client) readLoop() {
	defer close(cl.done)
	_ = cl.conn.Run(context.Background(), func(m *jsonrpc.Message) jsonrpc.Action {
		if m.Kind == jsonrpc.KindResponse && string(m.ID) == "-1" && m.Error != nil {
			e := new(rpcError)
			if json.Unmarshal(m.Error, e) == nil {
				select {
				case cl.noID <- e:
				default:
				}
			}
		}
		return jsonrpc.Inline
	})
}

func (cl *client) close() {
	_ = cl.conn.Close()
	<-cl.done
}

// call sends one request and waits for its reply; a server error is an
// *rpcError.
func (cl *client) call(ctx context.Context, method string, params any, result any) error {
	err := cl.conn.Call(ctx, method, params, result)
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return &rpcError{Code: je.Code, Message: je.Message}
	}
	return err
}

// sendRaw writes msg as is and waits for the id -1 error that answers an
// unusable message.
func (cl *client) sendRaw(ctx context.Context, msg string) error {
	if err := cl.conn.Send(ctx, []byte(msg)); err != nil {
		return err
	}
	select {
	case e := <-cl.noID:
		return e
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (cl *client) notify(ctx context.Context, method string, params any) error {
	return cl.conn.Notify(ctx, method, params)
}

// handshake runs initialize and initialized.
func (cl *client) handshake(ctx context.Context, t *testing.T) string {
	t.Helper()
	var res struct {
		SessionID string `json:"sessionId"`
	}
	if err := cl.call(ctx, "initialize", map[string]any{"clientName": "hostile"}, &res); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if err := cl.notify(ctx, "initialized", map[string]any{}); err != nil {
		t.Fatalf("initialized: %v", err)
	}
	return res.SessionID
}

// startProcess starts argv with env and returns once the server accepted it.
func (cl *client) startProcess(ctx context.Context, id string, argv []string, env map[string]string) error {
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	return cl.call(ctx, "process/start", map[string]any{
		"processId": id, "argv": argv, "cwd": "file:///", "env": env, "tty": false,
	}, nil)
}

// probe is the well-behaved second client: it measures round trips of a
// cheap request while an attack runs.
type probe struct {
	mu      sync.Mutex
	samples []time.Duration
	errs    []error
}

// run sends environment/status every interval until ctx ends. Each call
// has its own deadline so a stuck server shows up as an error, not a hang.
func (p *probe) run(ctx context.Context, cl *client, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		start := time.Now()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cl.call(cctx, "environment/status", nil, nil)
		cancel()
		p.mu.Lock()
		if err != nil {
			p.errs = append(p.errs, err)
		} else {
			p.samples = append(p.samples, time.Since(start))
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startProbe connects a well-behaved client and runs a probe until the
// returned stop function is called; stop returns the probe's figures.
func startProbe(t *testing.T, s *server) (stop func() *probe) {
	t.Helper()
	ctx := context.Background()
	cl := dial(ctx, t, s.url)
	cl.handshake(ctx, t)
	p := &probe{}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.run(pctx, cl, 20*time.Millisecond) }()
	return func() *probe { cancel(); <-done; return p }
}

// quantile returns the q-quantile of the samples.
func (p *probe) quantile(q float64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.samples) == 0 {
		return 0
	}
	s := slices.Clone(p.samples)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// check fails the test if the well-behaved client saw an error or went
// unanswered for longer than limit; limit is a liveness bound (the server
// answered at all), not a performance target. It logs the figures.
func (p *probe) check(t *testing.T, name string, limit time.Duration) {
	t.Helper()
	p.mu.Lock()
	n, errs := len(p.samples), slices.Clone(p.errs)
	p.mu.Unlock()
	t.Logf("%s: well-behaved client: %d round trips, p50 %v, p99 %v, max %v", name, n, p.quantile(0.5), p.quantile(0.99), p.quantile(1))
	if len(errs) > 0 {
		t.Fatalf("%s: well-behaved client got %d errors, first: %v", name, len(errs), errs[0])
	}
	if n == 0 {
		t.Fatalf("%s: well-behaved client got no answer", name)
	}
	if m := p.quantile(1); m > limit {
		t.Fatalf("%s: well-behaved client waited %v for one answer (liveness bound %v)", name, m, limit)
	}
}

// marker returns a random value to tag the environment of every process a
// test starts, so /proc can tell which processes are ours, descendants
// included.
func marker() string { return procmark.New("hostile-") }

// markedPIDs lists live (non-zombie) processes whose environment holds
// HOSTILE_MARK=mark.
func markedPIDs(mark string) []int { return procmark.PIDs("HOSTILE_MARK", mark) }

// waitNoMarked polls until no marked process is alive or the deadline
// passes; it returns the survivors.
func waitNoMarked(mark string, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		pids := markedPIDs(mark)
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMarked polls until at least n marked processes are alive.
func waitMarked(t *testing.T, mark string, n int, within time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := markedPIDs(mark)
		if len(pids) >= n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d marked processes appeared", len(pids), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describe names pids for a failure message.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "\n  pid %d state %c: %s", pid, procmark.State(pid), strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return b.String()
}

// killMarked SIGKILLs survivors so a failing test does not leave them.
func killMarked(mark string) {
	for _, pid := range markedPIDs(mark) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
