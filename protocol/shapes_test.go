package protocol

import (
	"testing"

	"github.com/execgo/exec-server/internal/test/shapescan"
)

// shapePackages are the product packages that implement or call exec-server
// methods: a struct with json tags in one of them is a candidate wire shape.
// The registry/relay HTTP shapes (remote/internal/envreg) and configuration
// files are other contracts and are not scanned.
var shapePackages = []string{
	"server", "fsys", "process", "httpcall", "caproots", "fswatch",
	"netproxy", "internal/codexhome", "client",
}

// shapeExceptions lists the structs with json tags that stay outside this
// package ("dir/file.go Name", or "dir/file.go func F" for an anonymous
// struct inside F), each with why it is not an exec-server wire shape or
// why it is a second, deliberate decoding of one.
var shapeExceptions = map[string]string{
	// Strict first passes: the raw members are decoded apart so that errors
	// read as the reference's; the shapes are protocol.Fs*Params.
	"fsys/copy.go func copy":                        "raw first pass over protocol.FsCopyParams",
	"fsys/files.go func decodeWriteFile":            "raw first pass over protocol.FsWriteFileParams",
	"fsys/handles.go func open":                     "raw first pass over protocol.FsOpenParams",
	"fsys/handles.go func writeBlock":               "raw first pass over protocol.FsWriteBlockParams",
	"fsys/walk.go func walk":                        "raw first pass over protocol.FsWalkParams",
	"server/discover.go func decodeCapabilityRoots": "raw first pass over protocol.CapabilityRootsDiscoverParams",
	"process/mask.go func maskingRequested":         "peeks at one member of protocol.NetworkProxySettings before it is checked",

	// Not the exec-server wire: the server and its sandboxed helper
	// processes, files on disk, and the network proxy's own answers.
	"fsys/sandbox.go sandboxRequest":         "server to sandboxed fs helper (a re-exec of this binary)",
	"fsys/sandbox.go sandboxReply":           "sandboxed fs helper to server",
	"caproots/sandbox.go helperRequest":      "server to sandboxed capability-roots helper",
	"caproots/caproots.go func declarations": "a plugin manifest file's members, read from disk",
	"netproxy/http.go blockedBody":           "the proxy's 403 body to the sandboxed command's HTTP client",

	// The SDK's encoders and fast decoders of shapes declared here.
	"client/decode.go readBlockResult": "protocol.FsReadBlockResult with a fast decoder",
	"client/decode.go readFileResult":  "protocol.FsReadFileResult with a fast decoder",
	"client/process.go startParams":    "protocol.StartParams with int rows/cols, so an out-of-range size is refused by the server rather than truncated here",
	"client/process.go resizeParams":   "protocol.ResizeParams with int rows/cols, for the same reason",
	"client/process.go event":          "one decoder for protocol.OutputNotification, ExitedNotification and ClosedNotification",
	"client/sandbox.go policyEntry":    "the sandbox member's policy document, whose home is sandbox/policy (protocol carries it raw)",
	"client/sandbox.go policyPath":     "as policyEntry",
	"client/sandbox.go policySpecPath": "as policyEntry",
	"client/sandbox.go func policy":    "as policyEntry",
}

// TestWireShapesLiveInProtocol fails when a product package that serves or
// calls exec-server methods declares a struct with json tags that is not
// listed in shapeExceptions: a method's params, result or notification
// belongs here (docs/architecture.md, "Import rules"), and anything else
// must say why it is not one.
func TestWireShapesLiveInProtocol(t *testing.T) {
	shapescan.Check(t, "..", shapePackages, shapeExceptions, "protocol")
}
