package client

// ReadRequests returns how many process/read requests c has sent.
func ReadRequests(c *Client) uint64 { return c.reads.Load() }

// SetStreamThreshold changes the size above which WriteFile streams, and
// returns a function that restores it.
func SetStreamThreshold(n int) func() {
	old := streamThreshold
	streamThreshold = n
	return func() { streamThreshold = old }
}
