package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// maxMessageBytes bounds one incoming message. The server's default limit is
// 64 MiB; a whole-file read of a large file is base64 (4/3) plus framing, so
// the client accepts a little more than the server will ever send by default.
const maxMessageBytes = 80 << 20

// stream carries whole JSON-RPC messages. read is called from one goroutine
// only; write may be called concurrently.
type stream interface {
	read(ctx context.Context) ([]byte, error)
	write(ctx context.Context, msg []byte) error
	close() error
}

// wsStream is one websocket connection: one JSON message per text message.
type wsStream struct {
	c   *websocket.Conn
	wmu sync.Mutex
}

func newWSStream(c *websocket.Conn) *wsStream {
	c.SetReadLimit(maxMessageBytes)
	return &wsStream{c: c}
}

func (w *wsStream) read(ctx context.Context) ([]byte, error) {
	_, data, err := w.c.Read(ctx)
	return data, err
}

func (w *wsStream) write(ctx context.Context, msg []byte) error {
	// coder/websocket allows concurrent writers, but serialising here keeps
	// a large write from interleaving its frames' scheduling with small ones
	// in surprising ways, and costs nothing measurable.
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.c.Write(ctx, websocket.MessageText, msg)
}

func (w *wsStream) close() error { return w.c.CloseNow() }

// stdioStream frames messages as newline-terminated lines.
type stdioStream struct {
	r      *bufio.Reader
	closer io.Closer

	wmu sync.Mutex
	w   io.Writer
}

func newStdioStream(r io.Reader, w io.Writer, closer io.Closer) *stdioStream {
	return &stdioStream{r: bufio.NewReaderSize(r, 64<<10), w: w, closer: closer}
}

func (s *stdioStream) read(context.Context) ([]byte, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// readLine returns the next line without its newline, refusing lines over
// maxMessageBytes so a broken peer cannot make the client allocate without
// bound.
func (s *stdioStream) readLine() ([]byte, error) {
	var buf []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(buf)+len(frag) > maxMessageBytes {
			return nil, fmt.Errorf("exec-server stdio: message exceeds %d bytes", maxMessageBytes)
		}
		switch {
		case err == nil:
			if buf == nil {
				// The common case: the whole line is in the reader's buffer;
				// copy it once, because ReadSlice's result is overwritten by
				// the next read.
				return bytes.Clone(frag[:len(frag)-1]), nil
			}
			buf = append(buf, frag[:len(frag)-1]...)
			return buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, frag...)
		default:
			if len(buf)+len(frag) > 0 && err == io.EOF {
				// A last line without a newline is still a message.
				return append(buf, frag...), nil
			}
			return nil, err
		}
	}
}

func (s *stdioStream) write(_ context.Context, msg []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// One write per message keeps a message whole even if the peer reads
	// with small buffers; the newline is appended in place when there is
	// room so large messages are not copied.
	if cap(msg) > len(msg) {
		_, err := s.w.Write(append(msg, '\n'))
		return err
	}
	if _, err := s.w.Write(msg); err != nil {
		return err
	}
	_, err := s.w.Write([]byte{'\n'})
	return err
}

func (s *stdioStream) close() error {
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}
