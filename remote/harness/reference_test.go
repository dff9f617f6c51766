package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/internal/test/syncbuf"
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/frame"
)

// scratch is a fresh directory outside the temp dir (the reference wants
// its CODEX_HOME there), removed at the end.
func scratch(t *testing.T) string {
	t.Helper()
	return codexref.Scratch(t, "exec-server-remote-test", "ref-")
}

// startReferenceExecutor runs `codex exec-server --remote` against d and
// waits for its rendezvous socket.
func startReferenceExecutor(t *testing.T, d *double) {
	t.Helper()
	bin := codexref.Bin(t)
	home := scratch(t)
	cmd := exec.Command(bin, "exec-server", "--remote", d.srv.URL, "--environment-id", d.env)
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "CODEX_API_KEY=x", "RUST_LOG=warn")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() || os.Getenv("EXEC_SERVER_REFERENCE_LOG") != "" {
			t.Logf("reference executor stderr:\n%s", stderr.String())
		}
	})
	select {
	case <-d.execUp:
	case <-time.After(30 * time.Second):
		t.Fatalf("the reference executor did not connect; stderr:\n%s", stderr.String())
	}
}

// openSession dials a stream with dl (closed when t ends) and opens a
// JSON-RPC session on it (initialize, initialized); it returns the client
// and the session id the executor gave.
func openSession(t *testing.T, dl *Dialer, clientName string) (*rpc, string) {
	t.Helper()
	ch, err := dl.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	r := &rpc{t: t, ch: ch}
	var init struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(r.call("initialize", map[string]any{"clientName": clientName}), &init)
	r.notify("initialized", map[string]any{})
	return r, init.SessionID
}

// rpc is a bare JSON-RPC client over a channel, enough to drive a session
// without the SDK.
type rpc struct {
	t      *testing.T
	ch     *channel.Channel
	nextID int
	notes  []map[string]any
}

func (r *rpc) notify(method string, params any) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	if err := r.ch.Write(context.Background(), b, false); err != nil {
		r.t.Fatal(err)
	}
}

// call sends a request and reads until its response, keeping the
// notifications read meanwhile.
func (r *rpc) call(method string, params any) json.RawMessage {
	r.t.Helper()
	r.nextID++
	id := r.nextID
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err := r.ch.Write(context.Background(), b, false); err != nil {
		r.t.Fatal(err)
	}
	for {
		m := r.read()
		if m.ID == nil {
			var n map[string]any
			json.Unmarshal(m.raw, &n)
			r.notes = append(r.notes, n)
			continue
		}
		if *m.ID != id {
			r.t.Fatalf("response to %d while waiting for %d", *m.ID, id)
		}
		if m.Error != nil {
			r.t.Fatalf("%s: error %s", method, m.Error)
		}
		return m.Result
	}
}

type rpcMsg struct {
	ID     *int            `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	Method string          `json:"method"`
	raw    []byte
}

func (r *rpc) read() rpcMsg {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := r.ch.Read(ctx)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	var m rpcMsg
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatalf("bad message %q: %v", b, err)
	}
	m.raw = b
	return m
}

// waitClosed reads notifications until process/closed for id and returns
// the stdout it carried.
func (r *rpc) waitClosed(id string) string {
	r.t.Helper()
	var out strings.Builder
	for i := 0; ; i++ {
		var n map[string]any
		if i < len(r.notes) {
			n = r.notes[i]
		} else {
			m := r.read()
			json.Unmarshal(m.raw, &n)
			r.notes = append(r.notes, n)
		}
		p, _ := n["params"].(map[string]any)
		if p["processId"] != id {
			continue
		}
		switch n["method"] {
		case "process/output":
			b, _ := base64.StdEncoding.DecodeString(p["chunk"].(string))
			out.Write(b)
		case "process/closed":
			return out.String()
		}
	}
}

func dialer(t *testing.T, d *double) *Dialer {
	t.Helper()
	dl, err := NewDialer(d.srv.URL+"/", d.env, harnessToken, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

// TestReferenceExecutor drives the reference executor (codex 0.169's
// `exec-server --remote`) through the test double with this package's
// initiator: the handshake, then a JSON-RPC session whose messages cross
// record boundaries both ways.
func TestReferenceExecutor(t *testing.T) {
	d := newDouble(t, "env-ref")
	startReferenceExecutor(t, d)
	work := scratch(t)

	r, sessionID := openSession(t, dialer(t, d), "remote-harness-test")
	if sessionID == "" {
		t.Fatal("initialize: no sessionId")
	}

	t.Run("echo", func(t *testing.T) {
		r.t = t
		r.call("process/start", map[string]any{"processId": "p1", "argv": []string{"/bin/echo", "hello-relay"},
			"cwd": "file://" + work, "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false})
		if out := r.waitClosed("p1"); out != "hello-relay\n" {
			t.Fatalf("stdout %q", out)
		}
	})

	// 200 000 bytes out through fs/writeFile (a message of 4 records to
	// the executor) and back through fs/readFile (4 records from it).
	t.Run("large messages both ways", func(t *testing.T) {
		r.t = t
		data := bytes.Repeat([]byte("0123456789abcdef"), 12500)
		path := filepath.Join(work, "big")
		r.call("fs/writeFile", map[string]any{"path": "file://" + path, "dataBase64": base64.StdEncoding.EncodeToString(data)})
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("file on disk: %d bytes, %v", len(got), err)
		}
		d.mu.Lock()
		d.execFrames = nil
		d.mu.Unlock()
		var res struct {
			DataBase64 string `json:"dataBase64"`
		}
		json.Unmarshal(r.call("fs/readFile", map[string]any{"path": "file://" + path}), &res)
		back, _ := base64.StdEncoding.DecodeString(res.DataBase64)
		if !bytes.Equal(back, data) {
			t.Fatalf("read back %d bytes", len(back))
		}
		d.mu.Lock()
		frames := d.execFrames
		d.mu.Unlock()
		t.Logf("executor data frames for the readFile response (kind, ciphertext bytes): %v", frames)
		// Full records but the last: the reference cuts as we do.
		for i, f := range frames {
			if f.kind != frame.KindData || f.size > 61456 || i < len(frames)-1 && f.size != 61456 {
				t.Fatalf("frame %d: %v", i, f)
			}
		}
	})
}

// TestReferenceHandshakeOutcomes checks the executor's answers to
// /validate outcomes: 401 gives the rejection marker in message 2
// (3465 bytes), 403 and valid:false a Reset.
func TestReferenceHandshakeOutcomes(t *testing.T) {
	d := newDouble(t, "env-ref-auth")
	startReferenceExecutor(t, d)
	tests := []struct {
		name    string
		code    int
		wantErr error
		msg2    int
	}{
		{"valid", 0, nil, 3424},
		{"validate 401", 401, ErrRegistryAuthRejected, 3465},
		{"validate 403", 403, ErrStreamReset, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.mu.Lock()
			d.validateCode = tt.code
			d.execFrames = nil
			d.mu.Unlock()
			ch, err := dialer(t, d).Dial(context.Background())
			if ch != nil {
				ch.Close()
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Dial: %v, want %v", err, tt.wantErr)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			var hs []int
			for _, f := range d.execFrames {
				if f.kind == frame.KindHandshake {
					hs = append(hs, f.size)
				}
			}
			if tt.msg2 != 0 && (len(hs) != 1 || hs[0] != tt.msg2) {
				t.Fatalf("message 2 sizes %v, want %d", hs, tt.msg2)
			}
		})
	}
}

// permute returns a double hook that collects the data frames of the next
// stream from seq base on until it has len(order) of them (counting from base),
// then sends them in that order (indices relative to base, repeats are
// duplicates); everything else passes.
func permute(base uint32, n int, order []int) func([]byte) [][]byte {
	var mu sync.Mutex
	held := map[int][]byte{}
	done := false
	stream := "" // the stream of the first handshake seen: a previous test's may still be sending
	return func(raw []byte) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		f, err := frame.Unmarshal(raw)
		if err == nil && f.Kind == frame.KindHandshake && stream == "" {
			stream = f.StreamID
		}
		if done || err != nil || f.Kind != frame.KindData || f.StreamID != stream || f.Seq < base {
			return [][]byte{raw}
		}
		held[int(f.Seq-base)] = raw
		if len(held) < n {
			return nil
		}
		done = true
		var out [][]byte
		for _, i := range order {
			out = append(out, held[i])
		}
		for i := range n {
			if !containsInt(order, i) {
				out = append(out, held[i])
			}
		}
		return out
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func seqs(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestReferenceReorderWindow checks the receiver rules (docs/remote.md) on the
// reference executor, with records of one large message that the double
// delivers out of order: a gap of 64 and a 1 MiB buffer pass, one more
// is a Reset; duplicates are dropped.
func TestReferenceReorderWindow(t *testing.T) {
	d := newDouble(t, "env-ref-window")
	startReferenceExecutor(t, d)
	work := scratch(t)
	tests := []struct {
		name  string
		n     int
		order []int
		reset bool
	}{
		{"duplicates and a swap", 2, []int{1, 0, 0, 1, 1}, false},
		{"gap of 64", 65, append([]int{64}, seqs(0, 64)...), false},
		{"gap of 65", 66, append([]int{65}, seqs(0, 65)...), true},
		{"17 full records buffered", 18, append(seqs(1, 18), 0), false},
		{"18 full records buffered", 19, append(seqs(1, 19), 0), true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// initialize and initialized are seq 0 and 1; the large
			// message starts at seq 2.
			d.mu.Lock()
			d.onHarnessFrame = permute(2, tt.n, tt.order)
			d.mu.Unlock()
			r, _ := openSession(t, dialer(t, d), "window-test")
			ch := r.ch
			// 70 records of plaintext.
			data := bytes.Repeat([]byte{byte(i)}, 70*61440*3/4)
			path := filepath.Join(work, fmt.Sprint("w", i))
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 99, "method": "fs/writeFile",
				"params": map[string]any{"path": "file://" + path, "dataBase64": base64.StdEncoding.EncodeToString(data)}})
			if err := ch.Write(context.Background(), b, false); err != nil {
				// The reset may come back while the message is still
				// going out.
				if tt.reset && errors.Is(err, channel.ErrPeerReset) {
					return
				}
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			reply, err := ch.Read(ctx)
			if tt.reset {
				if !errors.Is(err, channel.ErrPeerReset) {
					t.Fatalf("want a reset, got %q, %v", reply, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(reply, []byte(`"id":99`)) || bytes.Contains(reply, []byte(`"error"`)) {
				t.Fatalf("reply %s", reply)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
				t.Fatalf("file has %d bytes", len(got))
			}
		})
	}
}

// TestReferenceTwoStreams opens two streams to the reference executor at
// once: independent sessions, each with its own process table.
func TestReferenceTwoStreams(t *testing.T) {
	d := newDouble(t, "env-ref-two")
	startReferenceExecutor(t, d)
	work := scratch(t)
	dl := dialer(t, d)
	var rs []*rpc
	sessions := map[string]bool{}
	for i := range 2 {
		r, sessionID := openSession(t, dl, fmt.Sprint("two-", i))
		sessions[sessionID] = true
		rs = append(rs, r)
	}
	if len(sessions) != 2 {
		t.Fatalf("sessions %v", sessions)
	}
	// The same process id on both streams: separate tables.
	for i, r := range rs {
		r.call("process/start", map[string]any{"processId": "same", "argv": []string{"/bin/echo", fmt.Sprint("stream-", i)},
			"cwd": "file://" + work, "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false})
	}
	for i, r := range rs {
		if out := r.waitClosed("same"); out != fmt.Sprintf("stream-%d\n", i) {
			t.Fatalf("stream %d: stdout %q", i, out)
		}
	}
}
