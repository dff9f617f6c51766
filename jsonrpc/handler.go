package jsonrpc

// Handler is called on the read loop for every incoming request and
// notification, and for every response that answers no call of this Conn
// (an unsolicited response: the handler may answer it with an error to
// NoID, or ignore it), one message at a time, in arrival order. What it
// returns says where the message is served:
//
//   - Inline (the zero Action): the handler served it on the read loop,
//     before the next message is read, so a message pipelined behind it
//     sees its effect. It must not block for long, and must not Call the
//     peer (the response could not be read).
//   - Concurrent(f): f serves it on a handler goroutine; at most
//     Options.Concurrency run at once, and the read loop waits for a free
//     one. The message stays valid until f returns.
//   - Detached(f): f serves it on a goroutine of its own that does not
//     count against Concurrency: for a request that mostly waits (a long
//     poll), which must not hold a slot other requests need. The caller
//     bounds how many it starts. The message is released as soon as the
//     handler returns (a waiting request must not hold its bytes, counted
//     in a Releaser's budget, for minutes), so f must not use it: copy
//     what it needs (Message.ID aliases it).
//
// Work that has not started when the connection ends is not run. Run waits
// for work that has.
type Handler func(msg *Message) Action

// Action is a Handler's answer: where the message is served.
type Action struct {
	run      func()
	detached bool
}

// Inline is the Action of a message served by the Handler itself.
var Inline = Action{}

// Concurrent serves the message with f on the bounded handler pool.
func Concurrent(f func()) Action { return Action{run: f} }

// Detached serves the message with f on a goroutine outside the pool; the
// message is released when the Handler returns.
func Detached(f func()) Action { return Action{run: f, detached: true} }

// handle passes msg, decoded from data, to h and starts the work h returns.
// It runs on the read loop.
func (c *Conn) handle(h Handler, msg *Message, data []byte, rel Releaser) {
	msg.data, msg.rel = data, rel
	act := h(msg)
	if act.run == nil || act.detached {
		if act.run != nil {
			// A Reusable mark covers work that has returned; Detached
			// work is still running, so its buffer is released, never
			// handed to the next message.
			msg.reusable = false
			c.GoDetached(act.run)
		}
		c.release(msg, data, rel)
		return
	}
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		c.release(nil, data, rel)
		return
	}
	c.handlers.Add(1)
	go func() {
		defer func() {
			c.release(msg, data, rel)
			<-c.sem
			c.handlers.Done()
		}()
		act.run()
	}()
}

// release ends the use of an incoming message (msg, decoded from data; nil
// when its work never ran).
func (c *Conn) release(msg *Message, data []byte, rel Releaser) {
	if msg != nil && msg.released {
		return // by ReleaseNow
	}
	if rc, ok := rel.(Recycler); ok && msg != nil && msg.reusable {
		rc.Recycle(data)
	} else if rel != nil {
		rel.Release(data)
	}
	largeDone(len(data))
}

// GoDetached runs f on a goroutine of its own, outside Concurrency, that
// Run waits for like any handler's work: for work a handler starts beyond
// serving its message (streaming a response body after the reply). It is
// not a way to serve the message being handled (return Detached for
// that), and f must not use that message. Call it from a Handler or from
// work the Conn runs. It reports false, without running f, when the
// connection has ended.
func (c *Conn) GoDetached(f func()) bool {
	if c.ctx.Err() != nil {
		return false
	}
	c.handlers.Add(1)
	go func() {
		defer c.handlers.Done()
		f()
	}()
	return true
}

// ReleaseNow ends the use of a Reusable message's bytes before the work
// serving it returns (it does nothing for other messages): for work that
// is done with them and has only its reply left to send, so that the
// stream can reuse the buffer for the peer's next message, which may come
// as soon as the reply is out. Nothing may use the message afterwards
// (copy its ID first). Call it from the Handler or from Concurrent work,
// never from Detached work.
func (c *Conn) ReleaseNow(msg *Message) {
	if !msg.reusable || msg.released || msg.data == nil {
		return
	}
	c.release(msg, msg.data, msg.rel)
	msg.released = true
}
