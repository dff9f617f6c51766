package server

import (
	"context"
	"sync"

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

// httpStates maps a connection to its state; an entry goes when the
// connection ends.
var httpStates sync.Map // *connState → *httpcall.ConnState

func (cs *connState) httpState() *httpcall.ConnState {
	if v, ok := httpStates.Load(cs); ok {
		return v.(*httpcall.ConnState)
	}
	v, loaded := httpStates.LoadOrStore(cs, &httpcall.ConnState{})
	if !loaded {
		go func() {
			<-cs.conn.Done()
			httpStates.Delete(cs)
		}()
	}
	return v.(*httpcall.ConnState)
}

func (s *Server) httpMethods(m map[string]method) {
	m[protocol.MethodHTTPRequest] = method{
		family: familyHTTP,
		decode: httpcall.Decode,
		call: func(ctx context.Context, cs *connState, p any) (any, error) {
			return cs.httpState().Call(ctx, cs.conn, p.(*httpcall.Params))
		},
	}
}
