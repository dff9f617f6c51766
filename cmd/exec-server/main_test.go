package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "exec-server-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "exec-server")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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
	s := &srvProc{cmd: exec.Command(binary, args...)}
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

// wsClient is a minimal websocket JSON-RPC client.
type wsClient struct {
	t       *testing.T
	c       *websocket.Conn
	id      int
	skipped [][]byte // notifications call passed over
}

func dial(t *testing.T, url string) *wsClient {
	t.Helper()
	c, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(256 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &wsClient{t: t, c: c}
}

func (w *wsClient) send(method string, params any) int {
	w.id++
	b, _ := json.Marshal(map[string]any{"id": w.id, "method": method, "params": params})
	if err := w.c.Write(context.Background(), websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
	return w.id
}

func (w *wsClient) read() []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

// call waits for the response to a request, skipping notifications.
func (w *wsClient) call(method string, params any) json.RawMessage {
	id := w.send(method, params)
	for {
		var m struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		b := w.read()
		json.Unmarshal(b, &m)
		if m.ID == nil {
			w.skipped = append(w.skipped, b)
		}
		if m.ID != nil && *m.ID == id {
			if m.Error != nil {
				w.t.Fatalf("%s: %s", method, m.Error)
			}
			return m.Result
		}
	}
}

func (w *wsClient) init() {
	w.call("initialize", map[string]any{"clientName": "it"})
	w.c.Write(context.Background(), websocket.MessageText, []byte(`{"method":"initialized"}`))
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
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		cmd := exec.Command(binary, c.args...)
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
	for _, b := range w.skipped {
		if bytes.Contains(b, []byte(`"process/closed"`)) {
			closed++
		}
	}
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
	write := func(line string) { io.WriteString(s.stdin, line+"\n") }
	write(`{"id":1,"method":"initialize","params":{"clientName":"x"}}`)
	write(`{"method":"initialized"}`)
	write(`{"id":2,"method":"process/start","params":{"processId":"p","argv":["sh","-c","echo $$; exec sleep 100"],"cwd":"file://` + t.TempDir() + `","env":{},"tty":false}}`)
	var child int
	for child == 0 {
		line, err := s.stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("%v; stderr %s", err, s.stderr.String())
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				Chunk string `json:"chunk"`
			} `json:"params"`
		}
		json.Unmarshal([]byte(line), &m)
		if m.Method == "process/output" {
			b, _ := base64.StdEncoding.DecodeString(m.Params.Chunk)
			child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
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

// A client that stops reading during a 512 MiB stream: the server's memory
// stays bounded (back-pressure reaches the child), the connection stays
// open, and once the client reads again every byte arrives in order.
func TestStalledReaderBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 512 MiB")
	}
	s := startWS(t)
	pid := s.cmd.Process.Pid
	w := dial(t, s.url)
	w.init()
	before := procStatus(pid, "VmRSS")
	const total = 512 << 20
	w.send("process/start", map[string]any{"processId": "big", "argv": []string{"head", "-c", strconv.Itoa(total), "/dev/zero"},
		"cwd": "file://" + t.TempDir(), "env": map[string]string{}, "tty": false})
	for i := 0; i < 4; i++ {
		w.read()
	}
	peak := 0
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		peak = max(peak, procStatus(pid, "VmRSS"))
	}
	if growth := peak - before; growth > 128<<10 {
		t.Errorf("server RSS grew by %d KiB during a stall (limit 128 MiB)", growth)
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
	if got < total-4*(64<<10) || got > total {
		t.Errorf("received %d bytes after the stall, want about %d", got, total)
	}
}
