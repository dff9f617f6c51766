// Package transport moves whole JSON-RPC messages over concrete carriers:
// newline-delimited JSON on stdio and websocket messages. Each is a
// jsonrpc.Stream usable by either end: NewStdio over any reader and writer
// (a server's stdin and stdout, or a client's pipes to a child), and
// NewHandler (accepting) or DialWebSocket (dialling) for websockets. It
// knows nothing about what the messages mean.
package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/execgo/exec-server/jsonrpc"
)

// Stdio frames messages as lines: one compact JSON message per line, both
// ways. Blank lines are skipped and a trailing CR is dropped.
type Stdio struct {
	r     *bufio.Reader
	limit int
	name  string
	// sizeHint is the length of the last line over 64 KiB (Read is
	// called by one goroutine): a long line's buffer grows to it at once
	// rather than doubling, which cost an 11 MB fs/writeFile about three
	// times its size in allocations and copies. A shorter long line
	// lowers it again.
	sizeHint int

	wmu sync.Mutex
	w   *bufio.Writer
	c   io.Closer
}

// DefaultMaxMessageBytes bounds one incoming message when the caller gives
// no limit (the project's default on both transports).
const DefaultMaxMessageBytes = 64 << 20

// NewStdio reads messages from r and writes them to w. limit bounds one
// message (<= 0 means DefaultMaxMessageBytes); a longer line is read
// through to its end and reported as a *jsonrpc.DecodeError so the
// connection can answer it and go on. closer, if not nil, is closed by
// Close.
func NewStdio(r io.Reader, w io.Writer, closer io.Closer, limit int) *Stdio {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	return &Stdio{
		r:     bufio.NewReaderSize(r, 64<<10),
		w:     bufio.NewWriterSize(w, 64<<10),
		c:     closer,
		limit: limit,
		name:  "exec-server stdio",
	}
}

// Read returns the next non-blank line without its line ending.
func (s *Stdio) Read(ctx context.Context) ([]byte, error) {
	for {
		line, tooLong, n, err := s.readLine()
		if !tooLong && len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if !tooLong && len(line) > s.limit {
			tooLong, n = true, len(line)
		}
		if tooLong {
			return nil, &jsonrpc.DecodeError{Detail: fmt.Sprintf("message of %d bytes exceeds the limit of %d bytes", n, s.limit)}
		}
		if len(trimSpace(line)) > 0 {
			return line, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads through the next newline (or EOF). It keeps at most
// limit+1 bytes (a CR before the newline is framing, not message); the rest
// of an over-long line is read and dropped.
func (s *Stdio) readLine() (line []byte, tooLong bool, n int, err error) {
	keep := s.limit + 1
	for {
		frag, e := s.r.ReadSlice('\n')
		n += len(frag)
		if !tooLong {
			if n-1 > keep || (e != nil && n > keep) {
				tooLong, line = true, nil
			} else {
				if cap(line)-len(line) < len(frag) {
					// Double, rather than append's 1.25x for large
					// slices: a 64 MiB line then costs ~2x its size in
					// copies, not ~5x.
					size := max(2*cap(line), len(line)+len(frag))
					if e == bufio.ErrBufferFull && s.sizeHint > size {
						// One byte more for the newline, as ReadSlice
						// returns it.
						size = min(s.sizeHint+1, keep+1)
					}
					// A large line takes the kept large buffer when it
					// fits (websocket.go, readMessage).
					var grown []byte
					if size > jsonrpc.LargeBufferMin {
						grown = jsonrpc.TakeLargeBuffer(len(line), size, 2*size)
					}
					if grown == nil {
						grown = make([]byte, len(line), size)
					}
					copy(grown, line)
					line = grown
				}
				line = append(line, frag...)
			}
		}
		if e == bufio.ErrBufferFull {
			continue
		}
		if e == nil {
			line = line[:max(len(line)-1, 0)] // drop '\n'
			if !tooLong && len(line) > 64<<10 {
				s.sizeHint = len(line)
			}
			return line, tooLong, n - 1, nil
		}
		if n == 0 || (!tooLong && len(line) == 0) {
			return nil, false, 0, e
		}
		// A last line without a newline still counts; the error comes
		// on the next call.
		return line, tooLong, n, nil
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// Release does nothing: stdio keeps no budget (jsonrpc.Releaser).
func (s *Stdio) Release([]byte) {}

// Recycle keeps a large message's buffer for the next large message or
// frame (jsonrpc.Recycler).
func (s *Stdio) Recycle(msg []byte) { recycle(msg) }

// Write writes msg and a newline, flushing unless more is coming.
func (s *Stdio) Write(_ context.Context, msg []byte, more bool) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.w.Write(msg); err != nil {
		return err
	}
	if err := s.w.WriteByte('\n'); err != nil {
		return err
	}
	if more && s.w.Buffered() < 32<<10 {
		return nil
	}
	return s.w.Flush()
}

// Close closes the underlying closer, if any. It does not flush: Write
// flushes whenever no message is queued behind it, and a writer blocked on
// a stalled reader must not hold Close up.
func (s *Stdio) Close() error {
	if s.c != nil {
		return s.c.Close()
	}
	return nil
}

// Describe names the transport for error messages.
func (s *Stdio) Describe() string { return s.name }
