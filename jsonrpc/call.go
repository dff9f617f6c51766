package jsonrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// response is what a call waits for: the peer's response, or the end of
// the connection (closed).
type response struct {
	msg    *Message
	data   []byte // the message's bytes, released once decoded
	rel    Releaser
	closed error
}

// Call sends a request and waits for its response, which it decodes into
// result:
//
//   - nil: the result is dropped;
//   - *json.RawMessage: a copy of the result's bytes;
//   - a json.Unmarshaler: its UnmarshalJSON is called directly (the
//     message has been validated already; large results skip
//     encoding/json's second pass);
//   - anything else: json.Unmarshal.
//
// The peer's error response is returned as an *Error. When the connection
// ends first (or cannot send the request), the error wraps ErrClosed and
// the cause: whether the peer acted on the request is unknown. When ctx
// ends first, ctx.Err() is returned and the response, if it comes, is
// dropped. Call may be used from any goroutine, and from Concurrent or
// Detached work, but not from an Inline handler.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	ch := make(chan *response, 1)
	c.cmu.Lock()
	if c.pending == nil {
		err := c.endErr
		c.cmu.Unlock()
		return closedError(err)
	}
	c.lastID++
	id := c.lastID
	c.pending[id] = ch
	c.cmu.Unlock()

	var idBuf [20]byte
	frame, err := AppendRequest(GetBuffer(), strconv.AppendInt(idBuf[:0], id, 10), method, params)
	if err != nil {
		c.forget(id, ch)
		PutBuffer(frame)
		return fmt.Errorf("jsonrpc: encoding %s params: %w", method, err)
	}
	if err := c.sendFrame(ctx, frame); err != nil {
		c.forget(id, ch)
		if errors.Is(err, ErrClosed) {
			return closedError(c.cause())
		}
		return err
	}
	var r *response
	select {
	case r = <-ch:
	case <-ctx.Done():
		c.forget(id, ch)
		return ctx.Err()
	}
	if r.closed != nil || r.msg == nil {
		return closedError(r.closed)
	}
	defer c.release(nil, r.data, r.rel)
	if r.msg.Error != nil && string(r.msg.Error) != "null" {
		return decodeError(r.msg.Error)
	}
	switch v := result.(type) {
	case nil:
		return nil
	case *json.RawMessage:
		*v = bytes.Clone(r.msg.Result)
		return nil
	case json.Unmarshaler:
		err = v.UnmarshalJSON(r.msg.Result)
	default:
		err = json.Unmarshal(r.msg.Result, result)
	}
	if err != nil {
		return fmt.Errorf("jsonrpc: decoding %s result: %w", method, err)
	}
	return nil
}

// decodeError decodes an error response's "error" member.
func decodeError(raw json.RawMessage) *Error {
	var e Error
	if err := json.Unmarshal(raw, &e); err != nil {
		return &Error{Code: CodeInternalError, Message: fmt.Sprintf("malformed error response %.200s: %v", raw, err)}
	}
	e.Data = bytes.Clone(e.Data)
	return &e
}

// Notify sends a notification. It returns once the message is queued (or
// written), ErrClosed when the connection has ended, ctx.Err() when ctx
// ends while it waits for room in the queue.
func (c *Conn) Notify(ctx context.Context, method string, params any) error {
	frame, err := AppendNotification(GetBuffer(), method, params)
	if err != nil {
		PutBuffer(frame)
		return fmt.Errorf("jsonrpc: encoding %s params: %w", method, err)
	}
	return c.sendFrame(ctx, frame)
}

// Close ends the connection now: the stream is closed, Run returns (nil),
// and calls waiting for a response fail with ErrClosed. Queued messages
// are dropped; to let them go out, cancel Run's context instead.
func (c *Conn) Close() error {
	c.closed.Store(true)
	c.markDead()
	return c.stream.Close()
}

// deliver hands a response to the call waiting for it, and reports
// whether the response was one of this end's: an answer to a call that
// gave up meanwhile is dropped here. A response with an id this end never
// issued is not (it goes to the Handler). Runs on the read loop.
func (c *Conn) deliver(msg *Message, data []byte, rel Releaser) bool {
	id, err := strconv.ParseInt(string(msg.ID), 10, 64)
	if err != nil || id <= 0 {
		return false
	}
	c.cmu.Lock()
	if id > c.lastID {
		c.cmu.Unlock()
		return false
	}
	ch := c.pending[id]
	delete(c.pending, id)
	c.cmu.Unlock()
	if ch == nil {
		c.log.Debug("dropping a response to a call that gave up", "peer", c.stream.Describe(), "id", id)
		c.release(nil, data, rel)
		return true
	}
	ch <- &response{msg: msg, data: data, rel: rel}
	return true
}

// forget withdraws a call that gives up. A response delivered meanwhile
// is released.
func (c *Conn) forget(id int64, ch chan *response) {
	c.cmu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.cmu.Unlock()
	select {
	case r := <-ch:
		if r.msg != nil {
			c.release(nil, r.data, r.rel)
		}
	default:
	}
}

// failPending ends every waiting call with cause, and every later one.
func (c *Conn) failPending(cause error) {
	if cause == nil {
		cause = errors.New("stream ended")
	}
	c.cmu.Lock()
	pending := c.pending
	c.pending = nil
	c.endErr = cause
	c.cmu.Unlock()
	for _, ch := range pending {
		ch <- &response{closed: cause}
	}
}

// cause is why the read loop ended, or nil while it runs.
func (c *Conn) cause() error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.endErr
}

// closedError is ErrClosed with the cause of the end.
func closedError(cause error) error {
	if cause == nil || errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %v", ErrClosed, cause)
}
