package caproots

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/protocol"
	"github.com/execgo/exec-server/sandbox"
	"github.com/execgo/exec-server/sandbox/policy"
)

// opName is the sandbox helper operation that discovers one root inside
// the policy's view.
const opName = "caproots"

// helperTimeout bounds one root's discovery in a helper (its start
// included); the request's context can end it earlier.
const helperTimeout = 60 * time.Second

func init() { sandbox.RegisterOp(opName, runInHelper) }

// helperRequest is what the server hands the helper.
type helperRequest struct {
	ID   string `json:"id"`
	Path string `json:"path"` // host path
}

// discoverRoot discovers one root under its policy.
func discoverRoot(ctx context.Context, f *fsys.FS, req protocol.CapabilityRootDiscoverRequest) protocol.CapabilityRootDiscovery {
	path, err := fileuri.Parse(req.Path)
	if err != nil { // decode checked it; kept for callers that did not
		d := emptyDiscovery(req.ID, req.Path)
		msg := fmt.Sprintf("failed to inspect capability root %s: %s", req.Path, protocol.ToError(err).Message)
		d.Error = &msg
		return d
	}
	uri := fileuri.FromPath(path)
	plan, err := narrowPlan(req.Sandbox)
	if err != nil {
		d := emptyDiscovery(req.ID, uri)
		msg := fmt.Sprintf("failed to inspect capability root %s: %s", uri, protocol.ToError(err).Message)
		d.Error = &msg
		return d
	}
	if plan == nil {
		r := newFSReader(f, req.Sandbox)
		defer r.close()
		return scan(ctx, r, req.ID, path)
	}
	// Fail closed: a policy that narrows reads is never discovered with
	// less confinement.
	if s := sandbox.Probe(); !s.Available {
		d := emptyDiscovery(req.ID, uri)
		msg := fmt.Sprintf("filesystem sandbox is unavailable on this executor: missing %s", s.Missing)
		d.Error = &msg
		return d
	}
	return runConfined(ctx, plan, req.ID, path)
}

// narrowPlan is the plan of a policy that hides part of the filesystem
// from reads, or nil when there is no policy or it reads everything (the
// fs methods then run in this process anyway).
func narrowPlan(raw json.RawMessage) (*policy.Plan, error) {
	pol, err := policy.Parse(raw)
	if err != nil || pol == nil {
		return nil, err
	}
	plan, err := policy.Resolve(pol, policy.ServerEnv())
	if err != nil || plan.FullRead {
		return nil, err
	}
	return plan, nil
}

// runConfined discovers the root at path in one helper confined by plan.
func runConfined(ctx context.Context, plan *policy.Plan, id, path string) protocol.CapabilityRootDiscovery {
	req, _ := json.Marshal(helperRequest{ID: id, Path: path})
	rctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	out, file, err := sandbox.Run(rctx, plan, opName, req)
	if file != nil {
		file.Close()
	}
	var d protocol.CapabilityRootDiscovery
	if err == nil {
		err = json.Unmarshal(out, &d)
	}
	if err != nil {
		uri := fileuri.FromPath(path)
		d = emptyDiscovery(id, uri)
		msg := fmt.Sprintf("failed to scan capability root %s: filesystem sandbox helper failed: %v", uri, err)
		if rctx.Err() != nil && ctx.Err() == nil {
			msg = fmt.Sprintf("failed to scan capability root %s: not finished within %v", uri, helperTimeout)
		}
		d.Error = &msg
	}
	return d
}

// runInHelper is the helper's side: inside the view, the policy is the
// kernel's business, so the scan reads with no policy of its own.
func runInHelper(req []byte) ([]byte, *os.File) {
	var r helperRequest
	if err := json.Unmarshal(req, &r); err != nil {
		msg := fmt.Sprintf("capability discovery helper: malformed request: %v", err)
		d := emptyDiscovery("", "")
		d.Error = &msg
		b, _ := json.Marshal(d)
		return b, nil
	}
	rd := newFSReader(fsys.New(fsys.Options{MaxHandles: 4}), nil)
	defer rd.close()
	b, _ := json.Marshal(scan(context.Background(), rd, r.ID, r.Path))
	return b, nil
}
