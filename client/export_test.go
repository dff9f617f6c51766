package client

import "context"

// ReadRequests returns how many process/read requests c has sent.
func ReadRequests(c *Client) uint64 { return c.reads.Load() }

// SetStreamThreshold changes the size above which WriteFile streams, and
// returns a function that restores it.
func SetStreamThreshold(n int) func() {
	old := streamThreshold
	streamThreshold = n
	return func() { streamThreshold = old }
}

// SetHandleChosenHook makes f run in every File request between choosing
// the handle and sending the request that uses it, and returns a function
// that removes it.
func SetHandleChosenHook(f func()) func() {
	testHookHandleChosen.Store(&f)
	return func() { testHookHandleChosen.Store(nil) }
}

// Generation returns c's connection generation: 1 for the first
// connection, one more for each reconnect.
func Generation(c *Client) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// TerminateByID sends process/terminate for a process c did not start.
func TerminateByID(c *Client, ctx context.Context, id string) (bool, error) {
	p := &Process{c: c, id: id}
	return p.Terminate(ctx)
}
