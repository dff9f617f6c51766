package server

import (
	"context"
	"sync"

	"github.com/execgo/exec-server/protocol"
)

// fsOrder keeps pipelined filesystem requests of one connection in arrival
// order where it matters: a request waits for every earlier mutation, and a
// mutation also waits for every earlier read. Reads run alongside each
// other, and nothing here delays process requests. Admission happens on
// the read loop, so "earlier" means earlier on the wire.
type fsOrder struct {
	mu        sync.Mutex
	lastWrite chan struct{}   // done when the latest admitted mutation is
	reads     []chan struct{} // reads admitted since that mutation
}

var fsMutations = map[string]bool{
	protocol.MethodFsWriteFile:       true,
	protocol.MethodFsCreateDirectory: true,
	protocol.MethodFsRemove:          true,
	protocol.MethodFsCopy:            true,
	protocol.MethodFsWriteBlock:      true,
	// Handle table changes: a later request on the handle must see the
	// open, and a close must come after earlier requests on it.
	protocol.MethodFsOpen:  true,
	protocol.MethodFsClose: true,
}

// admit registers a request and returns what it must wait for and the
// channel to close when it is done.
func (o *fsOrder) admit(method string) (wait []chan struct{}, done chan struct{}) {
	done = make(chan struct{})
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lastWrite != nil {
		wait = append(wait, o.lastWrite)
	}
	if fsMutations[method] {
		wait = append(wait, o.reads...)
		o.reads = nil
		o.lastWrite = done
	} else {
		o.reads = append(o.reads, done)
		// Forget finished reads so the list stays short.
		live := o.reads[:0]
		for _, r := range o.reads {
			select {
			case <-r:
			default:
				live = append(live, r)
			}
		}
		o.reads = live
	}
	return wait, done
}

// allDone reports whether every channel is already closed.
func allDone(chans []chan struct{}) bool {
	for _, c := range chans {
		select {
		case <-c:
		default:
			return false
		}
	}
	return true
}

// waitAll waits for every channel or for ctx.
func waitAll(ctx context.Context, chans []chan struct{}) error {
	for _, c := range chans {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
