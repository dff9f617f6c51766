package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// errConnLost reports that the connection a request was sent on ended
// before its response arrived. Whether the server acted on the request is
// unknown; Client.call retries idempotent requests on the next connection.
var errConnLost = errors.New("exec-server client: connection lost")

// message is any server-to-client message: a response (ID with Result or
// Error), a notification (Method, Params) or a server request (all of ID,
// Method, Params).
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

type response struct {
	result json.RawMessage
	err    *protocol.Error
}

// rpcConn is one transport connection: a read loop that routes responses to
// their callers and notifications to notify, and concurrent writers. It is
// used for one connection only; reconnecting makes a new one.
type rpcConn struct {
	s      stream
	notify func(method string, params json.RawMessage)

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan response
	err     error // why the read loop ended

	done chan struct{} // closed when the read loop has ended
}

// newRPCConn starts the read loop, which owns s: it closes s when it ends.
// notify is called on the read loop's goroutine and must not block.
func newRPCConn(s stream, notify func(string, json.RawMessage)) *rpcConn {
	c := &rpcConn{s: s, notify: notify, pending: make(map[int64]chan response), done: make(chan struct{})}
	go c.readLoop()
	return c
}

func (c *rpcConn) readLoop() {
	var err error
	defer func() {
		c.s.close()
		c.mu.Lock()
		c.err = err
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()
		for _, ch := range pending {
			close(ch)
		}
		close(c.done)
	}()
	for {
		var data []byte
		data, err = c.s.read(context.Background())
		if err != nil {
			return
		}
		var m message
		if jerr := splitMessage(data, &m); jerr != nil {
			// The server only sends valid JSON; anything else means the
			// stream is not an exec-server, and going on would misroute.
			err = fmt.Errorf("exec-server client: undecodable message from server: %v", jerr)
			return
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			// A server request (network/policyRequest); this client never
			// enables what would cause one, so refuse it explicitly.
			c.reply(m.ID, protocol.Errorf(protocol.CodeMethodNotFound, "client does not implement `%s`", m.Method))
		case m.Method != "":
			c.notify(m.Method, m.Params)
		default:
			id, perr := strconv.ParseInt(string(m.ID), 10, 64)
			if perr != nil {
				continue // id -1 errors and foreign ids answer nothing we sent
			}
			c.mu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.mu.Unlock()
			if ch != nil {
				ch <- response{result: m.Result, err: m.Error}
			}
		}
	}
}

func (c *rpcConn) reply(id json.RawMessage, e *protocol.Error) {
	// Written on the read loop: such requests do not occur in practice
	// and the server reads continuously, so this cannot stall for long.
	_ = c.s.write(context.Background(), jsonrpc.AppendError(nil, id, &jsonrpc.Error{Code: e.Code, Message: e.Message}))
}

// call sends one request and waits for its response. result may be nil.
// A response error comes back as *protocol.Error; a connection that ends
// first gives an error wrapping errConnLost.
func (c *rpcConn) call(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	if c.pending == nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	c.nextID++
	id := c.nextID
	ch := make(chan response, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	frame, err := jsonrpc.AppendRequest(make([]byte, 0, 256), []byte(strconv.FormatInt(id, 10)), method, params)
	if err != nil {
		c.forget(id)
		return fmt.Errorf("exec-server client: encoding %s params: %w", method, err)
	}
	if err := c.s.write(ctx, frame); err != nil {
		c.forget(id)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A failed write leaves the stream in an unknown state; end it so
		// the read loop reports the loss to everyone at once.
		c.s.close()
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("%w: %v", errConnLost, c.loopErr())
		}
		if r.err != nil {
			return r.err
		}
		if result == nil {
			return nil
		}
		var err error
		if d, ok := result.(rawDecoder); ok {
			err = d.decodeRaw(r.result)
		} else {
			err = json.Unmarshal(r.result, result)
		}
		if err != nil {
			return fmt.Errorf("exec-server client: decoding %s result: %w", method, err)
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	}
}

// notifyServer sends a notification (only "initialized" exists).
func (c *rpcConn) notifyServer(ctx context.Context, method string, params any) error {
	frame, err := jsonrpc.AppendNotification(nil, method, params)
	if err != nil {
		return err
	}
	if err := c.s.write(ctx, frame); err != nil {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	return nil
}

func (c *rpcConn) forget(id int64) {
	c.mu.Lock()
	if c.pending != nil {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

func (c *rpcConn) loopErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// close ends the connection; the read loop then fails every pending call.
func (c *rpcConn) close() {
	c.s.close()
}
