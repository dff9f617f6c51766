package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

// The audit log: one info line per process start and per filesystem
// mutation, naming who asked (Config.Identify of the connection's upgrade),
// what (the argv, the path) and the outcome (code 0, or the wire error's).
// It is written after the request, so a refused request is in it too.

type identityKey struct{}

// withIdentity records the caller of an accepted upgrade in the request's
// context; the connection's context derives from it.
func (s *Server) withIdentity(r *http.Request) *http.Request {
	if s.cfg.Identify == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, s.cfg.Identify(r)))
}

// identityOf is the caller recorded for a connection's context: the
// Identify result, "anonymous" on a websocket without authentication,
// "stdio" on stdio.
func identityOf(ctx context.Context, stdio bool) string {
	if id, ok := ctx.Value(identityKey{}).(string); ok && id != "" {
		return id
	}
	if stdio {
		return "stdio"
	}
	return "anonymous"
}

// auditMethods are the methods the audit log records.
var auditMethods = map[string]bool{
	protocol.MethodProcessStart:      true,
	protocol.MethodFsWriteFile:       true,
	protocol.MethodFsCreateDirectory: true,
	protocol.MethodFsRemove:          true,
	protocol.MethodFsCopy:            true,
	protocol.MethodFsOpen:            true, // only mode replace (below)
}

func (s *Server) audit(cs *connState, method string, p any, err error) {
	if !auditMethods[method] || !s.cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("who", cs.identity), slog.String("method", method))
	switch v := p.(type) {
	case *protocol.StartParams:
		attrs = append(attrs, slog.String("process", v.ProcessID), slog.Any("argv", clipArgv(v.Argv)), slog.String("cwd", pathOf(v.Cwd)))
		if len(v.Sandbox) > 0 && string(v.Sandbox) != "null" {
			attrs = append(attrs, slog.Bool("sandboxed", true))
		}
	case *fsys.ParamsNote:
		// fs/writeFile: its params held its payload, decoded over them;
		// the call noted the members it decoded before that.
		attrs = append(attrs, slog.String("path", pathOf(v.Path)))
		if v.Sandboxed {
			attrs = append(attrs, slog.Bool("sandboxed", true))
		}
	case json.RawMessage:
		vs := jsonscan.Members(v, "path", "sourcePath", "destinationPath", "mode", "sandbox")
		if method == protocol.MethodFsOpen && string(vs[3]) != `"replace"` {
			return // a read
		}
		if len(vs[0]) > 0 {
			attrs = append(attrs, slog.String("path", pathOf(unquote(vs[0]))))
		}
		if len(vs[1]) > 0 {
			attrs = append(attrs, slog.String("from", pathOf(unquote(vs[1]))), slog.String("to", pathOf(unquote(vs[2]))))
		}
		if len(vs[4]) > 0 && string(vs[4]) != "null" {
			attrs = append(attrs, slog.Bool("sandboxed", true))
		}
	default:
		return // params that did not decode: no request ran
	}
	attrs = append(attrs, slog.Int("code", errorCode(err)))
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	s.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "audit", attrs...)
}

func unquote(raw []byte) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	return s
}

// pathOf renders a file: URI as its path (the URI itself when it is not one).
func pathOf(u string) string {
	if p, err := fileuri.Parse(u); err == nil {
		return p
	}
	return u
}

// clipArgv bounds what one audit line holds of an argv: each argument to
// 200 bytes and 32 arguments (a shell script passed with -c is kept
// whole in no log).
func clipArgv(argv []string) []string {
	const maxArg, maxArgs = 200, 32
	out := make([]string, 0, min(len(argv), maxArgs+1))
	for i, a := range argv {
		if i == maxArgs {
			out = append(out, fmt.Sprintf("…(%d more)", len(argv)-maxArgs))
			break
		}
		if len(a) > maxArg {
			a = fmt.Sprintf("%s…(%d bytes)", a[:maxArg], len(a))
		}
		out = append(out, a)
	}
	return out
}
