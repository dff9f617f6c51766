package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestLifecycleErrors(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	start := startParams(t, "p1", false, "true")

	// Params are checked before the lifecycle, as on the reference.
	if code, msg := p.callErr("process/start", map[string]any{}); code != -32602 || msg != "missing field `processId`" {
		t.Errorf("bad params before initialize: %d %q", code, msg)
	}
	if code, msg := p.callErr("process/start", start); code != -32600 || msg != "client must call initialize before using exec methods" {
		t.Errorf("before initialize: %d %q", code, msg)
	}
	if code, msg := p.callErr("fs/readFile", map[string]any{"path": "file:///x"}); code != -32600 && code != -32601 {
		t.Errorf("fs before initialize: %d %q", code, msg)
	}
	if code, msg := p.callErr("initialize", map[string]any{}); code != -32602 || msg != "missing field `clientName`" {
		t.Errorf("initialize without clientName: %d %q", code, msg)
	}
	if code, _ := p.callErr("initialize", nil); code != -32602 {
		t.Errorf("initialize with null params: %d", code)
	}
	p.raw(`{"method":"initialized"}`)
	w := p.wait("error for early initialized", func(w wire) bool { return string(w.ID) == "-1" })
	if w.Error == nil || w.Error.Code != -32600 {
		t.Errorf("initialized before initialize: %s", w.raw)
	}
	p.call("initialize", map[string]any{"clientName": "t"})
	if code, msg := p.callErr("process/start", start); code != -32600 || msg != "client must send initialized before using exec methods" {
		t.Errorf("before initialized: %d %q", code, msg)
	}
	if code, msg := p.callErr("initialize", map[string]any{"clientName": "t"}); code != -32600 || msg != "initialize may only be sent once per connection" {
		t.Errorf("second initialize: %d %q", code, msg)
	}
	p.raw(`{"method":"initialized","params":{}}`)
	p.call("process/start", start)
	p.events("p1")

	// Unknown notifications are answered with id -1 and the connection
	// stays usable (seed behaviour; the reference closes instead).
	p.raw(`{"method":"foo/bar"}`)
	w = p.wait("error for notification", func(w wire) bool { return string(w.ID) == "-1" })
	if w.Error == nil || w.Error.Code != -32600 {
		t.Errorf("unknown notification: %s", w.raw)
	}
	var st map[string]string
	mustUnmarshal(t, p.call("environment/status", nil), &st)
	if st["status"] != "ready" {
		t.Errorf("environment/status = %v", st)
	}
	var info map[string]any
	mustUnmarshal(t, p.call("environment/info", map[string]any{}), &info)
	if info["platformOs"] != "linux" || !strings.HasPrefix(info["cwd"].(string), "file:///") {
		t.Errorf("environment/info = %v", info)
	}
	if code, _ := p.callErr("environment/info", map[string]any{"a": 1}); code != -32602 {
		t.Errorf("environment/info with params: %d", code)
	}
	if code, msg := p.callErr("process/nope", nil); code != -32601 || !strings.Contains(msg, "process/nope") {
		t.Errorf("unknown method: %d %q", code, msg)
	}
}

func TestMalformedInput(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	cases := []string{
		`not json`,
		`{bad`,
		`42`,
		`"str"`,
		`[]`,
		`[{"id":1,"method":"initialize","params":{"clientName":"x"}}]`,
		`{}`,
		`{"id":10}`,
		`{"id":null,"method":"initialize","params":{"clientName":"x"}}`,
		`{"id":1.5,"method":"initialize","params":{"clientName":"x"}}`,
		`{"id":92233720368547758070,"method":"initialize","params":{"clientName":"x"}}`,
		`{"id":{},"method":"initialize"}`,
		`{"id":1,"result":{}}`,
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		`{"id":1,"method":"x","params":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + "}",
		`{"id":1,"method":"x","params":[` + strings.Repeat("1,", 300000) + "1]}",
	}
	for _, c := range cases {
		p.raw(c)
		w := p.wait("error for "+c[:min(len(c), 40)], func(w wire) bool { return string(w.ID) == "-1" })
		if w.Error == nil || w.Error.Code != -32600 {
			t.Errorf("%.40s: got %s", c, w.raw)
		}
	}
	// Every kind of valid id comes back with its JSON type.
	for _, id := range []string{`"abc"`, `""`, `0`, `-7`, `9007199254740993`, `"1"`} {
		p.raw(`{"id":` + id + `,"method":"environment/status"}`)
		w := p.wait("reply to "+id, func(w wire) bool { return string(w.ID) == id })
		if w.Error == nil || w.Error.Code != -32600 { // not initialized yet
			t.Errorf("id %s: %s", id, w.raw)
		}
	}
	// The connection still works.
	p.init()
	p.call("environment/status", nil)
}

func TestOversizedStdioLine(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{MaxMessageBytes: 1 << 20})
	inR, inW := pipePair(t)
	out := &lineSink{ch: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeStreamWith(t.Context(), newStdio(inR, out, 1<<20), StreamOptions{EndSessionOnClose: true})
	}()
	big := `{"id":1,"method":"initialize","params":{"clientName":"` + strings.Repeat("x", 2<<20) + `"}}`
	go func() {
		inW.Write([]byte(big + "\n"))
		inW.Write([]byte(`{"id":2,"method":"initialize","params":{"clientName":"x"}}` + "\n"))
		inW.Close()
	}()
	first, second := <-out.ch, <-out.ch
	if !strings.Contains(first, `"id":-1`) || !strings.Contains(first, "exceeds the limit") {
		t.Errorf("oversized line: %s", first)
	}
	if !strings.Contains(second, `"id":2`) || !strings.Contains(second, "sessionId") {
		t.Errorf("next line: %s", second)
	}
	<-done
}

func TestBadProcessParams(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	base := func(over map[string]any) map[string]any {
		m := map[string]any{"processId": "x", "argv": []string{"true"}, "cwd": "file://" + dir, "env": map[string]string{}, "tty": false}
		for k, v := range over {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	cases := []struct {
		name   string
		params map[string]any
		code   int
		msg    string
	}{
		{"empty argv", base(map[string]any{"argv": []string{}}), -32602, "argv must not be empty"},
		{"argv missing", base(map[string]any{"argv": nil}), -32602, "missing field `argv`"},
		{"processId number", base(map[string]any{"processId": 5}), -32602, "processId"},
		{"tty string", base(map[string]any{"tty": "yes"}), -32602, "tty"},
		{"relative cwd", base(map[string]any{"cwd": "tmp/x"}), -32602, "invalid URI: relative URL without a base"},
		{"native cwd", base(map[string]any{"cwd": dir}), -32602, "invalid URI: relative URL without a base"},
		{"http cwd", base(map[string]any{"cwd": "http://x/y"}), -32602, "unsupported path URI scheme `http`"},
		{"foreign host", base(map[string]any{"cwd": "file://server/share"}), -32600, "is invalid on 'linux'"},
		{"missing cwd", base(map[string]any{"cwd": "file://" + dir + "/nope"}), -32603, "No such file or directory (os error 2)"},
		{"cwd is a file", base(map[string]any{"cwd": "file://" + file}), -32603, "Not a directory (os error 20)"},
		{"missing program", base(map[string]any{"argv": []string{"/nonexistent/prog"}}), -32603, "No such file or directory (os error 2)"},
		{"bare missing", base(map[string]any{"argv": []string{"no-such-program-xyz"}}), -32603, "No such file or directory (os error 2)"},
		{"not executable", base(map[string]any{"argv": []string{noexec}}), -32603, "Permission denied (os error 13)"},
		{"child PATH wins", base(map[string]any{"argv": []string{"echo"}, "env": map[string]string{"PATH": "/nonexistent"}}), -32603, "No such file or directory (os error 2)"},
		{"empty env name", base(map[string]any{"env": map[string]string{"": "x"}}), -32602, `invalid env entry "": a variable name must not be empty`},
		{"= in env name", base(map[string]any{"env": map[string]string{"A=B": "x"}}), -32602, `invalid env entry "A=B"`},
		{"NUL in env name", base(map[string]any{"env": map[string]string{"A\x00": "x"}}), -32602, `invalid env entry "A\x00"`},
		{"NUL in env value", base(map[string]any{"env": map[string]string{"V": "a\x00b"}}), -32602, `invalid env entry "V": its value must not contain a NUL byte`},
		{"NUL in policy set", base(map[string]any{"envPolicy": map[string]any{"inherit": "none", "set": map[string]string{"V": "\x00"}}}), -32602, `invalid envPolicy.set entry "V"`},
		{"NUL in argv", base(map[string]any{"argv": []string{"echo", "a\x00b"}}), -32602, `invalid argv[1] "a\x00b": an argument must not contain a NUL byte`},
		{"NUL in program", base(map[string]any{"argv": []string{"tr\x00ue"}}), -32602, `invalid argv[0]`},
		{"rows 0", base(map[string]any{"tty": true, "rows": 0}), -32602, "`rows` must be an integer from 1 to 1000, got 0"},
		{"cols 1001", base(map[string]any{"tty": true, "cols": 1001}), -32602, "`cols` must be an integer from 1 to 1000, got 1001"},
		{"rows 65536", base(map[string]any{"tty": true, "rows": 65536}), -32602, "`rows` must be an integer from 1 to 1000, got 65536"},
		{"long processId", base(map[string]any{"processId": strings.Repeat("p", 4<<20)}), -32602, "`processId` is too long: 4194304 bytes, the limit is 256"},
		{"bad sandbox", base(map[string]any{"sandbox": map[string]any{"permissions": map[string]any{"type": "bogus"}, "windowsSandboxLevel": "disabled"}}), -32602, "unknown variant `bogus`"},
	}
	for _, c := range cases {
		code, msg := p.callErr("process/start", c.params)
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: got %d %q, want %d containing %q", c.name, code, msg, c.code, c.msg)
		}
	}
	// None of the failures consumed the id.
	p.call("process/start", base(nil))
	p.events("x")
	if code, msg := p.callErr("process/start", base(nil)); code != -32600 || msg != "process x already exists" {
		t.Errorf("duplicate of retained process: %d %q", code, msg)
	}
	if code, msg := p.callErr("process/write", map[string]any{"processId": "x", "chunk": "!!"}); code != -32602 {
		t.Errorf("invalid base64: %d %q", code, msg)
	}
	if code, msg := p.callErr("process/signal", map[string]any{"processId": "x", "signal": "bogus"}); code != -32602 || !strings.Contains(msg, "bogus") {
		t.Errorf("unknown signal: %d %q", code, msg)
	}
	if code, msg := p.callErr("process/read", map[string]any{"processId": "nope"}); code != -32600 || msg != "unknown process id nope" {
		t.Errorf("read unknown: %d %q", code, msg)
	}
	if code, _ := p.callErr("process/read", map[string]any{"processId": "x", "afterSeq": -1}); code != -32602 {
		t.Errorf("negative afterSeq: %d", code)
	}
}

// decodeOutput concatenates the output chunks of events.
func decodeOutput(t *testing.T, events []wire) (string, []uint64, int) {
	t.Helper()
	var out strings.Builder
	var seqs []uint64
	exit := -999
	for _, e := range events {
		var p struct {
			Seq      uint64 `json:"seq"`
			Chunk    string `json:"chunk"`
			ExitCode int    `json:"exitCode"`
		}
		mustUnmarshal(t, e.Params, &p)
		seqs = append(seqs, p.Seq)
		switch e.Method {
		case "process/output":
			b, err := base64.StdEncoding.DecodeString(p.Chunk)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(b)
		case "process/exited":
			exit = p.ExitCode
		}
	}
	return out.String(), seqs, exit
}

func checkSeqs(t *testing.T, seqs []uint64) {
	t.Helper()
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs not 1..n without gaps: %v", seqs)
		}
	}
}

func TestProcessFlow(t *testing.T) {
	checkGoroutines(t)
	for _, transportName := range []string{"stdio", "websocket"} {
		t.Run(transportName, func(t *testing.T) {
			s := New(Config{})
			var p *peer
			if transportName == "stdio" {
				p = stdioPeer(t, s)
			} else {
				p = wsPeer(t, wsServer(t, s))
			}
			p.init()
			var res map[string]string
			mustUnmarshal(t, p.call("process/start", startParams(t, "p1", false, "sh", "-c", "echo hi; echo err >&2; exit 3")), &res)
			if res["processId"] != "p1" || res["sandboxType"] != "none" {
				t.Errorf("start result %v", res)
			}
			ev := p.events("p1")
			out, seqs, code := decodeOutput(t, ev)
			checkSeqs(t, seqs)
			if code != 3 || !strings.Contains(out, "hi\n") || !strings.Contains(out, "err\n") {
				t.Errorf("out %q code %d", out, code)
			}
			if ev[len(ev)-1].Method != "process/closed" || ev[len(ev)-2].Method != "process/exited" {
				t.Errorf("last events: %v", ev)
			}

			// PTY: merged output with stream "pty".
			p.call("process/start", startParams(t, "p2", true, "sh", "-c", "stty size; tty"))
			ev = p.events("p2")
			out, seqs, code = decodeOutput(t, ev)
			checkSeqs(t, seqs)
			if code != 0 || !strings.Contains(out, "24 80\r\n") || !strings.Contains(out, "/dev/pts/") {
				t.Errorf("pty out %q code %d", out, code)
			}
			if !strings.Contains(ev[0].raw, `"stream":"pty"`) {
				t.Errorf("pty stream name: %s", ev[0].raw)
			}

			// Read back the retained output after the fact.
			var rr struct {
				Chunks   []struct{ Seq uint64 } `json:"chunks"`
				NextSeq  uint64                 `json:"nextSeq"`
				Exited   bool                   `json:"exited"`
				ExitCode *int                   `json:"exitCode"`
				Closed   bool                   `json:"closed"`
			}
			mustUnmarshal(t, p.call("process/read", map[string]any{"processId": "p1"}), &rr)
			if !rr.Exited || !rr.Closed || rr.ExitCode == nil || *rr.ExitCode != 3 || rr.NextSeq != uint64(len(seqs)+1) && rr.NextSeq == 0 {
				t.Errorf("read after close: %+v", rr)
			}
		})
	}
}

// A write pipelined right behind its process/start (sent before the start's
// response arrives) must see the started process.
func TestPipelinedWrite(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	sp := startParams(t, "cat", false, "cat")
	sp["pipeStdin"] = true
	startID := p.request("process/start", sp)
	writeID := p.request("process/write", map[string]any{"processId": "cat", "chunk": base64.StdEncoding.EncodeToString([]byte("ping\n")), "writeId": "w1"})
	againID := p.request("process/write", map[string]any{"processId": "cat", "chunk": base64.StdEncoding.EncodeToString([]byte("ping\n")), "writeId": "w1"})
	if w := p.response(startID); w.Error != nil {
		t.Fatalf("start: %s", w.raw)
	}
	for _, id := range []string{writeID, againID} {
		if w := p.response(id); !strings.Contains(string(w.Result), "accepted") {
			t.Fatalf("write: %s", w.raw)
		}
	}
	got := p.wait("echo", func(w wire) bool { return w.Method == "process/output" })
	out, _, _ := decodeOutput(t, []wire{got})
	if out != "ping\n" {
		t.Errorf("echo = %q", out)
	}
	var tr map[string]bool
	mustUnmarshal(t, p.call("process/terminate", map[string]any{"processId": "cat"}), &tr)
	if !tr["running"] {
		t.Errorf("terminate: %v", tr)
	}
	ev := p.events("cat")
	if out, _, code := decodeOutput(t, ev); code != 137 || out != "" {
		t.Errorf("after terminate: out %q code %d (the duplicate writeId must not be written twice)", out, code)
	}
	var st map[string]string
	mustUnmarshal(t, p.call("process/write", map[string]any{"processId": "nope", "chunk": ""}), &st)
	if st["status"] != "unknownProcess" {
		t.Errorf("write unknown: %v", st)
	}
	p.call("process/start", startParams(t, "nostdin", false, "sleep", "5"))
	mustUnmarshal(t, p.call("process/write", map[string]any{"processId": "nostdin", "chunk": "eA=="}), &st)
	if st["status"] != "stdinClosed" {
		t.Errorf("write without pipeStdin: %v", st)
	}
	p.call("process/terminate", map[string]any{"processId": "nostdin"})
	p.events("nostdin")
}

// A long-poll read must not delay other requests by default, and must with
// --concurrent-requests 1.
func TestConcurrency(t *testing.T) {
	checkGoroutines(t)
	for _, n := range []int{0, 1} {
		t.Run(fmt.Sprint("concurrent=", n), func(t *testing.T) {
			p := stdioPeer(t, New(Config{ConcurrentRequests: n}))
			p.init()
			p.call("process/start", startParams(t, "s", false, "sleep", "30"))
			readID := p.request("process/read", map[string]any{"processId": "s", "waitMs": 700})
			statusID := p.request("environment/status", nil)
			var order []string
			for len(order) < 2 {
				w := p.wait("replies", func(w wire) bool { return string(w.ID) == readID || string(w.ID) == statusID })
				order = append(order, string(w.ID))
			}
			wantFirst := statusID
			if n == 1 {
				wantFirst = readID
			}
			if order[0] != wantFirst {
				t.Errorf("reply order %v, want %s first", order, wantFirst)
			}
			p.call("process/terminate", map[string]any{"processId": "s"})
			p.events("s")
		})
	}
}

func TestLongPollWakesOnOutput(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	p.call("process/start", startParams(t, "w", false, "sh", "-c", "sleep 0.2; echo late"))
	start := time.Now()
	var rr struct {
		Chunks []struct {
			Seq   uint64
			Chunk string
		} `json:"chunks"`
	}
	mustUnmarshal(t, p.call("process/read", map[string]any{"processId": "w", "waitMs": 10000}), &rr)
	if len(rr.Chunks) != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("long poll returned %+v after %v", rr, time.Since(start))
	}
	p.events("w")
}

func TestSessionResume(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{SessionTTL: 5 * time.Second})
	url := wsServer(t, s)
	p1 := wsPeer(t, url)
	sid := p1.init()
	p1.call("process/start", startParams(t, "r", false, "sh", "-c", "sleep 0.3; echo after"))
	p1.stop()

	p2 := wsPeer(t, url)
	if code, msg := p2.callErr("initialize", map[string]any{"clientName": "t", "resumeSessionId": "nope"}); code != -32600 || msg != "unknown session id nope" {
		t.Errorf("unknown session: %d %q", code, msg)
	}
	// Detach is asynchronous: retry briefly until the old connection is
	// seen as gone.
	var res struct {
		SessionID string `json:"sessionId"`
	}
	for i := 0; ; i++ {
		w := p2.response(p2.request("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}))
		if w.Error == nil {
			mustUnmarshal(t, w.Result, &res)
			break
		}
		if w.Error.Code != -32010 || i > 100 {
			t.Fatalf("resume: %s", w.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res.SessionID != sid {
		t.Fatalf("resumed session %q, want %q", res.SessionID, sid)
	}
	p2.raw(`{"method":"initialized"}`)
	var rr struct {
		Chunks []struct{ Chunk string } `json:"chunks"`
		Closed bool                     `json:"closed"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for !rr.Closed && time.Now().Before(deadline) {
		mustUnmarshal(t, p2.call("process/read", map[string]any{"processId": "r", "waitMs": 1000}), &rr)
	}
	mustUnmarshal(t, p2.call("process/read", map[string]any{"processId": "r"}), &rr)
	if len(rr.Chunks) != 1 || rr.Chunks[0].Chunk != base64.StdEncoding.EncodeToString([]byte("after\n")) {
		t.Errorf("backlog after resume: %+v", rr)
	}

	// A third connection cannot take the session while p2 holds it.
	p3 := wsPeer(t, url)
	if code, msg := p3.callErr("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}); code != -32010 || !strings.Contains(msg, "already attached") {
		t.Errorf("busy session: %d %q", code, msg)
	}
}

func TestSessionExpiryKillsProcesses(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{SessionTTL: 200 * time.Millisecond})
	url := wsServer(t, s)
	p1 := wsPeer(t, url)
	sid := p1.init()
	p1.call("process/start", startParams(t, "sleeper", false, "sh", "-c", "echo $$; exec sleep 100"))
	w := p1.wait("pid", func(w wire) bool { return w.Method == "process/output" })
	out, _, _ := decodeOutput(t, []wire{w})
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(out)
	}
	p1.stop()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after the session expired", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p2 := wsPeer(t, url)
	if code, _ := p2.callErr("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}); code != -32600 {
		t.Errorf("resume after expiry: %d", code)
	}
}

func TestStdioEndKillsProcesses(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	p.call("process/start", startParams(t, "k", false, "sh", "-c", "echo $$; sleep 100 & wait"))
	w := p.wait("pid", func(w wire) bool { return w.Method == "process/output" })
	out, _, _ := decodeOutput(t, []wire{w})
	pid, _ := strconv.Atoi(strings.TrimSpace(out))
	p.stop()
	if pid <= 0 || syscall.Kill(pid, 0) == nil {
		t.Errorf("process %d survived the end of its stdio session", pid)
	}
}

func TestResultEncodings(t *testing.T) {
	// readResult must produce what encoding/json would.
	code := 3
	rr := readResult{&readResultFixture}
	rr.ExitCode = &code
	got := rr.AppendJSON(nil)
	var a, b map[string]any
	mustUnmarshal(t, got, &a)
	std, _ := json.Marshal(rr.ReadResult)
	mustUnmarshal(t, std, &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("readResult encodes\n%s\nencoding/json says\n%s", got, std)
	}
}

// Over websocket an over-limit message may close that connection, but the
// server and every other connection go on.
func TestWebsocketOverLimitMessage(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{MaxMessageBytes: 1 << 20})
	url := wsServer(t, s)
	other := wsPeer(t, url)
	other.init()
	p := wsPeer(t, url)
	p.raw(`{"id":1,"method":"initialize","params":{"clientName":"` + strings.Repeat("x", 2<<20) + `"}}`)
	for range p.msgs {
	}
	other.call("environment/status", nil)
	again := wsPeer(t, url)
	again.init()
}

// At the session limit a new connection evicts the longest-detached session
// rather than being refused; with every session attached it is refused.
func TestSessionLimit(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{MaxSessions: 2, SessionTTL: time.Minute})
	url := wsServer(t, s)
	a := wsPeer(t, url)
	aID := a.init()
	b := wsPeer(t, url)
	b.init()
	c := wsPeer(t, url)
	if code, msg := c.callErr("initialize", map[string]any{"clientName": "c"}); code != -32600 || !strings.Contains(msg, "too many sessions") {
		t.Errorf("all attached: %d %q", code, msg)
	}
	a.stop()
	var w wire
	for i := 0; i < 100; i++ {
		w = c.response(c.request("initialize", map[string]any{"clientName": "c"}))
		if w.Error == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w.Error != nil {
		t.Fatalf("after a detach: %s", w.raw)
	}
	d := wsPeer(t, url)
	if code, _ := d.callErr("initialize", map[string]any{"clientName": "d", "resumeSessionId": aID}); code != -32600 {
		t.Errorf("the evicted session can still be resumed: %d", code)
	}
}

// Filesystem requests pipelined without waiting for replies see the effect
// of the ones sent before them.
func TestPipelinedFilesystem(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	dir := "file://" + t.TempDir()
	var ids []string
	for i := 0; i < 20; i++ {
		data := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(fmt.Sprint(i), 100000)))
		ids = append(ids, p.request("fs/writeFile", map[string]any{"path": dir + "/f", "dataBase64": data}))
		ids = append(ids, p.request("fs/readFile", map[string]any{"path": dir + "/f"}))
	}
	ids = append(ids, p.request("fs/remove", map[string]any{"path": dir + "/f"}))
	ids = append(ids, p.request("fs/getMetadata", map[string]any{"path": dir + "/f"}))
	for i := 0; i < 40; i += 2 {
		var r struct {
			DataBase64 []byte `json:"dataBase64"`
		}
		p.response(ids[i])
		mustUnmarshal(t, p.response(ids[i+1]).Result, &r)
		if want := strings.Repeat(fmt.Sprint(i/2), 100000); string(r.DataBase64) != want {
			t.Fatalf("read %d saw %.10q…, want the write just before it", i/2, r.DataBase64)
		}
	}
	p.response(ids[40])
	if w := p.response(ids[41]); w.Error == nil || w.Error.Code != -32004 {
		t.Errorf("metadata after remove: %s", w.raw)
	}
}

// Block writes pipelined behind fs/open and ahead of fs/close all land:
// fs/close waits for the earlier requests on the connection (it used to run
// at once on the read loop and close the handle under them).
func TestPipelinedBlocksAndClose(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	dir := t.TempDir()
	for round := range 5 {
		path := fmt.Sprintf("%s/f%d", dir, round)
		var ids []string
		ids = append(ids, p.request("fs/open", map[string]any{"handleId": "w", "path": "file://" + path, "mode": "replace"}))
		for i := range 4 {
			chunk := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(fmt.Sprint(i), 300000)))
			ids = append(ids, p.request("fs/writeBlock", map[string]any{"handleId": "w", "offset": i * 300000, "chunk": chunk}))
		}
		ids = append(ids, p.request("fs/close", map[string]any{"handleId": "w"}))
		for _, id := range ids {
			if w := p.response(id); w.Error != nil {
				t.Fatalf("round %d: %s", round, w.raw)
			}
		}
		data, err := os.ReadFile(path)
		if err != nil || len(data) != 1200000 || data[1199999] != '3' {
			t.Fatalf("round %d: file of %d bytes (%v), want 1200000", round, len(data), err)
		}
	}
}

// process/closeStdin (an extension) gives a pipe's reader end-of-file after
// what was written before it.
func TestCloseStdin(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	sp := startParams(t, "wc", false, "wc", "-c")
	sp["pipeStdin"] = true
	p.call("process/start", sp)
	p.call("process/write", map[string]any{"processId": "wc", "chunk": base64.StdEncoding.EncodeToString([]byte("12345"))})
	p.call("process/closeStdin", map[string]any{"processId": "wc"})
	if code, _ := p.callErr("process/write", map[string]any{"processId": "wc", "chunk": "eA=="}); code != -32603 {
		t.Errorf("write after closeStdin: %d", code)
	}
	out, _, code := decodeOutput(t, p.events("wc"))
	if strings.TrimSpace(out) != "5" || code != 0 {
		t.Errorf("wc -c saw %q (exit %d), want 5", out, code)
	}
	// On a terminal, ^D ends the input of the reader in canonical mode.
	p.call("process/start", startParams(t, "tty", true, "sh", "-c", "cat; echo rc=$?"))
	p.call("process/closeStdin", map[string]any{"processId": "tty"})
	if out, _, code := decodeOutput(t, p.events("tty")); code != 0 || !strings.Contains(out, "rc=0") {
		t.Errorf("cat on a tty after ^D: %q, exit %d", out, code)
	}
	if code, _ := p.callErr("process/closeStdin", map[string]any{"processId": "nope"}); code != -32600 {
		t.Errorf("closeStdin of an unknown process: %d", code)
	}
}

// process/resize and the rows/cols of process/start (extensions) set the
// PTY size the child sees.
func TestResize(t *testing.T) {
	checkGoroutines(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	sp := startParams(t, "r", true, "sh", "-c", "stty size; read x; stty size")
	sp["rows"], sp["cols"] = 30, 100
	p.call("process/start", sp)
	first := p.wait("first size", func(w wire) bool { return w.Method == "process/output" && strings.Contains(w.raw, `"processId":"r"`) })
	if out, _, _ := decodeOutput(t, []wire{first}); !strings.Contains(out, "30 100") {
		t.Errorf("initial size: %q", out)
	}
	p.call("process/resize", map[string]any{"processId": "r", "rows": 50, "cols": 132})
	p.call("process/write", map[string]any{"processId": "r", "chunk": base64.StdEncoding.EncodeToString([]byte("\n"))})
	ev := p.events("r")
	out, _, _ := decodeOutput(t, ev)
	if !strings.Contains(out, "50 132") {
		t.Errorf("after resize: %q", out)
	}
	// The same validation, and the same texts, as process/start's.
	for _, bad := range []struct {
		rows, cols int
		msg        string
	}{
		{0, 80, "`rows` must be an integer from 1 to 1000, got 0"},
		{24, 1001, "`cols` must be an integer from 1 to 1000, got 1001"},
		{65536, 80, "`rows` must be an integer from 1 to 1000, got 65536"},
	} {
		if code, msg := p.callErr("process/resize", map[string]any{"processId": "r", "rows": bad.rows, "cols": bad.cols}); code != -32602 || msg != bad.msg {
			t.Errorf("resize %dx%d: %d %q, want -32602 %q", bad.rows, bad.cols, code, msg, bad.msg)
		}
	}
	p.call("process/start", startParams(t, "pipe", false, "true"))
	if code, _ := p.callErr("process/resize", map[string]any{"processId": "pipe", "rows": 10, "cols": 10}); code != -32600 {
		t.Errorf("resize of a pipe process: %d", code)
	}
	p.events("pipe")
}

// A websocket connection that does not initialize in time is closed; one
// that does is not.
func TestInitTimeout(t *testing.T) {
	checkGoroutines(t)
	// The good connection is accepted and initialized before the idle one
	// is dialed, so by the time the idle one is cut its timer has run
	// out too, had initialize not stopped it: no sleep needed. Its only
	// race is initialize arriving within InitTimeout of its accept, which
	// is why the timeout is a second, not less.
	s := New(Config{InitTimeout: time.Second})
	url := wsServer(t, s)
	good := wsPeer(t, url)
	good.init()
	idle := wsPeer(t, url)
	select {
	case _, ok := <-idle.msgs:
		if ok {
			t.Fatal("unexpected message on the idle connection")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the idle connection was not closed")
	}
	good.call("environment/status", nil)
}

// A session attached to a connection whose peer vanished without closing
// (here: a client that never reads again, so it answers no ping) is taken
// over by a resume once a ping goes unanswered, instead of being busy
// until TCP notices; the silent connection is cut.
func TestResumeTakesSessionFromSilentConnection(t *testing.T) {
	checkGoroutines(t)
	s := New(Config{})
	url := wsServer(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	silent, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.CloseNow()
	if err := silent.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"initialize","params":{"clientName":"t"}}`)); err != nil {
		t.Fatal(err)
	}
	_, reply, err := silent.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Result struct {
			SessionID string `json:"sessionId"`
		} `json:"result"`
	}
	mustUnmarshal(t, reply, &res)
	sid := res.Result.SessionID
	// From here on the silent client reads nothing.

	p := wsPeer(t, url)
	start := time.Now()
	var got struct {
		SessionID string `json:"sessionId"`
	}
	mustUnmarshal(t, p.call("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}), &got)
	if got.SessionID != sid {
		t.Fatalf("resumed %q, want %q", got.SessionID, sid)
	}
	t.Logf("session taken over after %v", time.Since(start))
	// The silent connection was cut: reading it now fails.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if _, _, err := silent.Read(rctx); err == nil || rctx.Err() != nil {
		t.Errorf("the silent connection is still open: %v", err)
	}
	// A connection that answers pings keeps its session.
	p2 := wsPeer(t, url)
	if code, _ := p2.callErr("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}); code != -32010 {
		t.Errorf("resume of a session held by a live connection: %d, want -32010", code)
	}
}
