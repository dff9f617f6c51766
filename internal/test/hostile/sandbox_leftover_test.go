package hostile

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNothingLeftAfterOrderlyEnd is the repro: a stdio server does
// fs/writeFile under codex's workspace-write policy and ends within 0.5 s
// (its stdin closes, or SIGTERM, or SIGINT). The mount points of the
// workspace's missing protected paths (.git, .codex, .agents, .aws), which
// its warm fs helper held, must be gone when it has exited; before the
// fix they stayed for good. Then the same with a sandboxed command still
// running when the server is told to end.
func TestNothingLeftAfterOrderlyEnd(t *testing.T) {
	for _, m := range sbxModes {
		for _, end := range []string{"stdin EOF", "SIGTERM", "SIGINT"} {
			for _, withCommand := range []bool{false, true} {
				name := m.name + "/" + strings.ReplaceAll(end, " ", "-")
				if withCommand {
					name += "/command"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel() // each has its own server and fixture, and mostly waits
					enterMode(t, m)
					fx := newFixture(t, m)
					orderlyEnd(t, m, fx, end, withCommand)
				})
			}
		}
	}
}

func orderlyEnd(t *testing.T, m sbxMode, fx *fixture, end string, withCommand bool) {
	cmd := exec.Command(sbxServer, "--listen", "stdio", "--log-level", "warn")
	cmd.Dir = sbxBaseDir
	cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(sbxBaseDir, "srvtmp"))
	if m.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(m.uid), Gid: uint32(m.uid)}}
		cmd.Env = append(cmd.Env, "HOME=/nonexistent", "USER=nobody")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("server stderr:\n%s", stderr.String())
		}
	})
	replies := make(chan map[string]json.RawMessage, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			var msg map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &msg) == nil && msg["id"] != nil {
				replies <- msg
			}
		}
		close(replies)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	send := func(v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(what string) map[string]json.RawMessage {
		t.Helper()
		select {
		case r, ok := <-replies:
			if !ok {
				t.Fatalf("%s: the server closed stdout", what)
			}
			if r["error"] != nil {
				t.Fatalf("%s: %s", what, r["error"])
			}
			return r
		case <-time.After(opTimeout):
			t.Fatalf("%s: no reply within %v", what, opTimeout)
		}
		return nil
	}
	send(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{"clientName": "leftover"}})
	reply("initialize")
	send(map[string]any{"jsonrpc": "2.0", "method": "initialized", "params": map[string]any{}})
	entries := workspaceWriteEntries()
	if withCommand {
		send(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "process/start", "params": map[string]any{
			"processId": "long", "argv": []string{"sleep", "1000"}, "cwd": fileURI(fx.WORK), "tty": false,
			"env": map[string]string{"PATH": "/usr/bin:/bin"}, "sandbox": procContext(fx.WORK, entries),
		}})
		reply("process/start")
	}
	send(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "fs/writeFile", "params": map[string]any{
		"path": fileURI(fx.w("f.txt")), "dataBase64": base64.StdEncoding.EncodeToString(make([]byte, 4096)),
		"sandbox": fsContext(fx.WORK, entries),
	}})
	reply("fs/writeFile")
	var held []string
	for _, p := range fx.protected {
		if _, err := os.Lstat(p); err == nil {
			held = append(held, filepath.Base(p))
		}
	}
	switch end {
	case "stdin EOF":
		stdin.Close()
	case "SIGTERM":
		_ = cmd.Process.Signal(syscall.SIGTERM)
	case "SIGINT":
		_ = cmd.Process.Signal(syscall.SIGINT)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("exit after %s: %v", end, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not exit within 60 s of %s", end)
	}
	t.Logf("held when the server was told to end: %v", held)
	var left []string
	for _, p := range fx.protected {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, filepath.Base(p))
		}
	}
	if len(left) > 0 {
		t.Errorf("LEFTOVER: %s on the host after the server's orderly exit (%s)", strings.Join(left, ", "), end)
	}
	if b, err := os.ReadFile(fx.w("f.txt")); err != nil || len(b) != 4096 {
		t.Errorf("the write did not happen: %d bytes, %v", len(b), fmt.Sprint(err))
	}
}
