package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// rawConn is a protocol-level client on the project's JSON-RPC engine,
// for the workloads the SDK does not express: a client that stops reading
// (stall) and sandbox policies on process/start and fs/writeFile. It keeps
// only what those need of process events: exit codes, closed processes,
// and an output sink.
type rawConn struct {
	conn *jsonrpc.Conn
	done chan struct{}

	mu     sync.Mutex
	cond   *sync.Cond
	exits  map[string]int // process id -> exit code, once exited
	closed map[string]bool
	sink   func(processID string, seq uint64, b64 []byte)
	paused chan struct{}
	err    error
}

func newRawConn(st jsonrpc.Stream) *rawConn {
	rc := &rawConn{
		conn: jsonrpc.NewConn(st, jsonrpc.Options{Concurrency: 1, QueueBytes: 256 << 20,
			Limits: jsonrpc.Limits{MaxDepth: 1 << 16, MaxValues: 1 << 30}}),
		done: make(chan struct{}), exits: map[string]int{}, closed: map[string]bool{},
	}
	rc.cond = sync.NewCond(&rc.mu)
	go func() {
		defer close(rc.done)
		err := rc.conn.Run(context.Background(), rc.handle)
		if err == nil {
			err = jsonrpc.ErrClosed
		}
		rc.mu.Lock()
		rc.err = err
		rc.cond.Broadcast()
		rc.mu.Unlock()
	}()
	return rc
}

func (rc *rawConn) initialize(ctx context.Context) error {
	if err := rc.conn.Call(ctx, protocol.MethodInitialize, map[string]any{"clientName": "exec-bench"}, nil); err != nil {
		return err
	}
	return rc.conn.Notify(ctx, protocol.MethodInitialized, map[string]any{})
}

// Close ends the connection.
func (rc *rawConn) Close() error {
	err := rc.conn.Close()
	<-rc.done
	return err
}

// call is a request; a server error is a *jsonrpc.Error.
func (rc *rawConn) call(ctx context.Context, method string, params, result any) error {
	return rc.conn.Call(ctx, method, params, result)
}

// setSink sends each process/output chunk (its base64 text, valid during
// the call) to f instead of dropping it; nil drops them again.
func (rc *rawConn) setSink(f func(processID string, seq uint64, b64 []byte)) {
	rc.mu.Lock()
	rc.sink = f
	rc.mu.Unlock()
}

// pause stops reading from the connection (a stalled client) until resume:
// the next message the server sends stays unread, and all behind it.
func (rc *rawConn) pause() {
	rc.mu.Lock()
	if rc.paused == nil {
		rc.paused = make(chan struct{})
	}
	rc.mu.Unlock()
}

func (rc *rawConn) resume() {
	rc.mu.Lock()
	if rc.paused != nil {
		close(rc.paused)
		rc.paused = nil
	}
	rc.mu.Unlock()
}

// handle takes the server's notifications on the read loop.
func (rc *rawConn) handle(m *jsonrpc.Message) jsonrpc.Action {
	rc.mu.Lock()
	p, sink := rc.paused, rc.sink
	rc.mu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-rc.conn.Done():
		}
	}
	switch m.Method {
	case protocol.NotifyProcessOutput:
		if sink != nil {
			id, _ := stringField(m.Params, `"processId":"`)
			b64, _ := stringField(m.Params, `"chunk":"`)
			sink(string(id), seqField(m.Params), b64)
		}
	case protocol.NotifyProcessExited, protocol.NotifyProcessClosed:
		var ev struct {
			ProcessID string `json:"processId"`
			ExitCode  int    `json:"exitCode"`
		}
		if json.Unmarshal(m.Params, &ev) != nil {
			break
		}
		rc.mu.Lock()
		if m.Method == protocol.NotifyProcessExited {
			rc.exits[ev.ProcessID] = ev.ExitCode
		} else {
			rc.closed[ev.ProcessID] = true
		}
		rc.cond.Broadcast()
		rc.mu.Unlock()
	}
	return jsonrpc.Inline
}

// waitClosed waits for id's process/closed and returns its exit code
// (forgetting the process), or the connection's or ctx's error.
func (rc *rawConn) waitClosed(ctx context.Context, id string) (int, error) {
	stop := context.AfterFunc(ctx, func() {
		rc.mu.Lock()
		rc.cond.Broadcast()
		rc.mu.Unlock()
	})
	defer stop()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for !rc.closed[id] {
		if rc.err != nil {
			return 0, rc.err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		rc.cond.Wait()
	}
	code := rc.exits[id]
	delete(rc.exits, id)
	delete(rc.closed, id)
	return code, nil
}

// stringField returns the text of the string member key (given with its
// opening quote, `"chunk":"`) of a compact JSON object: base64 and the ids
// this bench uses have no escapes.
func stringField(b []byte, key string) ([]byte, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return nil, false
	}
	start := i + len(key)
	end := bytes.IndexByte(b[start:], '"')
	if end < 0 {
		return nil, false
	}
	return b[start : start+end], true
}

func seqField(b []byte) uint64 {
	i := bytes.Index(b, []byte(`"seq":`))
	if i < 0 {
		return 0
	}
	j := i + len(`"seq":`)
	k := j
	for k < len(b) && b[k] >= '0' && b[k] <= '9' {
		k++
	}
	n, _ := strconv.ParseUint(string(b[j:k]), 10, 64)
	return n
}
