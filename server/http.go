package server

import (
	"context"

	"github.com/execgo/exec-server/httpcall"
	"github.com/execgo/exec-server/protocol"
)

// http/request is package httpcall; the server dispatches to it.
const familyHTTP = "http"

// Bounds per connection (httpcall's).
const (
	MaxHTTPRequestsPerConn = httpcall.MaxRequestsPerConn
	MaxHTTPBodyBytes       = httpcall.MaxBodyBytes
)

func (s *Server) httpMethods(m map[string]method) {
	m[protocol.MethodHTTPRequest] = method{
		family: familyHTTP,
		decode: httpcall.Decode,
		call: func(ctx context.Context, cs *connState, p any) (any, error) {
			return cs.http.Call(ctx, cs.conn, p.(*httpcall.Params))
		},
	}
}
