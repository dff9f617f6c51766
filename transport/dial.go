package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// DialOptions configure DialWebSocket.
type DialOptions struct {
	// HTTPClient makes the upgrade request (custom TLS roots for wss://,
	// proxies). Default http.DefaultClient.
	HTTPClient *http.Client
	// Header holds extra headers for the upgrade request
	// ("Authorization: Bearer ...").
	Header http.Header
	// MaxMessageBytes bounds one incoming message (default
	// DefaultMaxMessageBytes).
	MaxMessageBytes int64
}

// DialError reports a websocket dial that failed; StatusCode and Body are
// the server's answer when it refused the upgrade (0 and "" when there was
// none, a network error).
type DialError struct {
	URL        string
	StatusCode int
	Body       string // the first KiB of the refusal's body, trimmed
	Err        error
}

func (e *DialError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("dial %s: HTTP %d: %s", e.URL, e.StatusCode, e.Body)
	}
	return fmt.Sprintf("dial %s: %v", e.URL, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// DialWebSocket connects to a websocket JSON-RPC peer ("ws://host:port" or
// "wss://..."): the client side of NewHandler. The returned stream answers
// Ping; something must read it (a jsonrpc.Conn's read loop) for pings and
// closes to be answered.
func DialWebSocket(ctx context.Context, url string, opts DialOptions) (*WebSocket, error) {
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: opts.HTTPClient, HTTPHeader: opts.Header})
	if err != nil {
		de := &DialError{URL: url, Err: err}
		if resp != nil {
			de.StatusCode = resp.StatusCode
			if resp.Body != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
				de.Body = strings.TrimSpace(string(b))
			}
		}
		return nil, de
	}
	c.SetReadLimit(opts.MaxMessageBytes)
	return &WebSocket{c: c, name: "exec-server websocket " + url}, nil
}
