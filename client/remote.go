package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/remote/harness"
)

// DialRemote connects to an executor in remote mode (`exec-server
// --remote` or codex's own) through its environment registry and
// rendezvous: POST {registryURL}/cloud/environment/{environmentID}/connect
// with token as the bearer, pin the executor key from the answer, dial the
// rendezvous websocket and run the Noise hybridIK handshake. The session
// is then the same as over a local connection. ctx bounds the dial and the
// initialize handshake.
//
// opts.HTTPClient, if set, makes the registry call and the websocket dial
// (the default follows no redirects, as codex); opts.Token and opts.Header
// are not used (token is the registry credential).
//
// A remote-specific auth failure (the registry refused token, or the
// executor's own registry credential was rejected) satisfies
// harness.IsAuth.
func DialRemote(ctx context.Context, registryURL, environmentID, token string, opts Options) (*Client, error) {
	d, err := harness.NewDialer(registryURL, environmentID, token, harness.Options{
		HTTPClient: opts.HTTPClient,
		Logger:     opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("exec-server client: %w", err)
	}
	st, err := d.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("exec-server client: %w", err)
	}
	// TODO(lead): once NewClient(ctx, Dialer, opts) is merged from the
	// engine branch, this becomes
	//	NewClient(ctx, func(ctx context.Context) (jsonrpc.Stream, error) { return d.Dial(ctx) }, opts)
	// so that a dropped stream redials (a fresh /connect each time) and
	// resumes the session. Until then a lost stream is final, as over
	// stdio.
	c, err := NewConn(ctx, newStreamRWC(st), opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}

// streamRWC shows a jsonrpc.Stream as newline-delimited JSON, the framing
// NewConn speaks. Compact JSON has no raw newline, so lines and messages
// are the same thing.
type streamRWC struct {
	st     jsonrpc.Stream
	ctx    context.Context
	cancel context.CancelFunc
	rbuf   []byte // the rest of the message being read, with its newline

	wmu  sync.Mutex
	wbuf []byte // an incomplete line
}

func newStreamRWC(st jsonrpc.Stream) *streamRWC {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamRWC{st: st, ctx: ctx, cancel: cancel}
}

func (s *streamRWC) Read(p []byte) (int, error) {
	if len(s.rbuf) == 0 {
		m, err := s.st.Read(s.ctx)
		if err != nil {
			return 0, err
		}
		s.rbuf = append(m, '\n')
	}
	n := copy(p, s.rbuf)
	s.rbuf = s.rbuf[n:]
	return n, nil
}

func (s *streamRWC) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf = append(s.wbuf, p...)
	rest := s.wbuf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSpace(rest[:i])
		rest = rest[i+1:]
		if len(line) == 0 {
			continue
		}
		more := hasLine(rest)
		if err := s.st.Write(s.ctx, line, more); err != nil {
			s.wbuf = s.wbuf[:0]
			return 0, err
		}
	}
	s.wbuf = s.wbuf[:copy(s.wbuf, rest)]
	return len(p), nil
}

// hasLine reports whether b holds a complete non-blank line: only then
// may a message wait in its record for the next (more), or it would wait
// for a line that is not there yet.
func hasLine(b []byte) bool {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(bytes.TrimSpace(b[:i])) > 0 {
			return true
		}
		b = b[i+1:]
	}
}

func (s *streamRWC) Close() error {
	s.cancel()
	return s.st.Close()
}
