// Package caproots answers capabilityRoots/discoverV1: for each root the
// client selected on the executor, the plugin manifest, the MCP and Apps
// declarations it points to, every SKILL.md with its agents/openai.yaml,
// and the plugin manifests that namespace nested skills, read as text.
//
// Every read goes through the fs methods (fsys) under the root's own
// `sandbox`, so discovery sees exactly what fs/getMetadata, fs/walk and
// fs/open would show that policy. A policy that reads the whole disk runs
// here, call by call (fsys decides, as for any fs request); a narrower one
// runs the whole root's discovery in one sandbox helper whose view is the
// policy's, instead of one helper per file. Failures are the root's own: an
// unreadable root is its `error`, a skipped file a warning; one broken root
// never fails its siblings.
//
// What is recognized, the limits and the texts are the reference's
// (openai/codex codex-rs/exec-server, capability root discovery; measured
// against 0.171 with stdio probes).
package caproots

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/fsys"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// The reference's bounds: per root one walk (depth 6, 2,000 directories,
// 20,000 entries), files of at most 1 MiB, 16 MiB of text in all.
const (
	maxDepth       = 6
	maxDirectories = 2000
	maxEntries     = 20000
	maxFileBytes   = 1 << 20
	maxRootBytes   = 16 << 20
	// concurrentRoots bounds the roots discovered at once (each may hold a
	// sandbox helper).
	concurrentRoots = 4
)

const (
	skillFile        = "SKILL.md"
	skillMetadata    = "agents/openai.yaml"
	defaultMcpConfig = ".mcp.json"
	manifestName     = "plugin.json"
)

// manifestDirs are the plugin manifest directories, in the order a root's
// own manifest is looked for (the first found wins).
var manifestDirs = []string{".codex-plugin", ".claude-plugin", ".cursor-plugin"}

// Discover answers one request: every root in request order. Only a
// request naming too many roots fails as a whole.
func Discover(ctx context.Context, f *fsys.FS, p *protocol.CapabilityRootsDiscoverParams) (*protocol.CapabilityRootsDiscoverResult, error) {
	if len(p.Roots) > protocol.CapabilityRootsMax {
		return nil, protocol.InvalidRequest("capability root discovery accepts at most %d roots", protocol.CapabilityRootsMax)
	}
	out := make([]protocol.CapabilityRootDiscovery, len(p.Roots))
	sem := make(chan struct{}, concurrentRoots)
	var wg sync.WaitGroup
	for i, root := range p.Roots {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = discoverRoot(ctx, f, root)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, protocol.Internal("%s cancelled: %v", protocol.MethodCapabilityRootsDiscover, err)
	}
	return &protocol.CapabilityRootsDiscoverResult{Roots: out}, nil
}

// reader is the filesystem as the fs methods show it under one policy.
type reader interface {
	stat(ctx context.Context, path string) (protocol.FsMetadata, *protocol.Error)
	walk(ctx context.Context, path string) (protocol.FsWalkResult, *protocol.Error)
	// read returns at most limit+1 bytes, so a caller sees that a file
	// grew past limit without reading all of it.
	read(ctx context.Context, path string, limit int) ([]byte, *protocol.Error)
}

// fsReader calls fsys's methods with the policy attached to each call.
type fsReader struct {
	f       *fsys.FS
	h       *fsys.Handles
	sandbox json.RawMessage // nil: none
	mu      sync.Mutex
	handles int
}

func newFSReader(f *fsys.FS, sb json.RawMessage) *fsReader {
	return &fsReader{f: f, h: f.NewHandles(), sandbox: sb}
}

func (r *fsReader) close() { r.h.CloseAll() }

func (r *fsReader) call(ctx context.Context, method string, params map[string]any, out any) *protocol.Error {
	if r.sandbox != nil {
		params["sandbox"] = r.sandbox
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return protocol.Internal("%s: %v", method, err)
	}
	res, err := r.f.Call(ctx, r.h, method, raw)
	if err != nil {
		return protocol.ToError(err)
	}
	enc, err := jsonrpc.AppendValue(nil, res)
	if err == nil {
		err = json.Unmarshal(enc, out)
	}
	if err != nil {
		return protocol.Internal("%s: decoding its result: %v", method, err)
	}
	return nil
}

func (r *fsReader) stat(ctx context.Context, path string) (protocol.FsMetadata, *protocol.Error) {
	var md protocol.FsMetadata
	e := r.call(ctx, protocol.MethodFsGetMetadata, map[string]any{"path": fileuri.FromPath(path)}, &md)
	return md, e
}

func (r *fsReader) walk(ctx context.Context, path string) (protocol.FsWalkResult, *protocol.Error) {
	var w protocol.FsWalkResult
	e := r.call(ctx, protocol.MethodFsWalk, map[string]any{"path": fileuri.FromPath(path), "options": map[string]any{
		"maxDepth": maxDepth, "maxDirectories": maxDirectories, "maxEntries": maxEntries,
		"followDirectorySymlinks": true, "pruneHiddenDirectories": false,
	}}, &w)
	return w, e
}

// read streams the file as a client would (fs/open under the policy, then
// blocks), so what a policy hides is never opened and memory stays
// bounded by limit whatever the file's size.
func (r *fsReader) read(ctx context.Context, path string, limit int) ([]byte, *protocol.Error) {
	r.mu.Lock()
	r.handles++
	id := fmt.Sprintf("caproots-%d", r.handles)
	r.mu.Unlock()
	var opened protocol.FsOpenResult
	if e := r.call(ctx, protocol.MethodFsOpen, map[string]any{"handleId": id, "path": fileuri.FromPath(path)}, &opened); e != nil {
		return nil, e
	}
	defer func() {
		var closed struct{}
		_ = r.call(ctx, protocol.MethodFsClose, map[string]any{"handleId": id}, &closed)
	}()
	var data []byte
	for len(data) <= limit {
		var blk protocol.FsReadBlockResult
		n := min(limit+1-len(data), protocol.FsMaxBlockLen)
		if e := r.call(ctx, protocol.MethodFsReadBlock, map[string]any{"handleId": id, "offset": len(data), "len": n}, &blk); e != nil {
			return nil, e
		}
		data = append(data, blk.Chunk...)
		if blk.EOF || len(blk.Chunk) == 0 {
			break
		}
	}
	return data, nil
}

// scanner discovers one root.
type scanner struct {
	r      reader
	root   string // host path
	rootU  string // its URI
	budget int    // bytes of text taken so far
	d      protocol.CapabilityRootDiscovery
}

// scan is the discovery of the root at path (a host path) through r.
func scan(ctx context.Context, r reader, id, path string) protocol.CapabilityRootDiscovery {
	s := &scanner{r: r, root: path, rootU: fileuri.FromPath(path)}
	s.d = emptyDiscovery(id, s.rootU)
	md, e := r.stat(ctx, path)
	switch {
	case e != nil:
		return s.fail("failed to inspect capability root %s: %s", s.rootU, e.Message)
	case !md.IsDirectory:
		return s.fail("capability root %s is not a directory", s.rootU)
	}
	w, e := r.walk(ctx, path)
	if e != nil {
		return s.fail("failed to scan capability root %s: %s", s.rootU, e.Message)
	}
	for _, we := range w.Errors {
		s.warn("failed to scan capability path %s: %s", we.Path, we.Message)
	}
	if w.Truncated {
		s.warn("capability scan reached its traversal limit (root: %s)", s.rootU)
	}

	var skills, manifests []string
	for _, ent := range w.Entries {
		if ent.Kind != protocol.FsKindFile {
			continue
		}
		p, err := fileuri.Parse(ent.Path)
		if err != nil {
			continue
		}
		if filepath.Base(p) == skillFile {
			skills = append(skills, p)
		}
		if manifestRank(p) >= 0 {
			manifests = append(manifests, p)
		}
	}
	// Orders that do not depend on the walk's: skills by URI; manifests by
	// their plugin root, then the manifest directories' priority.
	slices.SortFunc(skills, func(a, b string) int { return strings.Compare(fileuri.FromPath(a), fileuri.FromPath(b)) })
	slices.SortStableFunc(manifests, func(a, b string) int {
		if c := strings.Compare(fileuri.FromPath(pluginRoot(a)), fileuri.FromPath(pluginRoot(b))); c != 0 {
			return c
		}
		return manifestRank(a) - manifestRank(b)
	})

	own := s.firstManifest(ctx, path)
	// The manifest that namespaces the root's skills: its own, else the
	// nearest ancestor's (a root inside a plugin).
	inherited := own
	for dir := filepath.Dir(path); inherited == nil; dir = filepath.Dir(dir) {
		inherited = s.firstManifest(ctx, dir)
		if dir == "/" {
			break
		}
	}
	seen := map[string]bool{}
	if inherited != nil {
		if p, err := fileuri.Parse(inherited.Path); err == nil {
			seen[pluginRoot(p)] = true
		}
		s.d.NamespaceManifests = append(s.d.NamespaceManifests, *inherited)
	}
	for _, m := range manifests {
		pr := pluginRoot(m)
		if seen[pr] {
			continue
		}
		seen[pr] = true
		if tf := s.readText(ctx, m); tf != nil {
			s.d.NamespaceManifests = append(s.d.NamespaceManifests, *tf)
		}
	}

	if own != nil {
		decl := s.declarations(own)
		plugin := &protocol.DiscoveredPluginFiles{Manifest: *own}
		mcp := decl.mcp
		if !decl.mcpInline && mcp == "" {
			mcp = filepath.Join(path, defaultMcpConfig)
		}
		if !decl.mcpInline && mcp != "" {
			plugin.McpConfig = s.readText(ctx, mcp)
		}
		if decl.apps != "" {
			plugin.AppsConfig = s.readText(ctx, decl.apps)
		}
		s.d.Plugin = plugin
	}

	for _, p := range skills {
		tf := s.readText(ctx, p)
		if tf == nil {
			continue
		}
		s.d.Skills = append(s.d.Skills, protocol.DiscoveredSkillFiles{
			Instructions: *tf,
			Metadata:     s.readText(ctx, filepath.Join(filepath.Dir(p), skillMetadata)),
		})
	}
	return s.d
}

func emptyDiscovery(id, uri string) protocol.CapabilityRootDiscovery {
	return protocol.CapabilityRootDiscovery{ID: id, Path: uri, Skills: []protocol.DiscoveredSkillFiles{},
		NamespaceManifests: []protocol.CapabilityTextFile{}, Warnings: []string{}}
}

func (s *scanner) warn(format string, args ...any) {
	s.d.Warnings = append(s.d.Warnings, fmt.Sprintf(format, args...))
}

func (s *scanner) fail(format string, args ...any) protocol.CapabilityRootDiscovery {
	msg := fmt.Sprintf(format, args...)
	s.d.Error = &msg
	return s.d
}

// firstManifest is dir's plugin manifest: the first of manifestDirs that
// holds one.
func (s *scanner) firstManifest(ctx context.Context, dir string) *protocol.CapabilityTextFile {
	for _, md := range manifestDirs {
		if tf := s.readText(ctx, filepath.Join(dir, md, manifestName)); tf != nil {
			return tf
		}
	}
	return nil
}

// readText reads a recognized file: nil, silently, when it is missing or
// not a regular file; nil with a warning when it cannot be read, is over
// a limit or is not UTF-8.
func (s *scanner) readText(ctx context.Context, p string) *protocol.CapabilityTextFile {
	u := fileuri.FromPath(p)
	md, e := s.r.stat(ctx, p)
	switch {
	case e != nil && e.Code == protocol.CodeNotFound:
		return nil
	case e != nil:
		s.warn("failed to inspect capability file %s: %s", u, e.Message)
		return nil
	case !md.IsFile:
		return nil
	case md.Size > maxFileBytes:
		s.warn("capability file %s exceeds the %d-byte limit", u, maxFileBytes)
		return nil
	case s.budget+int(md.Size) > maxRootBytes:
		s.warn("capability root bundle exceeds the %d-byte limit", maxRootBytes)
		return nil
	}
	data, e := s.r.read(ctx, p, maxFileBytes)
	switch {
	case e != nil:
		s.warn("failed to read capability file %s: %s", u, e.Message)
		return nil
	case len(data) > maxFileBytes || s.budget+len(data) > maxRootBytes:
		s.warn("capability file %s exceeded its read limit", u)
		return nil
	case !utf8.Valid(data):
		s.warn("capability file %s is not UTF-8: %s", u, utf8ErrorText(data))
		return nil
	}
	s.budget += len(data)
	return &protocol.CapabilityTextFile{Path: u, Contents: string(data)}
}

// declared is what a plugin manifest points to: host paths, "" for none.
type declared struct {
	mcp, apps string
	mcpInline bool // mcpServers is an object: the servers are in the manifest
}

func (s *scanner) declarations(manifest *protocol.CapabilityTextFile) declared {
	var raw struct {
		McpServers json.RawMessage `json:"mcpServers"`
		Apps       json.RawMessage `json:"apps"`
	}
	var d declared
	if json.Unmarshal([]byte(manifest.Contents), &raw) != nil {
		return d
	}
	d.mcpInline = len(raw.McpServers) > 0 && raw.McpServers[0] == '{'
	d.mcp = s.declaredPath("mcpServers", raw.McpServers, manifest.Path)
	d.apps = s.declaredPath("apps", raw.Apps, manifest.Path)
	return d
}

// declaredPath resolves a manifest's "./relative" path below the root;
// anything else is ignored, with a warning when it is a string.
func (s *scanner) declaredPath(field string, raw json.RawMessage, manifestURI string) string {
	var v string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	rel, ok := strings.CutPrefix(v, "./")
	if !ok {
		s.warn("ignoring %s in %s: path must start with `./`", field, manifestURI)
		return ""
	}
	below := rel != "" && !strings.HasPrefix(rel, "/") && !slices.Contains(strings.FieldsFunc(rel, func(r rune) bool { return r == '/' || r == '\\' }), "..")
	p := filepath.Join(s.root, rel)
	if !below || !within(p, s.root) {
		s.warn("ignoring %s in %s: path must remain below the capability root", field, manifestURI)
		return ""
	}
	return p
}

func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// manifestRank is the priority of p as a plugin manifest (its index in
// manifestDirs), or -1 when p is not one.
func manifestRank(p string) int {
	if filepath.Base(p) != manifestName {
		return -1
	}
	return slices.Index(manifestDirs, filepath.Base(filepath.Dir(p)))
}

// pluginRoot is the plugin directory of a manifest path.
func pluginRoot(manifest string) string { return filepath.Dir(filepath.Dir(manifest)) }

// utf8ErrorText words the first invalid sequence in b as Rust's Utf8Error
// does, which the reference's warning carries: "invalid utf-8 sequence of
// N bytes from index I", or "incomplete utf-8 byte sequence from index I"
// when b ends inside a sequence that was valid so far.
func utf8ErrorText(b []byte) string {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	rest := b[i:]
	width, lo, hi := 0, byte(0x80), byte(0xBF)
	switch c := rest[0]; {
	case c >= 0xC2 && c <= 0xDF:
		width = 2
	case c == 0xE0:
		width, lo = 3, 0xA0
	case c == 0xED:
		width, hi = 3, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		width = 3
	case c == 0xF0:
		width, lo = 4, 0x90
	case c == 0xF4:
		width, hi = 4, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		width = 4
	default:
		return fmt.Sprintf("invalid utf-8 sequence of 1 bytes from index %d", i)
	}
	for k := 1; k < width; k++ {
		if k >= len(rest) {
			return fmt.Sprintf("incomplete utf-8 byte sequence from index %d", i)
		}
		if rest[k] < lo || rest[k] > hi {
			return fmt.Sprintf("invalid utf-8 sequence of %d bytes from index %d", k, i)
		}
		lo, hi = 0x80, 0xBF
	}
	// Not reached: a complete valid sequence would have decoded.
	return fmt.Sprintf("invalid utf-8 sequence of %d bytes from index %d", width, i)
}
