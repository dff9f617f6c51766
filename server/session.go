package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/process"
	"github.com/execgo/exec-server/protocol"
)

// session owns processes across connections. While attached, process
// events are pushed to its connection (with back-pressure); while detached
// they are only retained, and the session ends after SessionTTL unless a
// new connection resumes it.
type session struct {
	id    string
	srv   *Server
	procs *process.Manager

	mu         sync.Mutex
	conn       *jsonrpc.Conn
	detachedAt time.Time
	expiry     *time.Timer
	ended      bool
	endOnce    sync.Once
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// newSession registers a session attached to conn. At the session limit
// the longest-detached session is ended to make room: detached sessions
// never cause a new connection to be refused.
func (s *Server) newSession(conn *jsonrpc.Conn) (*session, error) {
	ss := &session{id: newUUID(), srv: s, conn: conn}
	ss.procs = process.NewManager(process.Options{
		// Deliver encodes every event into a frame before it returns.
		ReuseOutput:    true,
		MaxProcesses:   s.cfg.MaxProcesses,
		RetainBudget:   s.retained,
		StdinBudget:    s.stdin,
		DirectChildren: s.cfg.DirectChildren,
		Logger:         s.cfg.Logger,
		Network:        ss,
		UpstreamProxy:  s.cfg.TCPUpstreamProxy,
		ForbiddenAddr:  s.isOwnAddr,
		Masking:        &s.mask,

		MaskUpstreamRoots: s.cfg.MaskUpstreamRoots,
	}, ss)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, protocol.InvalidRequest("%v", errServerClosed)
	}
	var victim *session
	if len(s.sessions) >= s.cfg.MaxSessions {
		for _, o := range s.sessions {
			o.mu.Lock()
			if o.conn == nil && (victim == nil || o.detachedAt.Before(victim.detachedAt)) {
				victim = o
			}
			o.mu.Unlock()
		}
		if victim == nil {
			s.mu.Unlock()
			return nil, protocol.InvalidRequest("too many sessions: %d are attached (limit %d)", len(s.sessions), s.cfg.MaxSessions)
		}
		delete(s.sessions, victim.id)
	}
	s.sessions[ss.id] = ss
	s.mu.Unlock()
	if victim != nil {
		go victim.end()
	}
	return ss, nil
}

// pinger is a stream that can check its peer is there (a websocket).
type pinger interface {
	Ping(ctx context.Context) error
}

// connProbe checks and cuts one live connection.
type connProbe struct {
	ping func(context.Context) error
	cut  func() error
}

// probeTimeout is how long the connection holding a session has to answer
// a ping when another connection asks to resume that session.
const probeTimeout = 2 * time.Second

// resume attaches an existing detached session to conn. A session still
// attached to a connection that does not answer a ping within probeTimeout
// (its peer vanished without closing: a dropped network, a killed laptop)
// is taken from that connection, which is cut; one whose connection answers
// is busy (-32010), as on the reference.
func (s *Server) resume(id string, conn *jsonrpc.Conn) (*session, error) {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil {
		return nil, protocol.InvalidRequest("unknown session id %s", id).WithKind(protocol.KindUnknownSession)
	}
	ss.mu.Lock()
	if old := ss.conn; old != nil && !ss.ended {
		ss.mu.Unlock()
		if s.alive(old) {
			return nil, protocol.Errorf(protocol.CodeSessionBusy, "session %s is already attached to another connection", id)
		}
		s.cfg.Logger.Info("resume takes a session from a connection that does not answer", "session", id, "peer", old.Describe())
		ss.detach(old, false)
		ss.mu.Lock()
	}
	defer ss.mu.Unlock()
	if ss.ended {
		return nil, protocol.InvalidRequest("unknown session id %s", id).WithKind(protocol.KindUnknownSession)
	}
	if ss.conn != nil {
		return nil, protocol.Errorf(protocol.CodeSessionBusy, "session %s is already attached to another connection", id)
	}
	if ss.expiry != nil {
		ss.expiry.Stop()
		ss.expiry = nil
	}
	ss.conn = conn
	return ss, nil
}

// alive pings conn (when its stream can be pinged) and cuts it when it does
// not answer in time. A connection that cannot be pinged counts as alive.
func (s *Server) alive(conn *jsonrpc.Conn) bool {
	v, ok := s.probes.Load(conn)
	if !ok {
		return true
	}
	p := v.(connProbe)
	ctx, cancel := context.WithTimeout(conn.Context(), probeTimeout)
	defer cancel()
	if err := p.ping(ctx); err == nil {
		return true
	}
	_ = p.cut()
	return false
}

// detach is called when conn ends. The session ends now if asked to
// (stdio), otherwise after SessionTTL.
func (ss *session) detach(conn *jsonrpc.Conn, endNow bool) {
	ss.mu.Lock()
	if ss.conn != conn {
		ss.mu.Unlock()
		return
	}
	ss.conn = nil
	ss.detachedAt = time.Now()
	if !endNow && !ss.ended {
		ss.expiry = time.AfterFunc(ss.srv.cfg.SessionTTL, ss.end)
	}
	ss.mu.Unlock()
	if endNow {
		ss.end()
	}
}

// end kills the session's processes and forgets it.
func (ss *session) end() {
	ss.endOnce.Do(func() {
		ss.mu.Lock()
		ss.ended = true
		ss.conn = nil
		if ss.expiry != nil {
			ss.expiry.Stop()
		}
		ss.mu.Unlock()
		ss.procs.Close()
		ss.srv.mu.Lock()
		if ss.srv.sessions[ss.id] == ss {
			delete(ss.srv.sessions, ss.id)
		}
		ss.srv.mu.Unlock()
	})
}

// Deliver pushes a process event to the attached connection, waiting while
// its send queue is full. Detached, the event is dropped (it stays in the
// process's retained window for process/read).
func (ss *session) Deliver(ev process.Event) {
	ss.mu.Lock()
	conn := ss.conn
	ss.mu.Unlock()
	ss.srv.obs.processEvent(ss, ev, conn == nil)
	if conn == nil {
		return
	}
	defer ss.srv.obs.pushSent(time.Now())
	_ = conn.Send(context.Background(), encodeEvent(jsonrpc.GetBuffer(), ev))
}

// DeliverBatch pushes a process's events (exited and closed) to the
// attached connection in one batch.
func (ss *session) DeliverBatch(evs []process.Event) {
	ss.mu.Lock()
	conn := ss.conn
	ss.mu.Unlock()
	frames := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		ss.srv.obs.processEvent(ss, ev, conn == nil)
		if conn != nil {
			frames = append(frames, encodeEvent(jsonrpc.GetBuffer(), ev))
		}
	}
	if conn == nil {
		return
	}
	defer ss.srv.obs.pushSent(time.Now())
	_ = conn.SendBatch(context.Background(), frames...)
}
