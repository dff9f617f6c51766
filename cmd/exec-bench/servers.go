package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/internal/tailbuf"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/transport"
)

// transportKind names how a client reaches a server.
type transportKind string

const (
	stdio     transportKind = "stdio"
	webSocket transportKind = "ws"
)

// serverProfileDir (--server-pprof), when set, is where our servers write
// their profiles; currentWorkload and profileSeq name each server's
// directory. Workloads run one at a time, from main.
var (
	serverProfileDir string
	currentWorkload  string
	profileSeq       int
)

// side is one server under test: a binary run as a separate process.
type side struct {
	name string
	bin  string
	ref  bool
	// env, when set, replaces the environment the side's server gets (the
	// sandboxed workloads give the reference its own CODEX_HOME).
	env []string
}

// server is a running server process. Over stdio it is started by its
// one connection (dial), over websocket by start.
type server struct {
	name string
	cmd  *exec.Cmd
	url  string // websocket only
	home string // the reference's CODEX_HOME, removed by close
	// stdio: dial has been called (there is one connection).
	dialled bool
	tr      transportKind
	waited  chan struct{} // closed when the process has been waited for
	stderr  *tailbuf.Buffer
	sdk     *client.Client // stdio: the SDK's connection, which waits for the process
	once    sync.Once
}

// command is the side's server command on tr.
func (sd side) command(tr transportKind, extra ...string) (*exec.Cmd, string, error) {
	listen := "stdio"
	if tr == webSocket {
		listen = "ws://127.0.0.1:0"
	}
	var args []string
	if sd.ref {
		args = append(args, "exec-server")
	}
	args = append(append(args, "--listen", listen), extra...)
	cmd := exec.Command(sd.bin, args...)
	cmd.Env = os.Environ()
	if sd.env != nil {
		cmd.Env = sd.env
	}
	if !sd.ref && serverProfileDir != "" {
		profileSeq++
		cmd.Env = append(cmd.Env, "EXEC_SERVER_DEBUG_PROFILE="+filepath.Join(serverProfileDir,
			fmt.Sprintf("%s-%s-%d", currentWorkload, tr, profileSeq)))
	}
	home := ""
	if sd.ref && sd.env == nil {
		h, err := os.MkdirTemp("", "exec-bench-codex-home-")
		if err != nil {
			return nil, "", err
		}
		home = h
		cmd.Env = append(cmd.Env, "CODEX_HOME="+home, "RUST_LOG=error")
	}
	return cmd, home, nil
}

// start prepares a server on tr: a websocket server is started and its
// URL read; a stdio one starts with its connection (dial).
func (sd side) start(ctx context.Context, tr transportKind, extra ...string) (*server, error) {
	cmd, home, err := sd.command(tr, extra...)
	if err != nil {
		return nil, err
	}
	s := &server{name: sd.name, cmd: cmd, home: home, tr: tr, waited: make(chan struct{}), stderr: &tailbuf.Buffer{Max: 8192}}
	cmd.Stderr = s.stderr
	if tr == stdio {
		return s, nil
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		s.close()
		return nil, fmt.Errorf("start %s: %w", sd.bin, err)
	}
	go func() { _ = cmd.Wait(); close(s.waited) }()
	// The bound URL is the first stdout line; the rest is drained so the
	// server never blocks on a full pipe.
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, br)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "ws://") {
			s.close()
			return nil, fmt.Errorf("%s did not print its ws URL (got %q); stderr: %s", sd.name, line, s.stderr.String())
		}
		s.url = line
	case <-ctx.Done():
		s.close()
		return nil, fmt.Errorf("%s: waiting for the ws URL: %w", sd.name, ctx.Err())
	}
	return s, nil
}

// pid is the server's process id, for its RSS and CPU time; 0 before a
// stdio server's connection started it.
func (s *server) pid() int {
	if s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// sdkOptions: the bench measures servers, so the client never gives up
// on a slow one by itself.
var sdkOptions = client.Options{ClientName: "exec-bench", ReconnectTimeout: -1, KeepAlive: -1, IdleProbe: -1}

// dial connects the SDK: a new websocket connection, or the stdio
// server's one connection (which starts it).
func (s *server) dial(ctx context.Context) (*client.Client, error) {
	if s.tr == webSocket {
		return client.NewClient(ctx, s.dialWebSocket, sdkOptions)
	}
	if s.dialled {
		return nil, errors.New("stdio: one connection per server")
	}
	s.dialled = true
	c, err := client.DialStdio(ctx, s.cmd, sdkOptions)
	if err != nil {
		close(s.waited) // DialStdio waited for it
		return nil, err
	}
	s.sdk = c
	return c, nil
}

// dialRaw connects a protocol-level client (rawConn) for what the SDK does
// not offer: a client that stops reading, sandbox policies.
func (s *server) dialRaw(ctx context.Context) (*rawConn, error) {
	var st jsonrpc.Stream
	if s.tr == webSocket {
		var err error
		if st, err = s.dialWebSocket(ctx); err != nil {
			return nil, err
		}
	} else {
		if s.dialled {
			return nil, errors.New("stdio: one connection per server")
		}
		s.dialled = true
		in, err := s.cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := s.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		go func() { _ = s.cmd.Wait(); close(s.waited) }()
		st = transport.NewStdio(out, in, in, 1<<30)
	}
	rc := newRawConn(st)
	if err := rc.initialize(ctx); err != nil {
		rc.Close()
		return nil, err
	}
	return rc, nil
}

// dialWebSocket opens a websocket stream to the server
// (transport.WebSocket sends a large message in frames the reference
// accepts).
func (s *server) dialWebSocket(ctx context.Context) (jsonrpc.Stream, error) {
	ws, _, err := websocket.Dial(ctx, s.url, nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(1 << 30)
	return transport.NewWebSocket(ws, s.url), nil
}

// close stops the server: its stdio connection ends (EOF), or SIGTERM;
// SIGKILL if it is still there after two seconds. Both servers kill their
// children when they exit.
func (s *server) close() { s.once.Do(s.stop) }

func (s *server) stop() {
	if s.sdk != nil {
		// Close ends stdin and waits for the server (killing it after 5 s).
		_ = s.sdk.Close()
		close(s.waited)
	} else if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.waited:
		case <-time.After(2 * time.Second):
			_ = s.cmd.Process.Kill()
			select {
			case <-s.waited:
			case <-time.After(5 * time.Second):
			}
		}
	}
	if s.home != "" {
		_ = os.RemoveAll(s.home)
	}
}
