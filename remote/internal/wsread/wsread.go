// Package wsread reads websocket messages without the garbage of
// websocket.Conn.Read, which reads each message into a slice grown from
// 512 bytes: a 60 KiB relay frame cost several allocations, cleared and
// copied, and the collector's time with them.
package wsread

import (
	"context"
	"io"

	"github.com/coder/websocket"
)

// Reader reads messages through one scratch buffer that grows to the
// largest message seen (the connection's read limit bounds it). It is for
// one goroutine at a time.
type Reader struct{ scratch []byte }

// Read returns the next message as a new slice of exactly its size, which
// the caller owns.
func (r *Reader) Read(ctx context.Context, c *websocket.Conn) (websocket.MessageType, []byte, error) {
	typ, mr, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	if r.scratch == nil {
		r.scratch = make([]byte, 64<<10)
	}
	n := 0
	for {
		if n == len(r.scratch) {
			r.scratch = append(r.scratch, make([]byte, len(r.scratch))...)
		}
		m, err := mr.Read(r.scratch[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, nil, err
		}
	}
	return typ, append([]byte(nil), r.scratch[:n]...), nil
}
