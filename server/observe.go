package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
)

// observer sees what the server does (requests, process events,
// connections, refusals): it logs it and, when Config.Metrics is set,
// counts it (metrics.go). The engine reaches it through two calls only:
// observeMethods, when the method table is built, and processEvent, when a
// session delivers an event; the rest is called from server.go. A nil
// *metrics counts nothing.
type observer struct {
	log *slog.Logger
	m   *metrics

	// started holds when each live process was started (a procKey), for
	// the exit line's duration; bounded so that a session that never
	// reports exits cannot grow it without end.
	mu      sync.Mutex
	started map[procKey]time.Time

	refusalLogs logLimiter
}

// refusalBurst is how many refused requests are logged per second.
const refusalBurst = 10

// logLimiter lets refusalBurst log lines through per second.
type logLimiter struct {
	mu         sync.Mutex
	window     time.Time // start of the current second
	n          int       // lines logged in it
	suppressed int       // lines left out since the last one logged
}

// allow reports whether a line may be logged now and, if so, how many
// were left out before it.
func (l *logLimiter) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	if l.n >= refusalBurst {
		l.suppressed++
		return 0, false
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return suppressed, true
}

type procKey struct {
	ss *session
	id string
}

// maxStarted bounds observer.started; past it a process's exit is logged
// without a duration.
const maxStarted = 1 << 16

func newObserver(log *slog.Logger, m *metrics) *observer {
	return &observer{log: log, m: m, started: make(map[procKey]time.Time)}
}

// observeMethods wraps every method of the table so that each request is
// logged at debug and counted: method, process id, argv[0] (process/start),
// result code and duration. Requests refused before their method runs
// (unknown method, lifecycle) are not seen; bad params are, with -32602 and
// no duration.
func (s *Server) observeMethods(table map[string]method) {
	for name, m := range table {
		decode, call, consumes := m.decode, m.call, m.consumes
		m.decode = func(raw json.RawMessage) (any, error) {
			p, err := decode(raw)
			if err != nil {
				s.obs.request(name, nil, err, 0, false)
			}
			return p, err
		}
		var helper sandbox.HelperObserver // made once, not per request
		if m.family == familyFilesystem && s.obs.m != nil {
			helper = s.obs.m.helperCall
		}
		m.call = func(ctx context.Context, cs *connState, p any) (any, error) {
			t0 := time.Now()
			if helper != nil {
				ctx = sandbox.WithHelperObserver(ctx, helper)
			}
			// fs/writeFile and fs/writeBlock decode their payload over
			// the request's bytes: what the metrics and the audit log
			// want of their params comes from the call's own walk (a
			// walk after the call would read the decoded data, and one
			// before it would pass over the payload once more).
			var note *fsys.ParamsNote
			sandbox, audited := false, p
			if consumes {
				note = &fsys.ParamsNote{}
				ctx = fsys.WithParamsNote(ctx, note)
			} else {
				sandbox = paramSandboxed(p)
			}
			res, err := call(ctx, cs, p)
			d := time.Since(t0)
			if note != nil {
				if note.Filled {
					sandbox, audited = note.Sandboxed, note
				} else {
					// The params did not decode: nothing was decoded
					// over them.
					sandbox = paramSandboxed(p)
				}
			}
			s.obs.request(name, p, err, d, sandbox)
			s.audit(cs, name, audited, err)
			if name == protocol.MethodProcessStart {
				s.obs.processStarted(cs.sess(), p, err, t0)
			}
			if err == nil {
				// The byte counts come with the results: the metrics never
				// walk a payload (an observer that re-decoded every write
				// once cost more CPU than the write).
				switch r := res.(type) {
				case interface{ DataLen() int }:
					s.obs.m.fsRead(r.DataLen())
				case interface{ WrittenLen() int }:
					s.obs.m.fsWritten(r.WrittenLen())
				}
			}
			return res, err
		}
		table[name] = m
	}
}

// errorCode is a reply's code: 0 for success, the wire error's code
// otherwise (-32603 for an error that carries none).
func errorCode(err error) int {
	if err == nil {
		return 0
	}
	var e *protocol.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return protocol.CodeInternal
}

// paramSandboxed reports whether a request asked for a sandbox (its
// latency is then mostly the sandbox helper's). fs/* params stay raw: the
// member is found in one walk that skips values without decoding them (a
// large payload is passed over with one IndexByte).
func paramSandboxed(p any) bool {
	switch v := p.(type) {
	case *protocol.StartParams:
		return len(v.Sandbox) > 0 && string(v.Sandbox) != "null"
	case json.RawMessage:
		sb := jsonscan.Member(v, "sandbox")
		return len(sb) > 0 && string(sb) != "null"
	}
	return false
}

func (o *observer) request(method string, p any, err error, d time.Duration, sandboxed bool) {
	code := errorCode(err)
	o.m.request(method, code, d, sandboxed)
	if !o.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("method", method))
	switch v := p.(type) {
	case *protocol.StartParams:
		attrs = append(attrs, slog.String("process", v.ProcessID))
		if len(v.Argv) > 0 {
			attrs = append(attrs, slog.String("argv0", v.Argv[0]))
		}
	default:
		if id := processIDOf(p); id != "" {
			attrs = append(attrs, slog.String("process", id))
		}
	}
	attrs = append(attrs, slog.Int("code", code), slog.Duration("duration", d))
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	o.log.LogAttrs(context.Background(), slog.LevelDebug, "request", attrs...)
}

// processIDOf finds the process id in the params of the process/* methods.
func processIDOf(p any) string {
	switch v := p.(type) {
	case *protocol.ReadParams:
		return v.ProcessID
	case *protocol.WriteParams:
		return v.ProcessID
	case *protocol.SignalParams:
		return v.ProcessID
	case *protocol.CloseStdinParams:
		return v.ProcessID
	case *protocol.ResizeParams:
		return v.ProcessID
	case *protocol.TerminateParams:
		return v.ProcessID
	}
	return ""
}

// processStarted counts a process/start by result and remembers when a
// started process began, for its exit line.
func (o *observer) processStarted(ss *session, p any, err error, t0 time.Time) {
	o.m.start(errorCode(err))
	sp, ok := p.(*protocol.StartParams)
	if err != nil || !ok || ss == nil {
		return
	}
	o.mu.Lock()
	if len(o.started) < maxStarted {
		o.started[procKey{ss, sp.ProcessID}] = t0
	}
	o.mu.Unlock()
}

// processEvent sees every event a session delivers: output bytes by
// stream, an exit (logged at debug with code, signal and duration), and
// whether the push was dropped (no connection attached). The engine calls
// it from (*session).Deliver.
func (o *observer) processEvent(ss *session, ev process.Event, dropped bool) {
	if dropped {
		o.m.droppedPush()
	}
	switch ev.Kind {
	case process.EventOutput:
		o.m.output(ev.Stream, len(ev.Data))
	case process.EventExited:
		o.mu.Lock()
		t0, ok := o.started[procKey{ss, ev.ProcessID}]
		delete(o.started, procKey{ss, ev.ProcessID})
		o.mu.Unlock()
		o.m.exit()
		if !o.log.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		attrs := []slog.Attr{slog.String("process", ev.ProcessID), slog.Int("code", ev.ExitCode)}
		// The wire reports a signal death as 128+N, as shells do.
		if ev.ExitCode > 128 && ev.ExitCode < 128+65 {
			attrs = append(attrs, slog.Int("signal", ev.ExitCode-128))
		}
		if ok {
			attrs = append(attrs, slog.Duration("duration", time.Since(t0)))
		}
		if ev.TimedOut {
			attrs = append(attrs, slog.Bool("timedOut", true))
		}
		if ev.SandboxDenied {
			attrs = append(attrs, slog.Bool("sandboxDenied", true))
		}
		if ss != nil {
			attrs = append(attrs, slog.String("session", ss.id))
		}
		o.log.LogAttrs(context.Background(), slog.LevelDebug, "process exited", attrs...)
	}
}

// stallThreshold is how long a push must take to count as a back-pressure
// stall: an uncontended send to the queue takes microseconds.
const stallThreshold = time.Millisecond

// pushSent records a push to a connection begun at start: one that took
// stallThreshold or longer waited for room in the send queue. The engine
// calls it from (*session).Deliver: defer ss.srv.obs.pushSent(time.Now())
// before conn.Send.
func (o *observer) pushSent(start time.Time) {
	if d := time.Since(start); d >= stallThreshold {
		o.m.stall(d)
	}
}

// connOpened counts a connection; the returned function counts its end.
func (o *observer) connOpened() func() {
	o.m.connOpened()
	return o.m.connClosed
}

func (o *observer) refusal(code int) { o.m.refusal(strconv.Itoa(code)) }
