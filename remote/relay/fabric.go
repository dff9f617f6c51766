package relay

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
)

// Fleet mode: several relay nodes share a KVStore and move frames between
// them over core NATS.
//
// The home of an environment is the node holding its executor socket: it
// keeps the environment's route (the Router) in memory and answers
// requests on rly.req.<E> (E: a hash of the environment id, which may hold
// characters NATS subjects do not allow). A harness socket that lands on
// another node becomes a forwarder there and a remoteLeg at the home:
//
//	rly.req.<E>           requests to the home: ping (connect), attach
//	rly.up.<leg>.f|d      harness → home: a frame, or "the socket went"
//	rly.dn.<leg>.f|c|x    home → harness: a frame, close, cut
//	rly.ctl.<node>        credits returned to node (never blocks)
//	rly.home.<E>          "node N is E's home now": the others drop theirs
//	rly.hb.<node>         heartbeats; a node silent for 3 s is suspected
//	rly.probe.<node>      "are you alive?" to a suspected node (membership.go)
//
// With Options.PeerListen a leg's frames, closes and credits (the
// rly.up, rly.dn and rly.ctl traffic) ride a direct link between the two
// nodes instead when one is up (peerlink.go); requests, homes and
// heartbeats stay on NATS.
//
// Each leg's frames travel on one subject from one connection, so NATS
// keeps their order; a leg sends at most fabWindowFrames frames and
// fabWindowBytes bytes the receiver has not handed on yet (credits), so
// nothing queues without bound in NATS and no frame is dropped while both
// nodes live (codex 0.169's plain streams have no retransmission).
//
// Route state is soft: when a home dies, its executor redials (through
// the load balancer) to another node, which becomes the home and
// announces it; the nodes with forwarders to the old home close those
// harness sockets, and harnesses running the reliability extension redial
// and resume their streams at the new home, which answers an executor's
// resume for a stream it does not know yet with nothing (not a reset) for
// TakeoverGrace. Plain streams through a dead node end, as they do today
// when the executor's socket drops.

const (
	fabWindowFrames = 32
	fabWindowBytes  = 1 << 20
	// Credits go back after this much, or when the receiver has nothing
	// more pending.
	fabCreditFrames = fabWindowFrames / 4
	fabCreditBytes  = fabWindowBytes / 4
	hbInterval      = time.Second
	hbDead          = 3 * time.Second // default of Options.FleetNodeDeadAfter
	fabRequestWait  = 3 * time.Second
	pingTry         = time.Second
	pingAgain       = 100 * time.Millisecond
)

// FleetStats are the fleet counters of one node (cumulative).
type FleetStats struct {
	Node                      string
	FramesOut, BytesOut       uint64 // frames this node published to other nodes
	FramesIn, BytesIn         uint64 // frames it received from other nodes
	CreditWaits               uint64 // times a sender waited for credit
	PeerWaits                 uint64 // times a sender waited for its budget toward a peer node
	Homes                     uint64 // times this node became an environment's home
	Abandoned                 uint64 // routes dropped because another node became home
	Rehomed                   uint64 // forwarder sockets closed because their home moved or died
	RemoteLegs, ForwarderLegs int64  // current
	Takeovers                 uint64 // times this node became the home of an environment another node was the home of
	NodesLost                 uint64 // nodes this node declared dead (silent, then confirmed: membership.go)
	SuspicionsRefuted         uint64 // silent nodes that answered the probe (not declared dead)
	NATSDisconnects           uint64
	NATSReconnects            uint64
	NATSDropped               uint64 // messages dropped by slow subscriptions
	NATSSlowConsumers         uint64
	NATSConnected             bool
	// Peer links (peerlink.go): frames that crossed on a link rather
	// than NATS (included in the totals above), links up and lost, and
	// the writes that carried the links' messages.
	LinkFramesOut, LinkBytesOut uint64
	LinkFramesIn, LinkBytesIn   uint64
	LinkUps, LinkDowns          uint64
	LinkBatches, LinkMessages   uint64 // writes, and messages they carried
	LinkInline                  uint64 // frames a link's reader wrote to their socket itself
	LinkSenderWrites            uint64 // messages written on an idle link by their sender
	LinkCarries                 uint64 // of those, writes the kernel took in part or not at all
	LinkRefused, LinkDialFails  uint64 // handshakes refused here, dials that failed
	Links                       int64  // up now
	LinkLegs                    int64  // legs riding a link now
}

type fabStats struct {
	framesOut, bytesOut, framesIn, bytesIn atomic.Uint64
	creditWaits, homes, abandoned, rehomed atomic.Uint64
	slow, peerWaits                        atomic.Uint64
	takeovers, nodesLost, refuted          atomic.Uint64
	disconnects                            atomic.Uint64
	linkFramesOut, linkBytesOut            atomic.Uint64
	linkFramesIn, linkBytesIn              atomic.Uint64
	linkUps, linkDowns, linkBatches        atomic.Uint64
	linkMsgs, linkRefused, linkDialFails   atomic.Uint64
	linkInline, linkSenderWrites           atomic.Uint64
	linkCarries                            atomic.Uint64
}

type fabric struct {
	s    *Server
	nc   *nats.Conn
	node string
	seq  atomic.Uint64
	st   fabStats

	mu    sync.Mutex
	homes map[string]*nats.Subscription // env → its request subscription
	// reqEnv: env by its request subject's token; reqs: the request
	// dispatchers' channels (requests.go).
	reqEnv map[string]string
	reqs   [fabReqWorkers]chan *nats.Msg
	remote map[string]*remoteLeg
	fwd    map[string]*fwdLeg
	peers  map[string]time.Time // last heartbeat
	mem    membership           // suspicion and confirmation of silent nodes (membership.go)
	// reclaim returns the heap once a burst of takeovers has settled
	// (reclaim.go).
	reclaim *reclaimer
	// hbPaused stops this node's heartbeats (tests: a live node late).
	hbPaused atomic.Bool
	pools    map[string]*credit  // budget toward each peer node
	homeOf   map[string]homeNote // env → the last other node announced its home
	subs     []*nats.Subscription
	// waiters are harness upgrades waiting for an environment to get a
	// home (its executor redialling after its node died).
	waiters map[string][]chan struct{}

	// Peer links (peerlink.go); linkLn is nil without Options.PeerListen.
	links    map[string]*peerLink // by node
	dialing  map[string]bool
	nextDial map[string]time.Time
	linkLn   net.Listener
	linkAddr string // advertised in heartbeats
	linkKey  []byte
	// linksClosed: the node is closing; no link registers any more.
	linksClosed bool
}

func envToken(env string) string {
	sum := sha256.Sum256([]byte(env))
	return hex.EncodeToString(sum[:16])
}

// validNodeName: a node name is a NATS subject token and part of leg ids.
func validNodeName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func newFabric(s *Server, nc *nats.Conn, node string) (*fabric, error) {
	f := &fabric{
		s: s, nc: nc, node: node,
		homes:  make(map[string]*nats.Subscription),
		remote: make(map[string]*remoteLeg),
		fwd:    make(map[string]*fwdLeg),
		peers:  make(map[string]time.Time),
		pools:  make(map[string]*credit),
		homeOf: make(map[string]homeNote),
		mem:    membership{probing: map[string]bool{}, suspect: map[string]time.Time{}, declared: map[string]time.Time{}, reap: make(chan struct{}, 1)},

		waiters: make(map[string][]chan struct{}),

		links:    make(map[string]*peerLink),
		dialing:  make(map[string]bool),
		nextDial: make(map[string]time.Time),

		reclaim: newReclaimer(takeoverReclaimDelay, nil),
	}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			f.st.slow.Add(1)
		}
		s.log.Warn("nats", "err", err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
	prevDis := nc.DisconnectErrHandler()
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		f.st.disconnects.Add(1)
		if prevDis != nil {
			prevDis(c, err)
		}
	})
	prevRe := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(c *nats.Conn) {
		f.reconnected()
		if prevRe != nil {
			prevRe(c)
		}
	})
	for subj, h := range map[string]nats.MsgHandler{
		"rly.ctl." + node:   f.onCredit,
		"rly.hb.*":          f.onHeartbeat,
		"rly.probe." + node: f.onProbe,
		"rly.home.*":        f.onHome,
	} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			f.unsubscribeAll()
			return nil, err
		}
		sub.SetPendingLimits(-1, -1) // handlers never block; credits bound the rest
		f.subs = append(f.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		f.unsubscribeAll()
		return nil, err
	}
	if s.opts.PeerListen != "" {
		if err := f.startLinks(); err != nil {
			f.unsubscribeAll()
			return nil, err
		}
	}
	f.startRequests()
	s.wg.Add(1)
	go f.heartbeats()
	return f, nil
}

// reconnected refills every leg's window: frames (and credits) in flight
// when the connection dropped are lost for good, and their credit with
// them; reliable streams send the frames again, and a window that leaked
// would stall the leg for ever.
func (f *fabric) reconnected() {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Legs on peer links lost nothing.
	for _, rl := range f.remote {
		if rl.link == nil {
			rl.down.refill()
		}
	}
	for _, fl := range f.fwd {
		if fl.link == nil {
			fl.up.refill()
		}
	}
	for _, p := range f.pools {
		p.refill()
	}
}

func (f *fabric) unsubscribeAll() {
	f.mu.Lock()
	subs := f.subs
	f.subs = nil
	for _, h := range f.homes {
		subs = append(subs, h)
	}
	f.homes = map[string]*nats.Subscription{}
	clear(f.reqEnv)
	f.mu.Unlock()
	for _, sub := range subs {
		sub.Unsubscribe()
	}
}

// close ends the fabric with the server: its subscriptions go, so other
// nodes see no responders for this node's environments.
func (f *fabric) close() {
	f.reclaim.stop()
	f.unsubscribeAll()
	f.closeLinks()
	f.mu.Lock()
	var rls []*remoteLeg
	for _, rl := range f.remote {
		rls = append(rls, rl)
	}
	var fls []*fwdLeg
	for _, fl := range f.fwd {
		fls = append(fls, fl)
	}
	f.mu.Unlock()
	for _, rl := range rls {
		rl.Close("relay_shutdown")
	}
	// A forwarder's reader may be waiting for credit from its home (up to
	// writeTimeout): stopping its window wakes it, so Server.Close does
	// not wait that long for the socket's goroutine.
	for _, fl := range fls {
		fl.up.stop()
	}
}

func (f *fabric) stats() FleetStats {
	ns := f.nc.Stats()
	f.mu.Lock()
	st := FleetStats{RemoteLegs: int64(len(f.remote)), ForwarderLegs: int64(len(f.fwd)), Links: int64(len(f.links))}
	var dropped uint64
	for _, rl := range f.remote {
		if rl.link != nil {
			st.LinkLegs++
		}
		if rl.sub != nil {
			if n, err := rl.sub.Dropped(); err == nil {
				dropped += uint64(n)
			}
		}
	}
	for _, fl := range f.fwd {
		if fl.link != nil {
			st.LinkLegs++
		}
		if fl.sub != nil {
			if n, err := fl.sub.Dropped(); err == nil {
				dropped += uint64(n)
			}
		}
	}
	f.mu.Unlock()
	st.Node = f.node
	st.FramesOut, st.BytesOut = f.st.framesOut.Load(), f.st.bytesOut.Load()
	st.FramesIn, st.BytesIn = f.st.framesIn.Load(), f.st.bytesIn.Load()
	st.CreditWaits = f.st.creditWaits.Load()
	st.PeerWaits = f.st.peerWaits.Load()
	st.Homes, st.Abandoned, st.Rehomed = f.st.homes.Load(), f.st.abandoned.Load(), f.st.rehomed.Load()
	st.Takeovers, st.NodesLost, st.SuspicionsRefuted = f.st.takeovers.Load(), f.st.nodesLost.Load(), f.st.refuted.Load()
	st.NATSDisconnects = f.st.disconnects.Load()
	st.NATSReconnects = ns.Reconnects
	st.NATSDropped = dropped
	st.NATSSlowConsumers = f.st.slow.Load()
	st.NATSConnected = f.nc.Status() == nats.CONNECTED
	st.LinkFramesOut, st.LinkBytesOut = f.st.linkFramesOut.Load(), f.st.linkBytesOut.Load()
	st.LinkFramesIn, st.LinkBytesIn = f.st.linkFramesIn.Load(), f.st.linkBytesIn.Load()
	st.LinkUps, st.LinkDowns = f.st.linkUps.Load(), f.st.linkDowns.Load()
	st.LinkBatches, st.LinkMessages = f.st.linkBatches.Load(), f.st.linkMsgs.Load()
	st.LinkInline = f.st.linkInline.Load()
	st.LinkSenderWrites, st.LinkCarries = f.st.linkSenderWrites.Load(), f.st.linkCarries.Load()
	st.LinkRefused, st.LinkDialFails = f.st.linkRefused.Load(), f.st.linkDialFails.Load()
	return st
}

// --- requests to an environment's home ---------------------------------

type fabRequest struct {
	Op   string `json:"op"` // ping, attach
	Node string `json:"node"`
	Leg  string `json:"leg,omitempty"`
	Reg  string `json:"reg,omitempty"`
	// Links: attach: the forwarder's peer links up now, node → link id;
	// the home uses its own to the forwarder's node if the id matches.
	Links map[string]string `json:"links,omitempty"`
}

type fabReply struct {
	Node     string `json:"node"`
	Reg      string `json:"reg,omitempty"`
	Attached bool   `json:"attached,omitempty"` // ping: the executor socket is up
	Status   int    `json:"status,omitempty"`   // attach: 0 ok, else the HTTP status to answer
	Code     string `json:"code,omitempty"`
	Link     bool   `json:"link,omitempty"` // attach: the leg rides the peer link offered
}

func (f *fabric) request(ctx context.Context, env string, req fabRequest) (fabReply, error) {
	req.Node = f.node
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, fabRequestWait)
	defer cancel()
	m, err := f.nc.RequestWithContext(ctx, reqPrefix+envToken(env), b)
	if err != nil {
		return fabReply{}, err
	}
	var rep fabReply
	err = json.Unmarshal(m.Data, &rep)
	return rep, err
}

// ping asks env's home for its executor: reg and whether its socket is up.
// A request routed to a NATS server that died as it went is lost without
// an answer, and the home, on that server, is connecting to another: so a
// try that gets no answer within pingTry is made again, for fabRequestWait
// in all. "No responders" (no node holds env, or its home is between two
// servers) is asked once more after pingAgain.
func (f *fabric) ping(ctx context.Context, env string) (reg string, attached, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, fabRequestWait)
	defer cancel()
	for asked := false; ; {
		tctx, tcancel := context.WithTimeout(ctx, pingTry)
		rep, err := f.request(tctx, env, fabRequest{Op: "ping"})
		tcancel()
		if err == nil {
			return rep.Reg, rep.Attached, true
		}
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			if asked {
				return "", false, false
			}
			asked = true
		case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout):
			return "", false, false // a closed connection, a bad answer
		}
		select {
		case <-ctx.Done():
			return "", false, false
		case <-time.After(pingAgain):
		}
	}
}

// becomeHome makes this node env's home once its executor socket attached.
func (f *fabric) becomeHome(env, reg string) {
	f.mu.Lock()
	_, already := f.homes[env]
	if !already {
		sub, err := f.subscribeRequests(env)
		if err != nil {
			f.mu.Unlock()
			f.s.log.Warn("fleet: cannot serve requests for an environment", "env", env, "err", err)
			return
		}
		f.homes[env] = sub
	}
	// This node's own forwarders of env lead to its former home: the
	// announcement below moves the other nodes' (onHome), not these,
	// and waiting for the old home to be declared dead would stall
	// their streams for FleetNodeDeadAfter.
	moved := f.forwardersLocked(env, f.node)
	f.mu.Unlock()
	f.st.homes.Add(1)
	b, _ := json.Marshal(map[string]string{"node": f.node, "env": env, "reg": reg})
	f.nc.Publish("rly.home."+envToken(env), b)
	f.nc.Flush()
	for _, fl := range moved {
		fl.rehome("home_moved")
	}
}

// forwardersLocked are this node's forwarders of env whose home is known
// and is not node. f.mu is held.
func (f *fabric) forwardersLocked(env, node string) []*fwdLeg {
	var out []*fwdLeg
	for _, fl := range f.fwd {
		if fl.env == env && fl.home != "" && fl.home != node {
			out = append(out, fl)
		}
	}
	return out
}

type homeNote struct {
	node string
	at   time.Time // announced
}

// previousHomeSeen: when env's executor attaches here and another node
// was its home, the last heartbeat seen from that node (or, if none, its
// announcement): a stalled stream's recovery counts from there.
func (f *fabric) previousHomeSeen(env string, now time.Time) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev, ok := f.homeOf[env]
	if !ok || prev.node == f.node {
		return time.Time{}, false
	}
	delete(f.homeOf, env)
	f.st.takeovers.Add(1)
	f.reclaim.note()
	seen, ok := f.peers[prev.node]
	if !ok || seen.Before(prev.at) {
		seen = prev.at
	}
	if seen.After(now) {
		seen = now
	}
	return seen, true
}

// resign stops answering for env if it has no route here any more.
func (f *fabric) resign(env string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, _, ok := f.s.router.Executor(env); ok {
		return
	}
	f.unsubscribeRequests(env)
}

func (f *fabric) reply(m *nats.Msg, rep fabReply) {
	rep.Node = f.node
	b, _ := json.Marshal(rep)
	m.Respond(b)
}

func (f *fabric) onRequest(env string, m *nats.Msg) {
	var req fabRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return
	}
	switch req.Op {
	case "ping":
		exec, reg, ok := f.s.router.Executor(env)
		if !ok {
			return // no route here (any more): let another node answer
		}
		f.reply(m, fabReply{Reg: reg, Attached: exec != nil})
	case "attach":
		if !validLegID(req.Leg) || !validNodeName(req.Node) {
			return
		}
		_, reg, ok := f.s.router.Executor(env)
		switch {
		case !ok:
			return
		case reg != req.Reg:
			f.reply(m, fabReply{Status: http.StatusForbidden, Code: "unexpected_executor_registration_id"})
			return
		}
		rl := &remoteLeg{f: f, key: req.Leg, node: req.Node, env: env, reg: req.Reg, at: time.Now(),
			frameSubj: "rly.dn." + req.Leg + ".f"}
		rl.back.f, rl.back.node, rl.back.leg = f, req.Node, req.Leg
		rl.down.init()
		rl.in.wake = make(chan struct{}, 1)
		rl.link = f.linkTo(req.Node, req.Links[f.node])
		if rl.link != nil && !rl.link.attach(rl.key, rl) {
			rl.link = nil
		}
		rl.back.link = rl.link
		if err := f.s.router.AttachHarness(env, req.Reg, rl); err != nil {
			if rl.link != nil {
				rl.link.detach(rl.key)
			}
			f.reply(m, fabReply{Status: http.StatusServiceUnavailable, Code: "route_unavailable"})
			return
		}
		if rl.link == nil {
			sub, err := f.nc.Subscribe("rly.up."+req.Leg+".*", rl.onUp)
			if err != nil {
				f.s.router.DetachHarness(env, rl)
				f.reply(m, fabReply{Status: http.StatusServiceUnavailable, Code: "route_unavailable"})
				return
			}
			sub.SetPendingLimits(-1, -1) // credits bound it
			rl.sub = sub
		} else {
			rl.in.start(f, rl.down.quit, rl.fromInbox, rl.flush)
		}
		f.mu.Lock()
		f.remote[rl.key] = rl
		f.mu.Unlock()
		if rl.gone.Load() {
			// The leg's link went after the leg attached to it and before
			// the leg was in f.remote: lost() found nothing to delete
			// there, and may have detached it from the router before
			// AttachHarness. Undo both; a lost() from now on finds the
			// leg in place.
			f.mu.Lock()
			if f.remote[rl.key] == rl {
				delete(f.remote, rl.key)
			}
			f.mu.Unlock()
			f.s.harnessDetached(rl)
			f.reply(m, fabReply{Status: http.StatusServiceUnavailable, Code: "route_unavailable"})
			return
		}
		if rl.link == nil {
			// The subscription reaches the server before the reply does,
			// so the forwarder's first frame finds interest.
			f.nc.Flush()
		}
		f.s.event(Event{Kind: "attach", Role: roleHarness, Env: env, Reg: req.Reg, Code: "remote"})
		f.reply(m, fabReply{Reg: reg, Link: rl.link != nil})
	}
}

func validLegID(id string) bool {
	node, n, ok := strings.Cut(id, "-")
	if !ok || !validNodeName(node) {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 64)
	return err == nil
}

// --- credits -------------------------------------------------------------

// credit is a sender's window on one leg in one direction, or its budget
// toward one peer node (a pool every leg to that node draws from too).
type credit struct {
	mu                  sync.Mutex
	frames, bytes       int64
	maxFrames, maxBytes int64
	changed             chan struct{} // closed (and replaced) when credit comes back
	waiting             int           // senders waiting on changed
	quit                chan struct{}
	quitOnce            sync.Once
}

func (c *credit) init() { c.initMax(fabWindowFrames, fabWindowBytes) }

func (c *credit) initMax(frames, bytes int64) {
	c.frames, c.bytes = frames, bytes
	c.maxFrames, c.maxBytes = frames, bytes
	c.changed = make(chan struct{})
	c.quit = make(chan struct{})
}

func (c *credit) stop() { c.quitOnce.Do(func() { close(c.quit) }) }

// wakeLocked tells every waiter to look again; c.mu is held. Without
// waiters (the common case: credit comes back before it runs out) the
// channel stays, so a credit message costs no allocation.
func (c *credit) wakeLocked() {
	if c.waiting == 0 {
		return
	}
	c.waiting = 0
	close(c.changed)
	c.changed = make(chan struct{})
}

// acquire takes credit for one frame of n bytes; a frame larger than the
// window goes when nothing is outstanding. false: timeout, or c or stop
// stopped.
func (c *credit) acquire(n int64, timeout time.Duration, waits *atomic.Uint64, stop <-chan struct{}) bool {
	var t *time.Timer
	for {
		c.mu.Lock()
		if c.frames > 0 && (c.bytes >= n || c.bytes >= c.maxBytes) {
			c.frames--
			c.bytes -= n
			c.mu.Unlock()
			if t != nil {
				t.Stop()
			}
			return true
		}
		changed := c.changed
		c.waiting++
		c.mu.Unlock()
		if t == nil {
			waits.Add(1)
			t = time.NewTimer(timeout)
		}
		select {
		case <-changed:
		case <-c.quit:
			t.Stop()
			return false
		case <-stop:
			t.Stop()
			return false
		case <-t.C:
			return false
		}
	}
}

func (c *credit) refill() {
	c.mu.Lock()
	c.frames, c.bytes = c.maxFrames, c.maxBytes
	c.wakeLocked()
	c.mu.Unlock()
}

func (c *credit) release(frames, bytes int64) {
	c.mu.Lock()
	// Capped: credit for frames sent before a refill may still come back.
	c.frames = min(c.frames+frames, c.maxFrames)
	c.bytes = min(c.bytes+bytes, c.maxBytes)
	c.wakeLocked()
	c.mu.Unlock()
}

// outstanding is what the window has handed out and not got back.
func (c *credit) outstanding() (frames, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.maxFrames-c.frames, 0), max(c.maxBytes-c.bytes, 0)
}

// setMaxBytes changes the window's size; what is outstanding stays so.
func (c *credit) setMaxBytes(b int64) {
	c.mu.Lock()
	if b != c.maxBytes {
		c.bytes += b - c.maxBytes
		c.maxBytes = b
		c.wakeLocked()
	}
	c.mu.Unlock()
}

// --- per-peer budgets ------------------------------------------------------

// A node's buffers for frames from other nodes (the pending messages of
// its leg subscriptions, and the NATS server's outbound buffer toward it)
// are shared by every peer: per-leg windows alone let one peer with many
// legs hold legs × fabWindowBytes of them. So every sender also draws from
// a budget per destination node: Options.FleetNodeBytes (the same on
// every node) divided among the live nodes that may send to it. A peer
// flooding through many legs waits on its budget; the others keep theirs.

const poolFrames = 1 << 40 // pools bound bytes only

// pool is this node's budget toward node, sized for the nodes alive now.
func (f *fabric) pool(node string) *credit {
	f.mu.Lock()
	p := f.pools[node]
	if p == nil {
		p = &credit{}
		p.initMax(poolFrames, f.shareLocked(node, time.Now()))
		f.pools[node] = p
	}
	f.mu.Unlock()
	return p
}

// shareLocked is a sender's share of node's buffers: FleetNodeBytes over
// the live nodes other than node (this one among them). f.mu is held.
func (f *fabric) shareLocked(node string, now time.Time) int64 {
	senders := 1 // this node
	for n, seen := range f.peers {
		if n != node && n != f.node && now.Sub(seen) < f.s.opts.FleetNodeDeadAfter {
			senders++
		}
	}
	return max(int64(f.s.opts.FleetNodeBytes)/int64(senders), fabWindowBytes)
}

// resizePools follows the live nodes (heartbeats).
func (f *fabric) resizePools(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for node, p := range f.pools {
		p.setMaxBytes(f.shareLocked(node, now))
	}
}

// take takes credit for a frame of n bytes to peer on a leg's window c
// and the peer's budget.
func (f *fabric) take(c *credit, peer string, n int64, timeout time.Duration) bool {
	if !c.acquire(n, timeout, &f.st.creditWaits, nil) {
		return false
	}
	if !f.pool(peer).acquire(n, timeout, &f.st.peerWaits, c.quit) {
		c.release(1, n)
		return false
	}
	return true
}

// giveBack returns to peer's budget what a leg that ended still held:
// its credit will not come back.
func (f *fabric) giveBack(c *credit, peer string) {
	if peer == "" {
		return
	}
	if _, b := c.outstanding(); b > 0 {
		f.pool(peer).release(0, b)
	}
}

// returned accumulates the credit a receiver owes a sender for what it
// handed on: sent back at once past a quarter of the window, otherwise
// within creditDelay, so a frame-by-frame exchange does not cost a credit
// message per frame and a sender waiting on a small remainder still gets
// it.
type returned struct {
	f         *fabric
	node, leg string
	mu        sync.Mutex
	frames    int64
	bytes     int64
	armed     bool
	timer     *time.Timer // one per leg, re-armed: no allocation per frame
	buf       []byte      // the credit message, reused (NATS and links copy it)
	subj      string
	link      *peerLink // the leg's link, if it rides one
}

const creditDelay = 2 * time.Millisecond

func (r *returned) add(n int) { r.addN(1, int64(n)) }

// addN is add of frames frames of n bytes in all.
func (r *returned) addN(frames, n int64) {
	r.mu.Lock()
	r.frames += frames
	r.bytes += n
	if r.frames >= fabCreditFrames || r.bytes >= fabCreditBytes {
		r.sendLocked()
		r.mu.Unlock()
		return
	}
	if !r.armed {
		r.armed = true
		if r.timer == nil {
			r.timer = time.AfterFunc(creditDelay, r.flush)
		} else {
			r.timer.Reset(creditDelay)
		}
	}
	r.mu.Unlock()
}

func (r *returned) flush() {
	r.mu.Lock()
	r.armed = false
	if r.frames > 0 {
		r.sendLocked()
	}
	r.mu.Unlock()
}

func (r *returned) sendLocked() {
	b := binary.AppendUvarint(r.buf[:0], uint64(r.frames))
	b = binary.AppendUvarint(b, uint64(r.bytes))
	if r.link != nil {
		r.buf = b
		r.link.send(linkCredit, r.leg, b)
		r.frames, r.bytes = 0, 0
		return
	}
	b = append(b, r.leg...)
	r.buf = b
	if r.subj == "" {
		r.subj = "rly.ctl." + r.node
	}
	r.f.nc.Publish(r.subj, b)
	r.frames, r.bytes = 0, 0
}

func (f *fabric) onCredit(m *nats.Msg) {
	b := m.Data
	frames, n := binary.Uvarint(b)
	if n <= 0 {
		return
	}
	b = b[n:]
	bytes, n := binary.Uvarint(b)
	if n <= 0 {
		return
	}
	f.credited(nil, b[n:], frames, bytes)
}

// credited: the receiver of leg key handed on frames and bytes.
//
// via is the peer link the credit came on (nil: NATS): a link credits
// only the legs riding it. What goes back to the peer's budget is at most
// what the leg has outstanding, so a credit the leg cannot use (sent
// before a refill, or a peer's error) does not inflate the budget.
func (f *fabric) credited(via *peerLink, key []byte, frames, bytes uint64) {
	f.mu.Lock()
	rl := f.remote[string(key)]
	fl := f.fwd[string(key)]
	f.mu.Unlock()
	give := func(c *credit, peer string) {
		_, out := c.outstanding()
		b := min(int64(min(bytes, 1<<62)), out)
		c.release(int64(min(frames, 1<<62)), b)
		f.pool(peer).release(0, b)
	}
	switch {
	case rl != nil && (via == nil || rl.link == via):
		give(&rl.down, rl.node)
	case fl != nil && (via == nil || fl.link == via):
		give(&fl.up, fl.peer())
	}
}

// --- the home's end of a harness socket on another node -------------------

type remoteLeg struct {
	f                   *fabric
	key, node, env, reg string
	at                  time.Time
	down                credit
	sub                 *nats.Subscription
	back                returned // up-direction credit owed to the forwarder
	gone                atomic.Bool
	frameSubj           string    // rly.dn.<leg>.f
	link                *peerLink // set at attach, for the leg's life; nil: NATS
	in                  inbox     // frames from the link, to the leg's goroutine
	// The inbox's goroutine's: frames of a batch toward the executor
	// socket, and the credit of the batch's frames.
	batch                 legBatch
	owedFrames, owedBytes int64
}

// toHarness sends one message toward the harness's node.
func (rl *remoteLeg) toHarness(kind byte, b []byte) error {
	if rl.link != nil {
		return rl.link.send(kind, rl.key, b)
	}
	subj := rl.frameSubj
	switch kind {
	case linkDownClose:
		subj = "rly.dn." + rl.key + ".c"
	case linkDownCut:
		subj = "rly.dn." + rl.key + ".x"
	}
	return rl.f.nc.Publish(subj, b)
}

// linkLost: the link the leg rode went, as if the harness's node died.
func (rl *remoteLeg) linkLost() { rl.lost() }

func (rl *remoteLeg) Env() string { return rl.env }

func (rl *remoteLeg) Send(b []byte) bool {
	if rl.gone.Load() {
		return false
	}
	f := rl.f
	if !f.take(&rl.down, rl.node, int64(len(b)), f.s.opts.SlowHarness) {
		if !rl.gone.Load() {
			f.s.log.Warn("fleet: harness leg on another node too slow, cutting it", "env", rl.env, "node", rl.node)
			rl.Cut()
		}
		return false
	}
	if err := rl.toHarness(linkDownFrame, b); err != nil {
		rl.Cut()
		return false
	}
	f.st.framesOut.Add(1)
	f.st.bytesOut.Add(uint64(len(b)))
	if rl.link != nil {
		f.st.linkFramesOut.Add(1)
		f.st.linkBytesOut.Add(uint64(len(b)))
	}
	return true
}

// sendOwned: NATS copies what it publishes either way.
func (rl *remoteLeg) sendOwned(b []byte) bool { return rl.Send(b) }

func (rl *remoteLeg) deliver(o outFrame) bool {
	if o.text {
		return false
	}
	return rl.Send(o.b)
}

// Close is called once the router has let go of the leg.
func (rl *remoteLeg) Close(reason string) {
	if rl.gone.Swap(true) {
		return
	}
	rl.toHarness(linkDownClose, []byte(reason))
	rl.drop()
}

// Cut drops the harness socket on the other node; the route lets go of
// the leg here.
func (rl *remoteLeg) Cut() {
	if rl.gone.Swap(true) {
		return
	}
	rl.toHarness(linkDownCut, nil)
	rl.drop()
	go rl.detached()
}

// gone is the forwarder's word (or the node's death): the socket went.
func (rl *remoteLeg) lost() {
	if rl.gone.Swap(true) {
		return
	}
	rl.drop()
	rl.detached()
}

func (rl *remoteLeg) detached() {
	rl.f.s.harnessDetached(rl)
	rl.f.s.event(Event{Kind: "detach", Role: roleHarness, Env: rl.env, Reg: rl.reg, Code: "remote"})
}

func (rl *remoteLeg) drop() {
	rl.down.stop()
	rl.f.giveBack(&rl.down, rl.node)
	if rl.sub != nil {
		rl.sub.Unsubscribe()
	}
	if rl.link != nil {
		rl.link.detach(rl.key)
	}
	rl.f.mu.Lock()
	if rl.f.remote[rl.key] == rl {
		delete(rl.f.remote, rl.key)
	}
	rl.f.mu.Unlock()
}

func (rl *remoteLeg) onUp(m *nats.Msg) {
	kind := m.Subject[len(m.Subject)-1]
	if kind == linkUpFrame {
		rl.f.st.framesIn.Add(1)
		rl.f.st.bytesIn.Add(uint64(len(m.Data)))
	}
	rl.up(kind, m.Data)
}

// up handles a message from the forwarder (NATS or the link); b is ours.
func (rl *remoteLeg) up(kind byte, b []byte) { rl.upTo(kind, b, nil) }

// upTo is up; with bt (the link's inbox) frames toward the executor
// socket are gathered in bt for one write, sent by flush, and their
// credit goes back then.
func (rl *remoteLeg) upTo(kind byte, b []byte, bt *legBatch) {
	switch kind {
	case linkUpFrame:
		if !rl.gone.Load() && !rl.f.s.harnessFrameTo(rl, b, true, bt) {
			rl.flush()
			rl.lost()
			rl.toHarness(linkDownClose, []byte("executor_disconnected"))
			return
		}
		if bt == nil {
			rl.back.add(len(b))
		} else {
			rl.owedFrames++
			rl.owedBytes += int64(len(b))
		}
	case linkUpDone:
		// What was gathered goes before the harness's end is told.
		rl.flush()
		rl.lost()
	}
}

// fromInbox handles a message of the link's inbox (its goroutine).
func (rl *remoteLeg) fromInbox(m inMsg) {
	rl.batch.cur = m.buf // taken by rl.batch.add if the frame is gathered
	rl.upTo(m.kind, m.b, &rl.batch)
	rl.batch.cur = nil
}

// flush writes what an inbox batch gathered and returns the credit of
// the frames it handled (the inbox's goroutine).
func (rl *remoteLeg) flush() {
	rl.batch.flush()
	if rl.owedFrames > 0 {
		rl.back.addN(rl.owedFrames, rl.owedBytes)
		rl.owedFrames, rl.owedBytes = 0, 0
	}
}

// --- a harness socket here whose environment's home is another node -------

type fwdLeg struct {
	f         *fabric
	key, env  string
	at        time.Time
	home      string // guarded by f.mu
	up        credit
	sub       *nats.Subscription
	l         *leg
	ready     chan struct{}
	back      returned // down-direction credit owed to the home
	closeOnce sync.Once
	// offered: the links this leg's attach request offered (fixed before
	// the leg is findable); link: the one the home chose, nil: NATS.
	offered map[string]string
	link    *peerLink
	in      inbox
	// The inbox's goroutine's: frames of a batch toward the harness
	// socket, and the credit of the batch's frames.
	batch                 legBatch
	owedFrames, owedBytes int64
	rehomed               atomic.Bool // rehome closed the socket (counted once)
	// lostT: linkLost's timer, armed once, stopped by finish.
	lostMu   sync.Mutex
	lostT    *time.Timer
	finished bool
}

// toHome sends one message toward the home.
func (fl *fwdLeg) toHome(kind byte, b []byte) error {
	if fl.link != nil {
		return fl.link.send(kind, fl.key, b)
	}
	if kind == linkUpDone {
		return fl.f.nc.Publish("rly.up."+fl.key+".d", b)
	}
	return fl.f.nc.Publish("rly.up."+fl.key+".f", b)
}

// fromLink: a message from the home on a link (the link the leg chose).
// Handled on the leg's goroutine, never on the link's reader (the
// harness's socket may wait), unless the reader could write it at once
// (linkGather).
func (fl *fwdLeg) fromLink(kind byte, b []byte, lb *linkBuf) {
	fl.in.start(fl.f, fl.up.quit, fl.fromInbox, fl.flush)
	fl.in.push(inMsg{kind: kind, b: b, buf: lb})
}

// linkLost: the link went. As over NATS when a home dies, the harness
// socket stays until the environment's new home announces itself (onHome:
// its executor redialled there, so the harness's redial finds it at once)
// or the home is declared dead (reapDead). Closing it at once made
// harnesses redial before any node held their executor, and back off: one
// stream in 51 stalled 6.4 s in an exec-bench fleet run. A link lost to a
// home that lives ends the socket after FleetNodeDeadAfter.
func (fl *fwdLeg) linkLost() {
	fl.lostMu.Lock()
	defer fl.lostMu.Unlock()
	if fl.lostT != nil || fl.finished {
		return
	}
	fl.lostT = time.AfterFunc(fl.f.s.opts.FleetNodeDeadAfter, func() { fl.rehome("peer_link_lost") })
	fl.up.stop()
}

// peer is the leg's home node ("" before the home answered).
func (fl *fwdLeg) peer() string {
	fl.f.mu.Lock()
	defer fl.f.mu.Unlock()
	return fl.home
}

// waitHome waits up to d for env to get a home (on any node); false on
// timeout.
func (f *fabric) waitHome(ctx context.Context, env string, d time.Duration) bool {
	ch := make(chan struct{})
	f.mu.Lock()
	f.waiters[env] = append(f.waiters[env], ch)
	f.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	// A home announced between the caller's failed request and the
	// waiter's registration woke nobody: ask once more now that a later
	// announcement cannot be missed (no responders answers at once).
	_, _, found := f.ping(ctx, env)
	if !found {
		select {
		case <-ch:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := f.waiters[env]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(f.waiters, env)
	} else {
		f.waiters[env] = ws
	}
	return found
}

func (f *fabric) wakeHome(env string) {
	f.mu.Lock()
	for _, ch := range f.waiters[env] {
		close(ch)
	}
	delete(f.waiters, env)
	f.mu.Unlock()
}

// openForwarder asks env's home to admit a harness leg for reg, before the
// socket is upgraded (a refusal is an HTTP status). status is 0 on success;
// noHome: no node holds env's executor now.
func (f *fabric) openForwarder(ctx context.Context, env, reg string) (fl *fwdLeg, status int, reason string, noHome bool) {
	fl = &fwdLeg{f: f, key: f.node + "-" + strconv.FormatUint(f.seq.Add(1), 10), env: env, at: time.Now(), ready: make(chan struct{})}
	fl.up.init()
	fl.in.wake = make(chan struct{}, 1)
	fl.offered = f.linkIDs()
	sub, err := f.nc.Subscribe("rly.dn."+fl.key+".*", fl.onDown)
	if err != nil {
		return nil, http.StatusServiceUnavailable, "route_unavailable", false
	}
	sub.SetPendingLimits(-1, -1) // credits bound it
	fl.sub = sub
	f.mu.Lock()
	if len(f.fwd) >= f.s.opts.MaxHarnessSockets {
		// The home bounds the legs it routes; this node bounds the
		// sockets it forwards.
		f.mu.Unlock()
		sub.Unsubscribe()
		return nil, http.StatusServiceUnavailable, "route_unavailable", false
	}
	f.fwd[fl.key] = fl
	f.mu.Unlock()
	rep, err := f.request(ctx, env, fabRequest{Op: "attach", Leg: fl.key, Reg: reg, Links: fl.offered})
	if err == nil && rep.Status == 0 {
		if rep.Link {
			// The home rides the link we offered: so do we, or the leg
			// cannot work (the link went meanwhile: the home's end of it
			// is going too, with its leg).
			pl := f.linkTo(rep.Node, fl.offered[rep.Node])
			if pl == nil || !pl.attach(fl.key, fl) {
				fl.abort()
				return nil, http.StatusServiceUnavailable, "route_unavailable", false
			}
			fl.back.link = pl
			// Nothing of this leg comes through NATS now: its
			// subscription (and nats.go's goroutine for it) can go.
			fl.sub.Unsubscribe()
		}
		f.mu.Lock()
		if rep.Link {
			fl.link = fl.back.link
		}
		fl.home = rep.Node
		f.mu.Unlock()
		return fl, 0, "", false
	}
	fl.abort()
	if err != nil {
		// No home: the executor is not attached anywhere (503: the
		// harness retries, as with a local route being unavailable).
		return nil, http.StatusServiceUnavailable, "route_unavailable", errors.Is(err, nats.ErrNoResponders)
	}
	return nil, rep.Status, rep.Code, false
}

// abort undoes openForwarder when the upgrade failed.
func (fl *fwdLeg) abort() {
	fl.toHome(linkUpDone, nil)
	fl.finish()
}

func (fl *fwdLeg) finish() {
	fl.closeOnce.Do(func() {
		fl.lostMu.Lock()
		fl.finished = true
		if fl.lostT != nil {
			fl.lostT.Stop()
		}
		fl.lostMu.Unlock()
		fl.up.stop()
		fl.f.giveBack(&fl.up, fl.peer())
		fl.sub.Unsubscribe()
		if fl.link != nil {
			fl.link.detach(fl.key)
		}
		fl.f.mu.Lock()
		delete(fl.f.fwd, fl.key)
		fl.f.mu.Unlock()
		select {
		case <-fl.ready:
		default:
			close(fl.ready)
		}
	})
}

// serve forwards the socket's frames to the home until either ends.
func (fl *fwdLeg) serve(l *leg, reg string) {
	f := fl.f
	fl.l = l
	close(fl.ready)
	if fl.link != nil && !fl.link.up() {
		// Gone before the socket was ready: what linkLost started may
		// have found nothing to close (see rehome).
		fl.linkLost()
	}
	f.s.event(Event{Kind: "attach", Role: roleHarness, Env: l.env, Reg: reg, Code: "forward"})
	home := fl.peer()
	for {
		typ, b, err := l.read()
		if err != nil {
			break
		}
		if typ != websocket.MessageBinary {
			continue
		}
		// Back-pressure: wait for credit as a local executor leg makes
		// the reader wait; a home that never returns credit is dead (the
		// heartbeat watcher closes the socket).
		if !f.take(&fl.up, home, int64(len(b)), writeTimeout) || fl.toHome(linkUpFrame, b) != nil {
			if fl.link != nil && !fl.link.up() {
				// The link went (linkLost stopped the window, waking a
				// wait for credit that could not come): keep the socket
				// (unread) until the home's fate is known, as linkLost
				// explains; a harness redialling now would find no home.
				select {
				case <-l.closing:
				case <-l.done:
				}
			}
			break
		}
		f.st.framesOut.Add(1)
		f.st.bytesOut.Add(uint64(len(b)))
		if fl.link != nil {
			f.st.linkFramesOut.Add(1)
			f.st.linkBytesOut.Add(uint64(len(b)))
		}
	}
	fl.toHome(linkUpDone, nil)
	fl.finish()
	l.Close("closed")
	f.s.event(Event{Kind: "detach", Role: roleHarness, Env: l.env, Reg: reg, Code: "forward"})
}

func (fl *fwdLeg) onDown(m *nats.Msg) {
	kind := m.Subject[len(m.Subject)-1]
	if kind == 'f' {
		kind = linkDownFrame
		fl.f.st.framesIn.Add(1)
		fl.f.st.bytesIn.Add(uint64(len(m.Data)))
	}
	fl.down(kind, m.Data)
}

// down handles a message from the home (NATS or the link); b is ours.
func (fl *fwdLeg) down(kind byte, b []byte) {
	<-fl.ready
	l := fl.l
	if l == nil {
		return
	}
	switch kind {
	case linkDownFrame:
		l.sendOwned(b) // no copy when queued
		fl.initBack()
		fl.back.add(len(b))
	case linkDownClose:
		l.Close(string(b))
	case linkDownCut:
		l.Cut()
	}
}

func (fl *fwdLeg) initBack() {
	if fl.back.f == nil {
		fl.f.mu.Lock()
		fl.back.node = fl.home
		fl.f.mu.Unlock()
		fl.back.f, fl.back.leg = fl.f, fl.key
	}
}

// fromInbox handles a message of the link's inbox (its goroutine): frames
// are gathered for one write to the harness socket (flush); a close or
// cut goes after what was gathered.
func (fl *fwdLeg) fromInbox(m inMsg) {
	<-fl.ready
	if fl.l == nil {
		return
	}
	if m.kind != linkDownFrame {
		fl.flush()
		fl.down(m.kind, m.b)
		return
	}
	fl.batch.addBuf(fl.l, m.b, m.buf)
	fl.owedFrames++
	fl.owedBytes += int64(len(m.b))
}

// flush writes what an inbox batch gathered and returns its credit (the
// inbox's goroutine).
func (fl *fwdLeg) flush() {
	fl.batch.flush()
	if fl.owedFrames > 0 {
		fl.initBack()
		fl.back.addN(fl.owedFrames, fl.owedBytes)
		fl.owedFrames, fl.owedBytes = 0, 0
	}
}

// rehome closes the socket: its home moved or died. A harness running the
// reliability extension redials and resumes at the new home.
func (fl *fwdLeg) rehome(reason string) {
	select {
	case <-fl.ready:
		if fl.l != nil && !fl.rehomed.Swap(true) {
			fl.f.st.rehomed.Add(1)
			fl.l.Close(reason)
		}
	default:
		fl.f.st.rehomed.Add(1)
	}
}

// --- homes moving, nodes dying -------------------------------------------

func (f *fabric) onHome(m *nats.Msg) {
	var a struct{ Node, Env string }
	if json.Unmarshal(m.Data, &a) != nil {
		return
	}
	f.wakeHome(a.Env)
	if a.Node == f.node {
		return
	}
	f.mu.Lock()
	if len(f.homeOf) >= 4*f.s.opts.MaxEnvironments {
		// Bounded: a node forgets which node was home (only recovery
		// times of takeovers need it).
		clear(f.homeOf)
	}
	f.homeOf[a.Env] = homeNote{a.Node, time.Now()}
	_, wasHome := f.homes[a.Env]
	moved := f.forwardersLocked(a.Env, a.Node)
	f.mu.Unlock()
	for _, fl := range moved {
		fl.rehome("home_moved")
	}
	if wasHome {
		f.abandon(a.Env)
	}
}

// abandon drops env's route: another node holds its executor now. Harness
// legs are closed, not reset: they redial and reach the new home.
func (f *fabric) abandon(env string) {
	f.st.abandoned.Add(1)
	f.mu.Lock()
	f.unsubscribeRequests(env)
	f.mu.Unlock()
	exec, harness := f.s.router.Drop(env)
	if exec != nil {
		exec.Close("executor_replaced")
	}
	for _, h := range harness {
		h.Close("home_moved")
	}
	f.s.log.Info("fleet: another node is the environment's home now", "env", env)
}
