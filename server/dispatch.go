package server

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/httpcall"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
)

// Method families, as the reference names them in lifecycle errors.
const (
	familyExec        = "exec"
	familyFilesystem  = "filesystem"
	familyEnvironment = "environment info"
)

// method describes how one request is served.
type method struct {
	family string
	// inline methods run on the read loop, in arrival order, so a request
	// pipelined behind them sees their effect. They must not block for
	// long. Others run on the connection's handler pool.
	inline bool
	// decode parses and validates params; it runs before lifecycle checks
	// (the reference reports bad params first).
	decode func(raw json.RawMessage) (any, error)
	call   func(ctx context.Context, cs *connState, params any) (any, error)
	// consumes: the call keeps no reference to its params once it
	// returns (fsys.ConsumesParams), so the transport may reuse the
	// message's buffer (jsonrpc.Message.Reusable).
	consumes bool
}

// afterReplier is a result with work to start once its reply is queued
// (http/request's streamed body: every bodyDelta follows the result).
type afterReplier interface{ AfterReply() }

// connState is one connection's view: its lifecycle and its session.
type connState struct {
	srv               *Server
	conn              *jsonrpc.Conn
	endSessionOnClose bool
	identity          string // the audit log's "who" (audit.go)
	handles           *fsys.Handles
	fsOrder           fsOrder
	longPolls         atomic.Int32 // process/read requests waiting off the handler pool
	watches           watches
	http              httpcall.ConnState // http/request calls in flight

	mu          sync.Mutex
	initStarted bool // initialize received (and not failed)
	initDone    bool // initialized notification received
	session     *session
}

// dispatch is the connection's jsonrpc.Handler.
func (cs *connState) dispatch(msg *jsonrpc.Message) jsonrpc.Action {
	switch msg.Kind {
	case jsonrpc.KindNotification:
		cs.notification(msg)
		return jsonrpc.Inline
	case jsonrpc.KindResponse:
		cs.conn.Reply(jsonrpc.NoID, nil, protocol.InvalidRequest("unexpected response with id %s: the server sent no request", string(msg.ID)))
		return jsonrpc.Inline
	}
	m, ok := cs.srv.methods[msg.Method]
	if !ok {
		cs.conn.Reply(msg.ID, nil, protocol.Errorf(protocol.CodeMethodNotFound, "exec-server stub does not implement `%s` yet", msg.Method))
		return jsonrpc.Inline
	}
	if m.consumes {
		msg.Reusable()
	}
	params, err := m.decode(msg.Params)
	if err != nil {
		cs.conn.Reply(msg.ID, nil, err)
		return jsonrpc.Inline
	}
	if err := cs.checkLifecycle(m.family); err != nil {
		cs.conn.Reply(msg.ID, nil, err)
		return jsonrpc.Inline
	}
	var wait []chan struct{}
	var done chan struct{}
	inline := m.inline
	if m.family == familyFilesystem {
		wait, done = cs.fsOrder.admit(msg.Method)
		// fs/open and fs/close run on the read loop only when nothing
		// earlier is pending: fs/close must not overtake an earlier
		// fs/writeBlock on its handle.
		inline = inline && allDone(wait)
	}
	id := msg.ID
	var known []byte
	if m.consumes {
		// The payload's span as the decoder validated it: fsys passes
		// over it instead of scanning it again.
		known = msg.Bulk
	}
	run := func() {
		ctx := fsys.WithKnown(cs.conn.Context(), known)
		var res any
		err := waitAll(ctx, wait)
		if err == nil {
			res, err = m.call(ctx, cs, params)
		}
		if done != nil {
			close(done)
		}
		if m.consumes {
			// The message's buffer is free before the reply goes out:
			// the client's next large message (the next fs/writeBlock)
			// can come at once, and finds it to reuse.
			id = bytes.Clone(id)
			cs.conn.ReleaseNow(msg)
		}
		cs.conn.Reply(id, res, err)
		if a, ok := res.(afterReplier); ok && err == nil {
			a.AfterReply()
		}
	}
	longPoll := msg.Method == protocol.MethodProcessRead && isLongPoll(params)
	if inline || cs.conn.Concurrency() == 1 || (msg.Method == protocol.MethodProcessRead && !longPoll) {
		run()
		return jsonrpc.Inline
	}
	if longPoll {
		// The message is released before the poll ends: keep the id.
		id = bytes.Clone(msg.ID)
		return cs.longPoll(id, run)
	}
	return jsonrpc.Concurrent(run)
}

// longPoll runs a waiting process/read off the handler pool, so that no
// number of pending long polls delays other requests; the long polls of a
// connection are bounded by MaxLongPolls instead.
func (cs *connState) longPoll(id json.RawMessage, run func()) jsonrpc.Action {
	limit := int32(cs.srv.cfg.MaxLongPolls)
	if cs.longPolls.Add(1) > limit {
		cs.longPolls.Add(-1)
		cs.conn.Reply(id, nil, protocol.InvalidRequest("too many pending long polls: this connection already waits in %d process/read requests with waitMs (limit %d); wait for one to finish or read without waitMs", limit, limit))
		return jsonrpc.Inline
	}
	// Work the connection never starts (it ended) leaves the count
	// raised; the count dies with the connection.
	return jsonrpc.Detached(func() { defer cs.longPolls.Add(-1); run() })
}

// wireError gives a handler's error its wire form: protocol's mapping
// (operating-system errors to the reference's codes and texts), in the
// connection's error type.
func wireError(err error) *jsonrpc.Error {
	return protocol.ToError(err).Wire()
}

var decodeStartParams = decodeInto[protocol.StartParams]("ExecParams", "processId", "argv", "cwd", "env", "tty")

// decodeStart decodes and checks process/start params: what no exec could
// pass on (NUL bytes, env names with '=') is a params error, -32602.
func decodeStart(raw json.RawMessage) (any, error) {
	v, err := decodeStartParams(raw)
	if err != nil {
		return nil, err
	}
	if err := process.ValidateStart(v.(*protocol.StartParams)); err != nil {
		return nil, err
	}
	return v, nil
}

var decodeTerminateParams = decodeInto[protocol.TerminateParams]("TerminateParams", "processId")

// decodeTerminate decodes process/terminate params and refuses a graceMs
// past protocol.MaxGraceMs.
func decodeTerminate(raw json.RawMessage) (any, error) {
	v, err := decodeTerminateParams(raw)
	if err != nil {
		return nil, err
	}
	if err := process.CheckGrace(v.(*protocol.TerminateParams)); err != nil {
		return nil, err
	}
	return v, nil
}

// MaxWaitMs is the longest a process/read waits: a larger waitMs is
// clamped to it (the read then answers with what there is, as any long
// poll whose time runs out), so that no request holds server resources
// for hours. Clients poll again.
const MaxWaitMs = 5 * 60 * 1000

// decodeRead decodes process/read params and clamps waitMs.
func decodeRead(raw json.RawMessage) (any, error) {
	v, err := decodeInto[protocol.ReadParams]("ReadParams", "processId")(raw)
	if err != nil {
		return nil, err
	}
	p := v.(*protocol.ReadParams)
	if p.WaitMs != nil && *p.WaitMs > MaxWaitMs {
		w := uint64(MaxWaitMs)
		p.WaitMs = &w
	}
	return p, nil
}

func isLongPoll(params any) bool {
	p, ok := params.(*protocol.ReadParams)
	return ok && p.WaitMs != nil && *p.WaitMs > 0
}

func (cs *connState) notification(msg *jsonrpc.Message) {
	if msg.Method != protocol.MethodInitialized {
		cs.conn.Reply(jsonrpc.NoID, nil, protocol.InvalidRequest("unexpected notification `%s`: only `initialized` may be sent as a notification", msg.Method))
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if !cs.initStarted || cs.session == nil {
		cs.conn.Reply(jsonrpc.NoID, nil, protocol.InvalidRequest("received `initialized` notification before `initialize`"))
		return
	}
	cs.initDone = true
}

func (cs *connState) checkLifecycle(family string) error {
	if family == "" {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.session == nil {
		return protocol.InvalidRequest("client must call initialize before using %s methods", family)
	}
	if !cs.initDone {
		return protocol.InvalidRequest("client must send initialized before using %s methods", family)
	}
	return nil
}

func (cs *connState) sess() *session {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.session
}

// close runs after the connection has ended.
func (cs *connState) close() {
	cs.closeWatches()
	if cs.handles != nil {
		cs.handles.CloseAll()
	}
	if ss := cs.sess(); ss != nil {
		ss.detach(cs.conn, cs.endSessionOnClose)
	}
}

// decodeInto returns a decoder for a params struct with required fields.
func decodeInto[T any](typeName string, required ...string) func(json.RawMessage) (any, error) {
	return func(raw json.RawMessage) (any, error) {
		v := new(T)
		if err := jsonscan.DecodeParams(raw, v, typeName, required...); err != nil {
			return nil, err
		}
		return v, nil
	}
}

func decodeNone(raw json.RawMessage) (any, error) { return nil, jsonscan.DecodeNoParams(raw) }

func decodeRaw(raw json.RawMessage) (any, error) { return raw, nil }

func (s *Server) buildMethods() map[string]method {
	m := map[string]method{
		protocol.MethodInitialize: {
			inline: true,
			decode: decodeInto[protocol.InitializeParams]("InitializeParams", "clientName"),
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return cs.initialize(p.(*protocol.InitializeParams))
			},
		},
		protocol.MethodEnvironmentInfo: {
			family: familyEnvironment, inline: true, decode: decodeNone,
			call: func(_ context.Context, cs *connState, _ any) (any, error) { return cs.srv.envInfo(), nil },
		},
		protocol.MethodEnvironmentStatus: {
			family: familyEnvironment, inline: true, decode: decodeNone,
			call: func(context.Context, *connState, any) (any, error) {
				return protocol.EnvironmentStatus{Status: "ready"}, nil
			},
		},
		protocol.MethodProcessStart: {
			family: familyExec, inline: true,
			decode: decodeStart,
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return cs.sess().procs.Start(*p.(*protocol.StartParams))
			},
		},
		protocol.MethodProcessRead: {
			family: familyExec,
			decode: decodeRead,
			call: func(ctx context.Context, cs *connState, p any) (any, error) {
				res, err := cs.sess().procs.Read(ctx, *p.(*protocol.ReadParams))
				if err != nil {
					return nil, err
				}
				return readResult{res}, nil
			},
		},
		protocol.MethodProcessWrite: {
			family: familyExec, inline: true,
			decode: decodeInto[protocol.WriteParams]("WriteParams", "processId", "chunk"),
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return cs.sess().procs.Write(*p.(*protocol.WriteParams))
			},
		},
		protocol.MethodProcessSignal: {
			family: familyExec, inline: true,
			decode: decodeInto[protocol.SignalParams]("SignalParams", "processId", "signal"),
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return protocol.Empty{}, cs.sess().procs.Signal(*p.(*protocol.SignalParams))
			},
		},
		protocol.MethodProcessCloseStdin: {
			family: familyExec, inline: true,
			decode: decodeInto[protocol.CloseStdinParams]("CloseStdinParams", "processId"),
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return protocol.Empty{}, cs.sess().procs.CloseStdin(p.(*protocol.CloseStdinParams).ProcessID)
			},
		},
		protocol.MethodProcessResize: {
			family: familyExec, inline: true,
			decode: decodeInto[protocol.ResizeParams]("ResizeParams", "processId", "rows", "cols"),
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return protocol.Empty{}, cs.sess().procs.Resize(*p.(*protocol.ResizeParams))
			},
		},
		protocol.MethodProcessTerminate: {
			family: familyExec, inline: true,
			decode: decodeTerminate,
			call: func(_ context.Context, cs *connState, p any) (any, error) {
				return cs.sess().procs.Terminate(*p.(*protocol.TerminateParams)), nil
			},
		},
		protocol.MethodProcessList: {
			family: familyExec, inline: true, decode: decodeNone,
			call: func(_ context.Context, cs *connState, _ any) (any, error) {
				return cs.sess().procs.List(), nil
			},
		},
	}
	for _, name := range s.fs.Methods() {
		m[name] = method{
			family:   familyFilesystem,
			inline:   name == protocol.MethodFsOpen || name == protocol.MethodFsClose,
			consumes: fsys.ConsumesParams(name),
			decode:   decodeRaw,
			call: func(ctx context.Context, cs *connState, p any) (any, error) {
				return cs.srv.fs.Call(ctx, cs.handles, name, p.(json.RawMessage))
			},
		}
	}
	s.watchMethods(m)
	s.envConfigMethods(m)
	s.discoverMethods(m)
	s.httpMethods(m)
	s.observeMethods(m) // request logs and metrics (observe.go); keep last
	return m
}

func (cs *connState) initialize(p *protocol.InitializeParams) (any, error) {
	cs.mu.Lock()
	if cs.initStarted {
		cs.mu.Unlock()
		return nil, protocol.InvalidRequest("initialize may only be sent once per connection")
	}
	cs.initStarted = true
	cs.mu.Unlock()

	var ss *session
	var err error
	if p.ResumeSessionID != nil {
		ss, err = cs.srv.resume(*p.ResumeSessionID, cs.conn)
	} else {
		ss, err = cs.srv.newSession(cs.conn)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if err != nil {
		cs.initStarted = false // a failed initialize may be retried
		return nil, err
	}
	cs.session = ss
	return protocol.InitializeResult{SessionID: ss.id, EnvironmentInfo: cs.srv.envInfo()}, nil
}
