package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// errConnLost reports that the connection a request was sent on ended
// before its response arrived. Whether the server acted on the request is
// unknown; Client.call retries idempotent requests on the next connection.
var errConnLost = errors.New("exec-server client: connection lost")

// maxMessageBytes bounds one incoming message. The server reads whole files
// of up to 512 MiB by default (--max-file-bytes), sent as base64 (4/3) plus
// framing: the client accepts that much (ReadFile returns it all in memory
// anyway). At 80 MiB a 64 MiB file could not be read: over stdio the call
// waited forever, over a websocket the client redialled and retried it.
const maxMessageBytes = 512<<20/3*4 + 1<<20

// clientLimits bound what one server message may contain. The message size
// bounds the value count already; the server's own encoder nests little.
var clientLimits = jsonrpc.Limits{MaxDepth: 128, MaxValues: maxMessageBytes}

// rpcConn is one connection of a Client: a jsonrpc.Conn over one stream,
// run until the stream ends. Reconnecting makes a new one.
type rpcConn struct {
	*jsonrpc.Conn
	s      jsonrpc.Stream
	notify func(method string, params json.RawMessage)

	done chan struct{} // closed when Run has returned
	err  error         // Run's error, set before done is closed
}

// newRPCConn starts serving s, which the connection owns from now on.
// notify is called on the read loop, in arrival order, and must not block.
func newRPCConn(s jsonrpc.Stream, notify func(string, json.RawMessage)) *rpcConn {
	rc := &rpcConn{
		Conn:   jsonrpc.NewConn(s, jsonrpc.Options{Limits: clientLimits, EndOnDecodeError: true}),
		s:      s,
		notify: notify,
		done:   make(chan struct{}),
	}
	go func() {
		rc.err = rc.Run(context.Background(), rc.handle)
		close(rc.done)
	}()
	return rc
}

// handle serves what the server sends besides responses.
func (rc *rpcConn) handle(m *jsonrpc.Message) jsonrpc.Action {
	switch m.Kind {
	case jsonrpc.KindNotification:
		rc.notify(m.Method, m.Params)
	case jsonrpc.KindRequest:
		// A server request (network/policyRequest); this client never
		// enables what would cause one, so refuse it explicitly.
		rc.ReplyError(m.ID, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "client does not implement `%s`", m.Method))
	}
	// Responses to no request of ours (errors to id -1) answer nothing.
	return jsonrpc.Inline
}

// call sends one request and waits for its response. result may be nil.
// A response error comes back as *Error; a connection that ends first
// gives an error wrapping errConnLost.
func (rc *rpcConn) call(ctx context.Context, method string, params, result any) error {
	if d, ok := result.(rawDecoder); ok {
		result = rawResult{d}
	}
	err := rc.Call(ctx, method, params, result)
	if err == nil {
		return nil
	}
	if errors.Is(err, jsonrpc.ErrClosed) {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return fromWire(je)
	}
	return err // ctx's error, or params that do not encode
}

// fromWire turns a connection's error into the SDK's.
func fromWire(je *jsonrpc.Error) error {
	return protocol.FromWire(je)
}

// rawResult decodes a result with its fast decoder: the connection has
// validated the message, so encoding/json's own pass is not needed.
type rawResult struct{ d rawDecoder }

func (r rawResult) UnmarshalJSON(raw []byte) error { return r.d.decodeRaw(raw) }

// notifyServer sends a notification (only "initialized" exists).
func (rc *rpcConn) notifyServer(ctx context.Context, method string, params any) error {
	if err := rc.Notify(ctx, method, params); err != nil {
		return fmt.Errorf("%w: %v", errConnLost, err)
	}
	return nil
}

// loopErr is why the connection ended, once done is closed.
func (rc *rpcConn) loopErr() error {
	<-rc.done
	if rc.err == nil {
		return errors.New("connection closed")
	}
	return rc.err
}

// close ends the connection; every pending call fails.
func (rc *rpcConn) close() { _ = rc.Close() }
