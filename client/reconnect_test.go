package client_test

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
)

// proxy forwards TCP connections to target and can cut them all at once,
// as a network failure would.
type proxy struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) url() string { return "ws://" + p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(out, in); out.Close() }()
		go func() { defer p.wg.Done(); io.Copy(in, out); in.Close() }()
	}
}

// cut closes every proxied connection abruptly (no websocket close frame).
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, as a dropped network would look
		}
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func TestWebsocketBasics(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		c, err := client.Dial(ctx, s.listen(t), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.SessionID() == "" || c.Info().PlatformOS != "linux" {
			t.Errorf("session %q, info %+v", c.SessionID(), c.Info())
		}
		if st, err := c.EnvironmentStatus(ctx); st != "ready" || err != nil {
			t.Errorf("EnvironmentStatus = %q, %v", st, err)
		}
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", "echo over websocket"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(p.Stdout())
		if string(out) != "over websocket\n" || err != nil {
			t.Errorf("output %q, %v", out, err)
		}
	})
}

// The fault test: the TCP connection under the websocket is cut twice while
// a process streams output; the client reconnects, resumes its session and
// the output is complete and in order.
func TestReconnectMidStreamLosesNothing(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		c, err := client.Dial(ctx, px.url(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		session := c.SessionID()
		const lines = 100000 // ~590 KB, in 50 bursts 10 ms apart
		script := `awk 'BEGIN{for(i=1;i<=100000;i++){print i; if(i%2000==0){fflush(); system("sleep 0.01")}}}'`
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sh", "-c", script}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, 4096)
		cuts := []int{50 << 10, 250 << 10}
		for {
			n, err := p.Stdout().Read(buf)
			got = append(got, buf[:n]...)
			if len(cuts) > 0 && len(got) >= cuts[0] {
				px.cut()
				cuts = cuts[1:]
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(got), err)
			}
		}
		checkSeq(t, got, 1, lines)
		if code, err := p.Wait(ctx); code != 0 || err != nil {
			t.Fatalf("Wait = %d, %v", code, err)
		}
		if n := px.connections(); n < 3 {
			t.Errorf("%d connections through the proxy, want at least 3 (two reconnects)", n)
		}
		if c.SessionID() != session {
			t.Errorf("session changed from %s to %s", session, c.SessionID())
		}
		// The client still works after the reconnects.
		q, err := c.Start(ctx, client.Cmd{Argv: []string{"echo", "after"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := io.ReadAll(q.Stdout()); string(out) != "after\n" {
			t.Errorf("after reconnects: %q", out)
		}
	})
}

// Stdin writes in flight during a cut are repeated with the same writeId:
// the process sees every byte exactly once.
func TestReconnectStdinExactlyOnce(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		c, err := client.Dial(ctx, px.url(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const n = 200
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"head", "-c", "200"}, Env: shEnv, StdinPipe: true})
		if err != nil {
			t.Fatal(err)
		}
		// Cut from another goroutine so that some cuts land while a write
		// is in flight (sent, not yet answered).
		written := make(chan int, n)
		cutDone := make(chan struct{})
		go func() {
			defer close(cutDone)
			for i := range written {
				if i == n/4 || i == n/2 || i == 3*n/4 {
					px.cut()
				}
			}
		}()
		for i := range n {
			written <- i
			if err := p.Write(ctx, []byte{'a' + byte(i%26)}); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		close(written)
		<-cutDone
		out, err := io.ReadAll(p.Stdout())
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for i := range n {
			want = append(want, 'a'+byte(i%26))
		}
		if string(out) != string(want) {
			t.Errorf("process read %q, want %q", out, want)
		}
	})
}

func TestTokenAuth(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		url := s.listen(t, "--ws-auth", "capability-token", "--ws-token-file", tokenFile)
		ctx := testCtx(t)
		if _, err := client.Dial(ctx, url, client.Options{Token: "wrong"}); err == nil {
			t.Fatal("Dial with a wrong token succeeded")
		} else {
			var ae *client.AuthError
			if !errors.As(err, &ae) || ae.Status != 401 {
				t.Errorf("wrong token: %v, want an *AuthError with 401", err)
			}
		}
		c, err := client.Dial(ctx, url, client.Options{Token: "s3cret"})
		if err != nil {
			t.Fatalf("Dial with the right token: %v", err)
		}
		c.Close()
	})
}

// A file opened for reading survives a reconnect (its handle is reopened);
// one opened for writing reports the loss instead of truncating on reopen.
func TestReconnectFileHandles(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		c, err := client.Dial(ctx, px.url(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dir := t.TempDir()
		if err := os.WriteFile(dir+"/r", []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := c.Open(ctx, dir+"/r")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		w, err := c.Create(ctx, dir+"/w")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		buf := make([]byte, 3)
		if _, err := r.ReadAt(buf, 2); err != nil || string(buf) != "234" {
			t.Fatalf("ReadAt = %q, %v", buf, err)
		}
		px.cut()
		if _, err := r.ReadAt(buf, 5); err != nil || string(buf) != "567" {
			t.Errorf("ReadAt after a reconnect = %q, %v", buf, err)
		}
		if _, err := w.WriteAt([]byte("x"), 0); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("WriteAt after a reconnect: %v, want ErrConnectionLost", err)
		}
	})
}

// When the connection cannot be re-established in time, everything fails
// with ErrConnectionLost rather than hanging.
func TestReconnectGivesUp(t *testing.T) {
	each(t, func(t *testing.T, s server) {
		ctx := testCtx(t)
		px := newProxy(t, strings.TrimPrefix(s.listen(t), "ws://"))
		c, err := client.Dial(ctx, px.url(), client.Options{ReconnectTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := c.Start(ctx, client.Cmd{Argv: []string{"sleep", "5"}, Env: shEnv})
		if err != nil {
			t.Fatal(err)
		}
		px.ln.Close() // no more connections
		px.cut()
		if _, err := p.Wait(ctx); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("Wait after giving up: %v, want ErrConnectionLost", err)
		}
		if _, err := io.ReadAll(p.Stdout()); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("reading after giving up: %v, want ErrConnectionLost", err)
		}
		if _, err := c.Start(ctx, client.Cmd{Argv: []string{"true"}}); !errors.Is(err, client.ErrConnectionLost) {
			t.Errorf("Start after giving up: %v, want ErrConnectionLost", err)
		}
	})
}

// A server that restarted does not know the session: the client says so.
func TestReconnectSessionLost(t *testing.T) {
	bin, err := ours()
	if err != nil {
		t.Skip(err)
	}
	s := server{name: "ours", bin: bin, env: func(testing.TB) []string { return os.Environ() }}
	ctx := testCtx(t)
	first := s.command(t, "ws://127.0.0.1:0")
	url := startListening(t, first)
	c, err := client.Dial(ctx, url, client.Options{ReconnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Start(ctx, client.Cmd{Argv: []string{"sleep", "5"}, Env: shEnv})
	if err != nil {
		t.Fatal(err)
	}
	first.Process.Kill()
	first.Wait()
	startListening(t, s.command(t, url)) // a new server on the same address
	if _, err := p.Wait(ctx); !errors.Is(err, client.ErrSessionLost) {
		t.Errorf("Wait after the server restarted: %v, want ErrSessionLost", err)
	}
}
