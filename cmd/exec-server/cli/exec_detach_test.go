//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/cmd/exec-server/cli"
	"github.com/execgo/exec-server/protocol"
)

// The detach keys end exec's connection (not only its terminal loop): the
// session is then detached on the server, so another client resumes it at
// once and finds the command still running.
func TestExecDetachReleasesSession(t *testing.T) {
	needServer(t)
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	defer tty.Close()
	var out syncBuf
	go io.Copy(&out, master)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	codeCh := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		codeCh <- cli.Main(ctx, "exec", []string{"--url", serverURL, "-it", "--", "sh", "-c", "echo ready; sleep 30"}, tty, tty, &stderr)
	}()
	waitFor(t, &out, "ready")
	if _, err := master.Write([]byte{0x10, 0x11}); err != nil { // ctrl-p, ctrl-q
		t.Fatal(err)
	}
	select {
	case code := <-codeCh:
		if code != 0 {
			t.Fatalf("exit %d; stderr %q", code, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("exec did not detach")
	}
	m := regexp.MustCompile(`in session (\S+) until`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no session id in %q", stderr.String())
	}
	// A session still attached to exec's connection cannot be resumed.
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	var c *client.Client
	for {
		c, err = client.Dial(rctx, serverURL, client.Options{ResumeSession: m[1]})
		if err == nil {
			break
		}
		if rctx.Err() != nil {
			t.Fatalf("session %s not resumable after detaching: %v", m[1], err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer c.Close()
	procs, err := c.ListProcesses(ctx)
	if err != nil || len(procs) != 1 {
		t.Fatalf("processes of the detached session: %+v, %v", procs, err)
	}
	after := uint64(0)
	res, err := c.ReadProcess(ctx, protocol.ReadParams{ProcessID: procs[0].ProcessID, AfterSeq: &after})
	if err != nil || res.Exited {
		t.Errorf("the detached command: %+v, %v; want it running", res, err)
	}
	if !strings.Contains(stderr.String(), "detached") {
		t.Errorf("stderr %q", stderr.String())
	}
}
