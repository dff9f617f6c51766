package codexref

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/plantest"
	"github.com/execgo/exec-server/internal/test/testbin"
)

// HoldSlashTmp has this project's exec-server hold the host's mount points
// of /tmp's missing protected paths (/tmp/.git, …), with a sandboxed sleep
// whose policy writes /tmp, until the returned func is called. A test
// calls it before the reference runs a sandbox that writes /tmp (codex -s
// workspace-write, or a slash_tmp policy): the reference makes those mount
// points for its sandbox and removes them when it exits, without regard
// for anyone, and removed them from under the sandboxes of the host's
// other test processes (packages run in parallel), which failed closed
// (hostile's 27_bounded in CI: "mount /tmp/.git: protected path missing
// and its mount point could not be made"). Found made, they are neither
// made nor removed by the reference; servers of this project share them
// among themselves (sandbox/protected_linux.go).
func HoldSlashTmp(t testing.TB) (release func()) {
	t.Helper()
	bin, err := testbin.ExecServer()
	if err != nil {
		t.Fatalf("holding /tmp's mount points: build exec-server: %v", err)
	}
	ws := Scratch(t, "exec-server-hold", "ws-")
	cmd := exec.Command(bin, "--listen", "stdio")
	cmd.Env = os.Environ()
	if os.Getenv(testbin.SandboxStateEnv) == "" {
		cmd.Env = append(cmd.Env, testbin.SandboxStateEnv+"="+t.TempDir())
	}
	cmd.Stderr = io.Discard
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("holding /tmp's mount points: %v", err)
	}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		defer close(exited)
		// codex's workspace-write, /tmp writable (slash_tmp).
		sandbox := plantest.Context([]string{
			plantest.Special("root", "read"), plantest.Special("project_roots", "write"), plantest.Special("slash_tmp", "write"),
		}, `,"cwd":"`+plantest.URI(ws)+`","workspaceRoots":["`+plantest.URI(ws)+`"]`)
		started <- holdStart(in, out, sandbox, ws)
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	stop := func() {
		in.Close() // stdin EOF: the server ends its processes and removes what it made
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	select {
	case err = <-started:
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("no answer in 30 s")
	}
	if err != nil {
		stop()
		t.Fatalf("holding /tmp's mount points: %v", err)
	}
	return stop
}

// holdStart initializes the server on in/out and starts the sandboxed
// sleep; it returns when process/start is answered.
func holdStart(in io.Writer, out io.Reader, sandbox, ws string) error {
	for _, m := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientName":"exec-server-hold"}}`,
		`{"jsonrpc":"2.0","method":"initialized","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"process/start","params":{"processId":"hold","argv":["sleep","3600"],` +
			`"cwd":"` + plantest.URI(ws) + `","env":{"PATH":"/usr/bin:/bin"},"tty":false,"sandbox":` + sandbox + `}}`,
	} {
		if _, err := io.WriteString(in, m+"\n"); err != nil {
			return err
		}
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || len(r.ID) == 0 {
			continue
		}
		if r.Error != nil {
			return fmt.Errorf("%s: error %d: %s", r.ID, r.Error.Code, r.Error.Message)
		}
		if string(r.ID) == "2" {
			return nil
		}
	}
	return fmt.Errorf("the server ended: %v", sc.Err())
}
