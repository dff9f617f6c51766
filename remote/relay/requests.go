package relay

import (
	"hash/fnv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Requests for the environments homed here (ping, attach), served by a
// few shared goroutines rather than one per environment.
//
// Each environment homed here has its own request subject, so that a node
// asking for an environment with no home hears "no responders" from the
// NATS server at once. nats.go runs a goroutine per callback subscription:
// one per homed environment, about 5 MB of stacks on a survivor holding
// 660 executors after a takeover, beside a reader goroutine per socket.
// The subscriptions now deliver into the channel of one of fabReqWorkers
// dispatchers, chosen by the environment, so one environment's requests
// are still served one at a time and in order, and an attach that waits
// (it flushes to NATS without a peer link) holds only the environments
// that share its dispatcher. nats.go delivers into a channel without
// blocking: a full one drops the message and counts a slow consumer
// (fabStats.slow); the request then fails after fabRequestWait, and its
// caller answers as for a home that does not answer (a /connect says the
// environment is offline, a harness socket's attach route_unavailable).

const (
	// fabReqWorkers: dispatchers of the environments' requests.
	fabReqWorkers = 8
	// fabReqQueue: requests waiting per dispatcher (a takeover brings
	// a few hundred attaches and pings at once).
	fabReqQueue = 1024
	// reqPrefix is the subject prefix of an environment's requests.
	reqPrefix = "rly.req."
)

// startRequests starts the dispatchers; they end with the server.
func (f *fabric) startRequests() {
	f.reqEnv = make(map[string]string)
	for i := range f.reqs {
		f.reqs[i] = make(chan *nats.Msg, fabReqQueue)
		f.s.wg.Add(1)
		go func(ch <-chan *nats.Msg) {
			defer f.s.wg.Done()
			for {
				select {
				case m := <-ch:
					f.dispatchRequest(m)
				case <-f.s.stop:
					return
				}
			}
		}(f.reqs[i])
	}
}

// subscribeRequests subscribes env's request subject, delivering to its
// dispatcher. f.mu is held.
func (f *fabric) subscribeRequests(env string) (*nats.Subscription, error) {
	tok := envToken(env)
	h := fnv.New32a()
	h.Write([]byte(tok))
	sub, err := f.nc.ChanSubscribe(reqPrefix+tok, f.reqs[h.Sum32()%fabReqWorkers])
	if err != nil {
		return nil, err
	}
	f.reqEnv[tok] = env
	return sub, nil
}

// unsubscribeRequests ends env's request subscription, if any. f.mu is
// held. A request already in a dispatcher's channel finds no environment
// and is dropped, as nats.go drops an unsubscribed callback's.
func (f *fabric) unsubscribeRequests(env string) {
	if sub := f.homes[env]; sub != nil {
		sub.Unsubscribe()
		delete(f.homes, env)
		delete(f.reqEnv, envToken(env))
	}
}

// dispatchRequest serves one request on its dispatcher.
func (f *fabric) dispatchRequest(m *nats.Msg) {
	tok, ok := strings.CutPrefix(m.Subject, reqPrefix)
	if !ok {
		return
	}
	f.mu.Lock()
	env, ok := f.reqEnv[tok]
	f.mu.Unlock()
	if ok {
		f.onRequest(env, m)
	}
}
