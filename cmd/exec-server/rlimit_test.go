package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stdioChildOutput starts the server binary on stdio from a shell that
// first runs prelude (e.g. lowers a limit), runs script in a child started
// through the server and returns the child's stdout.
func stdioChildOutput(t *testing.T, prelude, script string, serverArgs ...string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", prelude+`; exec "$0" "$@"`, binary)
	cmd.Args = append(cmd.Args, append([]string{"--listen", "stdio"}, serverArgs...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), serverEnv)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	argv, _ := json.Marshal([]string{"/bin/sh", "-c", script})
	for _, line := range []string{
		`{"id":1,"method":"initialize","params":{"clientName":"rlimit-test"}}`,
		`{"method":"initialized"}`,
		`{"id":2,"method":"process/start","params":{"processId":"p","argv":` + string(argv) + `,"cwd":"file://` + cmd.Dir + `","env":{},"tty":false}}`,
	} {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- l
		}
	}()
	var got strings.Builder
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait() // the stderr copy is done only then
				t.Fatalf("server stdout closed; stderr: %s", stderr.String())
			}
			var m struct {
				Method string `json:"method"`
				Error  json.RawMessage
				Params struct {
					Stream string `json:"stream"`
					Chunk  string `json:"chunk"`
				} `json:"params"`
			}
			_ = json.Unmarshal([]byte(l), &m)
			switch {
			case m.Error != nil:
				t.Fatalf("error reply: %s", l)
			case m.Method == "process/output" && m.Params.Stream == "stdout":
				b, _ := base64.StdEncoding.DecodeString(m.Params.Chunk)
				got.Write(b)
			case m.Method == "process/exited" || m.Method == "process/closed":
				_ = stdin.Close()
				return got.String()
			}
		case <-deadline:
			t.Fatalf("no exit from the child; output so far %q; stderr: %s", got.String(), stderr.String())
		}
	}
}

// TestChildKeepsSoftFileLimit: Go raises its own soft RLIMIT_NOFILE at start
// and restores the original for children, unless the program calls
// Setrlimit itself. A child must see the soft limit the server was started
// with, not the hard one, through the subreaper init and without it.
func TestChildKeepsSoftFileLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	soft := uint64(256)
	if rl.Max <= soft+1 {
		t.Skipf("hard RLIMIT_NOFILE %d too low to tell a lowered soft limit from it", rl.Max)
	}
	for _, contain := range []bool{true, false} {
		t.Run(fmt.Sprintf("contain-descendants=%v", contain), func(t *testing.T) {
			out := stdioChildOutput(t, fmt.Sprintf("ulimit -Sn %d", soft), "ulimit -Sn",
				fmt.Sprintf("--contain-descendants=%v", contain))
			n, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
			if err != nil || n != soft {
				t.Fatalf("child's ulimit -Sn = %q, want the server parent's %d (hard limit %d)", out, soft, rl.Max)
			}
		})
	}
}
