//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/cmd/exec-server/cli"
)

// exec -it on a real local terminal: raw mode while it runs (keystrokes
// such as Ctrl-C go to the remote program), the remote exit code as ours,
// and the terminal's settings restored afterwards.
func TestExecInteractiveTerminal(t *testing.T) {
	needServer(t)
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	defer tty.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}

	// Everything the remote side prints arrives on master.
	var out syncBuf
	go io.Copy(&out, master) // ends when the test closes master

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	codeCh := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		codeCh <- cli.Main(ctx, "exec", []string{"--url", serverURL, "-it", "--", "sh", "-c",
			`trap 'echo caught-int; exit 3' INT; echo ready; read line; echo "got $line"; while :; do sleep 0.05; done`}, tty, tty, &stderr)
	}()
	waitFor(t, &out, "ready")
	// In raw mode the local terminal does not turn ^C into SIGINT for us;
	// the byte travels to the remote terminal, which interrupts sh.
	raw, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("local terminal not in raw mode while exec -it runs: lflag %#x", raw.Lflag)
	}
	master.Write([]byte("hello\r"))
	waitFor(t, &out, "got hello")
	master.Write([]byte{3}) // Ctrl-C
	waitFor(t, &out, "caught-int")
	select {
	case code := <-codeCh:
		if code != 3 {
			t.Errorf("exit code %d, want 3 (stderr %q)", code, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("exec -it did not end")
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Errorf("terminal settings not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

// syncBuf is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the pty output holds want.
func waitFor(t *testing.T, out *syncBuf, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(out.String(), want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pty output %q does not contain %q", out.String(), want)
}
