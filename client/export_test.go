package client

// ReadRequests returns how many process/read requests c has sent.
func ReadRequests(c *Client) uint64 { return c.reads.Load() }
