package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/childinit"
	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/transport"
)

// binary is this test binary: run with serverEnv it is the exec-server
// (TestMain calls main), so no separate build is needed. The server's
// children re-execute it as their init as they would the real binary.
var binary string

const serverEnv = "EXEC_SERVER_TEST_AS_SERVER=1"

func TestMain(m *testing.M) {
	if os.Getenv("GORACE") == "" {
		// A race-enabled binary sleeps 1 s at exit by default: every
		// server and init would wait for it.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	if os.Getenv("EXEC_SERVER_TEST_AS_SERVER") == "1" {
		main()
		return
	}
	childinit.MaybeMain()
	sandbox.MaybeMain()
	var err error
	if binary, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Servers run in process (run) and as binaries record their sandbox
	// state here, never in the user's cache directory.
	removeState := testbin.SandboxState()
	code := m.Run()
	removeState()
	os.Exit(code)
}

// serverCommand runs the server with args.
func serverCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), serverEnv)
	return cmd
}

// server is a running exec-server binary.
type srvProc struct {
	cmd    *exec.Cmd
	url    string
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

func startServer(t *testing.T, args ...string) *srvProc {
	t.Helper()
	s := &srvProc{cmd: serverCommand(args...)}
	s.cmd.Dir = t.TempDir()
	s.cmd.Stderr = &s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stdout = bufio.NewReaderSize(out, 1<<20)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	return s
}

func startWS(t *testing.T, args ...string) *srvProc {
	t.Helper()
	s := startServer(t, args...)
	line, err := s.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the URL line: %v (stderr: %s)", err, s.stderr.String())
	}
	s.url = strings.TrimSpace(line)
	if !strings.HasPrefix(s.url, "ws://127.0.0.1:") {
		t.Fatalf("first stdout line %q is not a ws URL", s.url)
	}
	return s
}

// wsClient is a JSON-RPC client (websocket or stdio) on the project's engine
// (jsonrpc.Conn) that keeps the server's notifications, in order, for read.
// It stops reading from the connection while more than a MiB of them wait
// to be read, so a test that stops calling read stalls the server as a
// slow client would.
type wsClient struct {
	t    *testing.T
	conn *jsonrpc.Conn

	mu     sync.Mutex
	cond   *sync.Cond
	queue  [][]byte
	queued int
	err    error // the connection has ended
}

const maxQueued = 1 << 20

func dial(t *testing.T, url string) *wsClient {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(256 << 20)
	return newClient(t, transport.NewWebSocket(c, url))
}

// newClient runs a client on st until the test ends.
func newClient(t *testing.T, st jsonrpc.Stream) *wsClient {
	w := &wsClient{t: t, conn: jsonrpc.NewConn(st, jsonrpc.Options{Concurrency: 1})}
	w.cond = sync.NewCond(&w.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := w.conn.Run(context.Background(), w.keep)
		w.mu.Lock()
		w.err = fmt.Errorf("connection ended: %v", err)
		w.cond.Broadcast()
		w.mu.Unlock()
	}()
	t.Cleanup(func() { w.conn.Close(); <-done })
	return w
}

// keep queues a notification (the raw params are enough for these tests,
// re-wrapped as the message was).
func (w *wsClient) keep(m *jsonrpc.Message) jsonrpc.Action {
	if m.Kind != jsonrpc.KindNotification {
		return jsonrpc.Inline
	}
	b := fmt.Appendf(nil, `{"method":%q,"params":%s}`, m.Method, m.Params)
	w.mu.Lock()
	for w.queued > maxQueued && w.err == nil {
		w.cond.Wait()
	}
	w.queue = append(w.queue, b)
	w.queued += len(b)
	w.cond.Broadcast()
	w.mu.Unlock()
	return jsonrpc.Inline
}

// send sends a request without waiting for its response.
func (w *wsClient) send(method string, params any) {
	go w.conn.Call(context.Background(), method, params, nil)
}

// read returns the next notification, waiting at most 30 s.
func (w *wsClient) read() []byte {
	stop := time.AfterFunc(30*time.Second, func() {
		w.mu.Lock()
		if w.err == nil {
			w.err = errors.New("no notification within 30s")
		}
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 {
		if w.err != nil {
			w.t.Fatal(w.err)
		}
		w.cond.Wait()
	}
	b := w.queue[0]
	w.queue = w.queue[1:]
	w.queued -= len(b)
	w.cond.Broadcast()
	return b
}

// call sends a request and returns its result; an error fails the test.
func (w *wsClient) call(method string, params any) json.RawMessage {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res json.RawMessage
	if err := w.conn.Call(ctx, method, params, &res); err != nil {
		w.t.Fatalf("%s: %v", method, err)
	}
	return res
}

func (w *wsClient) init() {
	w.call("initialize", map[string]any{"clientName": "it"})
	if err := w.conn.Notify(context.Background(), "initialized", nil); err != nil {
		w.t.Fatal(err)
	}
}

func procStatus(pid int, field string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return -1
}

func countFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func TestFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--listen", "ws://localhost:x"}, 2, "expected `ws://IP:PORT`"},
		{[]string{"--listen", "http://127.0.0.1:1"}, 2, "unsupported --listen URL"},
		{[]string{"--concurrent-requests", "0"}, 2, "at least 1"},
		{[]string{"--session-ttl", "nope"}, 2, "invalid value"},
		{[]string{"--log-level", "loud"}, 2, "invalid --log-level"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"--tcp-upstream-proxy", "proxy.example"}, 2, "--tcp-upstream-proxy \"proxy.example\": address proxy.example: missing port"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		cmd := serverCommand(c.args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != c.code || len(lines) != 1 || !strings.Contains(lines[0], c.msg) {
			t.Errorf("%v: exit %d (%v), stderr %q; want exit %d, one line containing %q", c.args, code, err, stderr.String(), c.code, c.msg)
		}
	}
}

func TestWebsocketServer(t *testing.T) {
	s := startWS(t)
	httpURL := "http" + strings.TrimPrefix(s.url, "ws")
	for _, c := range []struct {
		method, path string
		origin       bool
		want         int
	}{
		{"GET", "/readyz", false, 200},
		{"HEAD", "/readyz", false, 200},
		{"POST", "/readyz", false, 405},
		{"GET", "/nope", false, 404},
		{"GET", "/", true, 403},
	} {
		req, _ := http.NewRequest(c.method, httpURL+c.path, nil)
		if c.origin {
			req.Header.Set("Origin", "http://evil.example")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s origin=%v: %d, want %d", c.method, c.path, c.origin, resp.StatusCode, c.want)
		}
	}

	w := dial(t, s.url)
	w.init()
	pid := s.cmd.Process.Pid
	// The session's first process starts its init (the spawner), whose
	// lifeline the server keeps as long as the session: count from after it.
	w.call("process/start", map[string]any{"processId": "warm", "argv": []string{"true"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": false})
	for !bytes.Contains(w.read(), []byte(`"process/closed"`)) {
	}
	baseFDs := countFDs(pid)
	// Many processes, pipes and PTYs; afterwards the server holds no more
	// descriptors than before.
	for i := 0; i < 40; i++ {
		w.call("process/start", map[string]any{"processId": fmt.Sprint("p", i), "argv": []string{"sh", "-c", "echo $0"},
			"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": i%2 == 0})
	}
	closed := 0
	for closed < 40 {
		if bytes.Contains(w.read(), []byte(`"process/closed"`)) {
			closed++
		}
	}
	if n := countFDs(pid); n > baseFDs {
		t.Errorf("fd leak: %d descriptors before, %d after", baseFDs, n)
	}

	// SIGTERM: stop, kill managed processes, exit 0.
	w.call("process/start", map[string]any{"processId": "sleeper", "argv": []string{"sh", "-c", "echo $$; sleep 100 & wait"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": false})
	var child int
	for child == 0 {
		var m struct {
			Method string `json:"method"`
			Params struct {
				Chunk []byte `json:"chunk"`
			} `json:"params"`
		}
		json.Unmarshal(w.read(), &m)
		if m.Method == "process/output" {
			child, _ = strconv.Atoi(strings.TrimSpace(string(m.Params.Chunk)))
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v (stderr %s)", err, s.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	if alive(child) {
		t.Errorf("child %d survived the server's SIGTERM", child)
	}
}

func TestStdioServer(t *testing.T) {
	s := startServer(t, "--listen", "stdio")
	w := newClient(t, transport.NewStdio(s.stdout, s.stdin, s.stdin, 0))
	w.init()
	w.call("process/start", map[string]any{"processId": "p", "argv": []string{"sh", "-c", "echo $$; exec sleep 100"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": false})
	var child int
	for child == 0 {
		var m struct {
			Method string `json:"method"`
			Params struct {
				Chunk []byte `json:"chunk"`
			} `json:"params"`
		}
		json.Unmarshal(w.read(), &m)
		if m.Method == "process/output" {
			child, _ = strconv.Atoi(strings.TrimSpace(string(m.Params.Chunk)))
		}
	}
	s.stdin.Close() // EOF: kill processes, exit 0
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after stdin EOF: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server did not exit after stdin EOF")
	}
	if alive(child) {
		t.Errorf("child %d survived the end of stdin", child)
	}
}

// A client that stops reading during a 512 MiB stream (64 MiB with -race):
// the server's memory stays bounded (back-pressure reaches the child), the
// connection stays open, and once the client reads again every byte
// arrives in order.
func TestStalledReaderBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 512 MiB")
	}
	s := startWS(t)
	pid := s.cmd.Process.Pid
	w := dial(t, s.url)
	w.init()
	before := procStatus(pid, "VmRSS")
	// Unbounded buffering would hold the whole stream (4/3 of it as
	// base64), more than the limit; a bounded server grows by its send
	// queue (8 MiB) and pipe buffers, about 12 MiB here. The race-enabled
	// server is slower per byte, so its stream and limit are smaller.
	total, limit := 512<<20, 128<<10 // bytes, KiB
	if raceEnabled {
		total, limit = 64<<20, 40<<10
	}
	w.send("process/start", map[string]any{"processId": "big", "argv": []string{"head", "-c", strconv.Itoa(total), "/dev/zero"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": false})
	for i := 0; i < 4; i++ {
		w.read()
	}
	peak := 0
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		peak = max(peak, procStatus(pid, "VmRSS"))
	}
	if growth := peak - before; growth > limit {
		t.Errorf("server RSS grew by %d KiB during a stall (limit %d KiB)", growth, limit)
	}
	t.Logf("server RSS before %d KiB, peak during 6 s stall %d KiB", before, peak)

	var got int64
	var lastSeq int64
	for {
		b := w.read()
		if bytes.Contains(b[:min(len(b), 40)], []byte("process/closed")) {
			break
		}
		if !bytes.HasPrefix(b, []byte(`{"method":"process/`)) {
			continue
		}
		i := bytes.Index(b, []byte(`"seq":`)) + 6
		j := i + bytes.IndexAny(b[i:], ",}")
		seq, _ := strconv.ParseInt(string(b[i:j]), 10, 64)
		if lastSeq != 0 && seq != lastSeq+1 {
			t.Fatalf("seq gap: %d after %d", seq, lastSeq)
		}
		lastSeq = seq
		if !bytes.HasPrefix(b, []byte(`{"method":"process/output"`)) {
			continue
		}
		k := bytes.Index(b, []byte(`"chunk":"`)) + 9
		enc := b[k : len(b)-3]
		got += int64(base64.StdEncoding.DecodedLen(len(enc)) - bytes.Count(enc[max(len(enc)-2, 0):], []byte("=")))
	}
	// The first 4 messages read before the stall were output too.
	if got < int64(total)-4*(64<<10) || got > int64(total) {
		t.Errorf("received %d bytes after the stall, want about %d", got, total)
	}
}
