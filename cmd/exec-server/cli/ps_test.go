package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// detachedSession starts processes in a new session over a raw websocket
// and drops the connection, leaving the session detached (the SDK's Close
// would terminate its processes).
func detachedSession(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, serverURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	call := func(id int, method string, params any) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
		if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(msg, &r) == nil && r.ID == id && (r.Result != nil || r.Error != nil) {
				if r.Error != nil {
					t.Fatalf("%s: %s", method, r.Error)
				}
				return r.Result
			}
		}
	}
	var init struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(call(1, "initialize", map[string]any{"clientName": "ps-test"}), &init); err != nil {
		t.Fatal(err)
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"method":"initialized","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	cwd := "file://" + t.TempDir()
	env := map[string]string{"PATH": "/usr/bin:/bin"}
	call(2, "process/start", map[string]any{"processId": "sleeper", "argv": []string{"sleep", "30"}, "cwd": cwd, "env": env, "tty": false})
	call(3, "process/start", map[string]any{"processId": "done", "argv": []string{"sh", "-c", "exit 4"}, "cwd": cwd, "env": env, "tty": true})
	for i := 4; ; i++ {
		var r struct {
			Closed bool `json:"closed"`
		}
		_ = json.Unmarshal(call(i, "process/read", map[string]any{"processId": "done", "waitMs": 1000}), &r)
		if r.Closed {
			break
		}
	}
	t.Cleanup(func() {
		// Resume it once more to end the sleeper (the server kills it
		// at the session's TTL anyway).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, _, err := websocket.Dial(ctx, serverURL, nil); err == nil {
			b, _ := json.Marshal(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "x", "resumeSessionId": init.SessionID}})
			_ = c.Write(ctx, websocket.MessageText, b)
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"method":"initialized","params":{}}`))
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"id":2,"method":"process/terminate","params":{"processId":"sleeper"}}`))
			_, _, _ = c.Read(ctx)
			_, _, _ = c.Read(ctx)
			c.CloseNow()
		}
	})
	return init.SessionID
}

func TestPs(t *testing.T) {
	needServer(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // no session remembered
	sid := detachedSession(t)
	var out string
	var code int
	// The connection's close reaches the server asynchronously: retry
	// while the session is still attached.
	for range 100 {
		out, code = run(t, "", "", "ps", "--url", serverURL, "--session", sid)
		if !strings.Contains(out, "already attached") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("ps: exit %d\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	var header, sleeper, done string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "PROCESS"):
			header = l
		case strings.HasPrefix(l, "sleeper"):
			sleeper = l
		case strings.HasPrefix(l, "done"):
			done = l
		}
	}
	if !strings.Contains(header, "STATE") || !strings.Contains(sleeper, "running") || !strings.Contains(sleeper, "sleep 30") ||
		!strings.Contains(done, "closed") || !strings.Contains(done, " yes ") || !strings.Contains(done, " 4 ") {
		t.Errorf("ps output:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"ps", "--url", serverURL}, 2, "no session: give --session ID"},
		{[]string{"ps", "--url", serverURL, "--session", "no-such-session"}, 255, "unknown session id"},
		{[]string{"ps", "--url", serverURL, "--session", sid, "extra"}, 2, "unexpected argument"},
	} {
		t.Setenv("EXEC_SERVER_SESSION", "")
		out, code := run(t, "", "", tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

func TestExecTimeout(t *testing.T) {
	needServer(t)
	out, code := run(t, "", "", "exec", "--url", serverURL, "--timeout", "200ms", "--", "sh", "-c", "echo started; sleep 30")
	if code != 124 || !strings.Contains(out, "started") || !strings.Contains(out, "timed out after 200ms") {
		t.Errorf("timed out: exit %d\n%s", code, out)
	}
	out, code = run(t, "", "", "exec", "--url", serverURL, "--timeout", "1m", "--", "sh", "-c", "exit 5")
	if code != 5 || strings.Contains(out, "timed out") {
		t.Errorf("in time: exit %d\n%s", code, out)
	}
	if out, code = run(t, "", "", "exec", "--url", serverURL, "--timeout", "-1s", "--", "true"); code != 2 {
		t.Errorf("negative timeout: exit %d\n%s", code, out)
	}
}
