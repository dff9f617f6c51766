// Package policy is what a sandbox allows, apart from how the kernel
// enforces it (package sandbox): it parses the protocol's sandbox parameter
// (Parse), resolves it into a Plan of host paths (Resolve) and decides
// sandboxDenied (Denial). It makes no namespace, Landlock or seccomp call
// and imports no golang.org/x/sys/unix (internal/test/deptest checks it).
package policy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/internal/serde"
	"github.com/execgo/exec-server/protocol"
)

// Policy is the sandbox parameter of fs methods and process/start (a
// FileSystemSandboxContext). Members this server has no use for are
// checked as the reference checks them and otherwise ignored; unknown
// members are ignored, as the reference ignores them.
type Policy struct {
	Permissions         Permissions
	WindowsSandboxLevel string
	// WindowsSandboxProxySettingsMode is "reconcile", "preserve" or "".
	WindowsSandboxProxySettingsMode string     `json:",omitempty"`
	Cwd                             *Location  `json:",omitempty"`
	WorkspaceRoots                  []Location `json:",omitempty"`
	UserHomeDir                     *Location  `json:",omitempty"`
	// TemporaryDirectories is nil when absent or null.
	TemporaryDirectories []Location `json:",omitempty"`
	// PolicyContext, when present, overrides Cwd (when it has one) and
	// WorkspaceRoots (always), as the reference does: see EffectiveCwd and
	// EffectiveRoots.
	PolicyContext *PolicyContext `json:",omitempty"`
	// UseLegacyLandlock is accepted and ignored: this server never builds
	// a Landlock-only filesystem sandbox.
	UseLegacyLandlock bool `json:",omitempty"`
}

// PolicyContext is the policyContext member.
type PolicyContext struct {
	Cwd            *Location  `json:",omitempty"`
	WorkspaceRoots []Location `json:",omitempty"`
}

// Location is a file: URI of the policy. The reference accepts a URI with a
// foreign host in cwd, workspaceRoots, userHomeDir, temporaryDirectories
// and policyContext, and refuses it only where it is used; Foreign keeps
// that apart (Path is then empty).
type Location struct {
	Path    string `json:",omitempty"` // clean absolute host path
	URI     string `json:",omitempty"` // as sent, for error texts
	Foreign bool   `json:",omitempty"`
}

// Permissions is the tagged permission profile.
type Permissions struct {
	Type           string // disabled | external | managed
	Network        string // restricted | enabled (external and managed)
	FileSystemType string // unrestricted | restricted (managed)
	// Entries of a restricted file system, in the order sent.
	Entries []Entry `json:",omitempty"`
	// GlobScanMaxDepth bounds the scan for deny glob matches; 0 when
	// absent (Resolve then uses its default).
	GlobScanMaxDepth uint64 `json:",omitempty"`
}

// Entry is one file_system entry.
type Entry struct {
	Path EntryPath
	// Access: read, write, or none for both "deny" and "none".
	Access Access
	// SkipMissing is missing_path_behavior "skip": the entry is dropped
	// when its path does not exist.
	SkipMissing bool `json:",omitempty"`
}

// EntryPath is a FileSystemPath.
type EntryPath struct {
	Type    string // path | glob_pattern | special
	Path    string `json:",omitempty"` // type path: clean absolute host path
	Pattern string `json:",omitempty"` // type glob_pattern, as sent
	// Kind of a special path: root, minimal, current_working_directory,
	// project_roots, tmpdir, slash_tmp or unknown (ignored).
	Kind    string `json:",omitempty"`
	Subpath string `json:",omitempty"` // project_roots / current_working_directory
}

// Dynamic reports whether the entry needs the context's cwd: a relative
// glob pattern, or the workspace roots.
func (e Entry) Dynamic() bool {
	switch e.Path.Type {
	case "glob_pattern":
		return !strings.HasPrefix(e.Path.Pattern, "/")
	case "special":
		return e.Path.Kind == "project_roots" || e.Path.Kind == "current_working_directory"
	}
	return false
}

// EffectiveCwd is the cwd the entries resolve against: policyContext's
// when it has one, else the top-level one (observed on the reference: a
// relative glob followed policyContext.cwd when both were set). Nil when
// neither is there.
func (p *Policy) EffectiveCwd() *Location {
	if p.PolicyContext != nil && p.PolicyContext.Cwd != nil {
		return p.PolicyContext.Cwd
	}
	return p.Cwd
}

// EffectiveRoots are what project_roots and current_working_directory
// resolve to: policyContext.workspaceRoots whenever policyContext is
// present (even when it has none: observed, a present but empty
// policyContext left the top-level roots unused), else workspaceRoots.
func (p *Policy) EffectiveRoots() []Location {
	if p.PolicyContext != nil {
		return p.PolicyContext.WorkspaceRoots
	}
	return p.WorkspaceRoots
}

// Parse validates raw (absent or null means no sandbox and returns nil).
// Errors are -32602 with the reference's (serde's) texts: members are
// checked in the order they come, and a missing member is reported after
// every present one has been checked. A context whose entries need a cwd
// and has none is -32602; a foreign file: URI used where it matters is
// -32600, as in the reference.
func Parse(raw json.RawMessage) (*Policy, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	// The member walk (jsonscan.EachMember) skips values without checking
	// their literals ("[A]" passes); the reference never sees invalid JSON.
	if !json.Valid(raw) {
		return nil, invalid("invalid sandbox: not valid JSON")
	}
	const ctx = "struct WireFileSystemSandboxContext"
	if raw[0] != '{' {
		if bytes.Equal(raw, []byte("[]")) {
			return nil, invalid("invalid length 0, expected %s with 10 elements", ctx)
		}
		return nil, invalid("invalid type: %s, expected %s", serde.Unexpected(raw), ctx)
	}
	var p Policy
	seen := map[string]bool{}
	err := members(raw, func(key string, val []byte) error {
		switch key {
		case "permissions", "windowsSandboxLevel", "windowsSandboxProxySettingsMode", "cwd",
			"workspaceRoots", "userHomeDir", "temporaryDirectories", "policyContext", "useLegacyLandlock":
			if seen[key] {
				return invalid("duplicate field `%s`", key)
			}
			seen[key] = true
		}
		var err error
		switch key {
		case "permissions":
			p.Permissions, err = parsePermissions(val)
		case "windowsSandboxLevel":
			p.WindowsSandboxLevel, err = topVariant(val, "one of `disabled`, `restricted-token`, `elevated`, `mxc`", "disabled", "restricted-token", "elevated", "mxc")
		case "windowsSandboxProxySettingsMode":
			if !isNull(val) {
				p.WindowsSandboxProxySettingsMode, err = topVariant(val, "`reconcile` or `preserve`", "reconcile", "preserve")
			}
		case "cwd":
			p.Cwd, err = optLocation(val)
		case "userHomeDir":
			p.UserHomeDir, err = optLocation(val)
		case "workspaceRoots":
			p.WorkspaceRoots, err = locations(val)
		case "temporaryDirectories":
			if !isNull(val) {
				p.TemporaryDirectories, err = locations(val)
			}
		case "policyContext":
			p.PolicyContext, err = parsePolicyContext(val)
		case "useLegacyLandlock":
			if val[0] != 't' && val[0] != 'f' {
				err = invalid("invalid type: %s, expected a boolean", numberAsIs(val))
			}
			p.UseLegacyLandlock = val[0] == 't'
		}
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case !seen["permissions"]:
		return nil, invalid("missing field `permissions`")
	case !seen["windowsSandboxLevel"]:
		return nil, invalid("missing field `windowsSandboxLevel`")
	}
	if err := p.checkContext(); err != nil {
		return nil, err
	}
	return &p, nil
}

// checkContext refuses what the reference refuses once the context is
// decoded: dynamic entries without a cwd (-32602), and a foreign cwd or
// workspace root that dynamic entries would use (-32600).
func (p *Policy) checkContext() error {
	var dynamic, roots bool
	for _, e := range p.Permissions.Entries {
		dynamic = dynamic || e.Dynamic()
		roots = roots || (e.Path.Type == "special" && (e.Path.Kind == "project_roots" || e.Path.Kind == "current_working_directory"))
	}
	if !dynamic {
		return nil
	}
	cwd := p.EffectiveCwd()
	if cwd == nil {
		return invalid("file system sandbox context with dynamic permissions requires cwd")
	}
	if cwd.Foreign {
		return protocol.InvalidRequest("'%s' is invalid on 'linux'", cwd.URI)
	}
	if roots {
		for _, r := range p.EffectiveRoots() {
			if r.Foreign {
				return protocol.InvalidRequest("file system sandbox workspace root is not native to this exec-server host: '%s' is invalid on 'linux'", r.URI)
			}
		}
	}
	return nil
}

// parsePolicyContext decodes policyContext (null is absent; an empty array
// is an empty context, as serde reads a struct from a sequence).
func parsePolicyContext(val []byte) (*PolicyContext, error) {
	const want = "struct WireFileSystemPolicyContext"
	switch {
	case isNull(val):
		return nil, nil
	case val[0] == '[':
		// serde reads a struct from a sequence too: [cwd, workspaceRoots]
		// (observed: [1] fails on cwd, ["file:///w"] is accepted).
		var elems []json.RawMessage
		if err := json.Unmarshal(val, &elems); err != nil {
			return nil, invalid("invalid sandbox: %v", err)
		}
		if len(elems) > 2 {
			return nil, invalid("invalid length %d, expected %s with 2 elements", len(elems), want)
		}
		var pc PolicyContext
		var err error
		if len(elems) > 0 {
			pc.Cwd, err = optLocation(elems[0])
		}
		if err == nil && len(elems) > 1 {
			pc.WorkspaceRoots, err = locations(elems[1])
		}
		if err != nil {
			return nil, err
		}
		return &pc, nil
	case val[0] != '{':
		return nil, invalid("invalid type: %s, expected %s", numberAsIs(val), want)
	}
	var pc PolicyContext
	var seenCwd, seenRoots bool
	err := members(val, func(key string, v []byte) error {
		var err error
		switch key {
		case "cwd":
			if seenCwd {
				return invalid("duplicate field `cwd`")
			}
			seenCwd = true
			pc.Cwd, err = optLocation(v)
		case "workspaceRoots":
			if seenRoots {
				return invalid("duplicate field `workspaceRoots`")
			}
			seenRoots = true
			pc.WorkspaceRoots, err = locations(v)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &pc, nil
}

// optLocation decodes an optional file: URI of the context.
func optLocation(val []byte) (*Location, error) {
	if isNull(val) {
		return nil, nil
	}
	l, err := location(val)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// locations decodes a sequence of file: URIs of the context.
func locations(val []byte) ([]Location, error) {
	if val[0] != '[' {
		return nil, invalid("invalid type: %s, expected a sequence", numberAsIs(val))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(val, &elems); err != nil {
		return nil, invalid("invalid sandbox: %v", err)
	}
	out := make([]Location, 0, len(elems))
	for _, e := range elems {
		l, err := location(e)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// location decodes one file: URI of the context; a foreign host is kept
// (refused where it is used).
func location(val []byte) (Location, error) {
	if val[0] != '"' {
		return Location{}, invalid("invalid type: %s, expected a string", numberAsIs(val))
	}
	uri, err := stringValue(val)
	if err != nil {
		return Location{}, err
	}
	path, err := parseURI(uri)
	if pe, ok := err.(*protocol.Error); ok && pe.Code == protocol.CodeInvalidRequest {
		return Location{URI: uri, Foreign: true}, nil
	}
	if err != nil {
		return Location{}, err
	}
	return Location{Path: path, URI: uri}, nil
}

// parseURI is fileuri.Parse with the reference's text for a NUL byte.
func parseURI(uri string) (string, error) {
	path, err := fileuri.Parse(uri)
	if pe, ok := err.(*protocol.Error); ok && pe.Code == protocol.CodeInvalidParams && strings.Contains(pe.Message, "NUL") {
		return "", invalid("'%s' is invalid on 'linux'", uri)
	}
	return path, err
}

// parsePermissions checks an internally tagged ExecPermissionProfile.
func parsePermissions(raw []byte) (Permissions, error) {
	var perm Permissions
	if raw[0] != '{' {
		return perm, invalid("invalid type: %s, expected internally tagged enum ExecPermissionProfile", serde.Unexpected(raw))
	}
	// The reference buffers the whole profile before looking at it: an
	// integer out of 64-bit range anywhere in it fails first.
	if err := bigIntegers(raw); err != nil {
		return perm, err
	}
	tag, err := tagOf(raw, "one of `managed`, `disabled`, `external`", "managed", "disabled", "external")
	if err != nil {
		return perm, err
	}
	perm.Type = tag
	if tag == "disabled" {
		return perm, nil
	}
	var seenNet, seenFS bool
	err = members(raw, func(key string, val []byte) error {
		switch {
		case key == "network":
			if seenNet {
				return invalid("duplicate field `network`")
			}
			seenNet = true
			v, err := variant(val, "string or map", "`restricted` or `enabled`", "restricted", "enabled")
			perm.Network = v
			return err
		case key == "file_system" && tag == "managed":
			if seenFS {
				return invalid("duplicate field `file_system`")
			}
			seenFS = true
			return parseFileSystem(val, &perm)
		}
		return nil
	})
	switch {
	case err != nil:
		return perm, err
	case tag == "managed" && !seenFS:
		return perm, invalid("missing field `file_system`")
	case !seenNet:
		return perm, invalid("missing field `network`")
	}
	return perm, nil
}

// parseFileSystem checks an internally tagged ExecManagedFileSystemPermissions.
func parseFileSystem(val []byte, perm *Permissions) error {
	if val[0] != '{' {
		return invalid("invalid type: %s, expected internally tagged enum ExecManagedFileSystemPermissions", serde.Unexpected(val))
	}
	v, err := indexedTag(val, "type", "`restricted` or `unrestricted`", []string{"restricted", "unrestricted"}, nil)
	if err != nil {
		return err
	}
	perm.FileSystemType = v
	if v != "restricted" {
		return nil
	}
	var seenEntries, seenDepth bool
	err = members(val, func(key string, v []byte) error {
		switch key {
		case "entries":
			if seenEntries {
				return invalid("duplicate field `entries`")
			}
			seenEntries = true
			entries, err := parseEntries(v)
			perm.Entries = entries
			return err
		case "glob_scan_max_depth":
			if seenDepth {
				return invalid("duplicate field `glob_scan_max_depth`")
			}
			seenDepth = true
			if isNull(v) {
				return nil
			}
			const want = "a nonzero usize"
			if !isNumber(v) {
				return invalid("invalid type: %s, expected %s", serde.Unexpected(v), want)
			}
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil || n == 0 {
				if bytes.ContainsAny(v, ".eE") {
					return invalid("invalid type: %s, expected %s", serde.Unexpected(v), want)
				}
				return invalid("invalid value: %s, expected %s", serde.Unexpected(v), want)
			}
			perm.GlobScanMaxDepth = n
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !seenEntries {
		return invalid("missing field `entries`")
	}
	if perm.Entries == nil {
		perm.Entries = []Entry{}
	}
	return nil
}

func parseEntries(val []byte) ([]Entry, error) {
	if val[0] != '[' {
		return nil, invalid("invalid type: %s, expected a sequence", serde.Unexpected(val))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(val, &elems); err != nil {
		return nil, invalid("invalid sandbox: %v", err)
	}
	entries := make([]Entry, 0, len(elems))
	for _, el := range elems {
		e, err := parseEntry(el)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// parseEntry checks one ExecFileSystemSandboxEntry (a plain struct: its
// members are checked in order).
func parseEntry(val []byte) (Entry, error) {
	var e Entry
	const want = "struct ExecFileSystemSandboxEntry"
	if val[0] == '[' {
		// The sequence form of the struct, [path, access,
		// missing_path_behavior] (observed: [path, access] is accepted).
		var elems []json.RawMessage
		if err := json.Unmarshal(val, &elems); err != nil {
			return e, invalid("invalid sandbox: %v", err)
		}
		if len(elems) < 2 || len(elems) > 3 {
			return e, invalid("invalid length %d, expected %s with 3 elements", len(elems), want)
		}
		obj := []byte(`{"path":` + string(elems[0]) + `,"access":` + string(elems[1]))
		if len(elems) == 3 {
			obj = append(append(obj, `,"missing_path_behavior":`...), elems[2]...)
		}
		val = append(obj, '}')
	}
	if val[0] != '{' {
		return e, invalid("invalid type: %s, expected %s", serde.Unexpected(val), want)
	}
	var seenPath, seenAccess, seenMissing bool
	err := members(val, func(key string, v []byte) error {
		switch key {
		case "path":
			if seenPath {
				return invalid("duplicate field `path`")
			}
			seenPath = true
			p, err := parseEntryPath(v)
			e.Path = p
			return err
		case "access":
			if seenAccess {
				return invalid("duplicate field `access`")
			}
			seenAccess = true
			a, err := variant(v, "string or map", "one of `read`, `write`, `deny`, `none`", "read", "write", "deny", "none")
			switch a {
			case "read":
				e.Access = AccessRead
			case "write":
				e.Access = AccessWrite
			default:
				e.Access = AccessNone
			}
			return err
		case "missing_path_behavior":
			if seenMissing {
				return invalid("duplicate field `missing_path_behavior`")
			}
			seenMissing = true
			if isNull(v) {
				return nil
			}
			_, err := variant(v, "string or map", "`skip`", "skip")
			e.SkipMissing = err == nil
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return e, err
	case !seenPath:
		return e, invalid("missing field `path`")
	case !seenAccess:
		return e, invalid("missing field `access`")
	}
	return e, nil
}

// parseEntryPath checks an internally tagged ExecFileSystemPath.
func parseEntryPath(val []byte) (EntryPath, error) {
	var p EntryPath
	if val[0] != '{' {
		return p, invalid("invalid type: %s, expected internally tagged enum ExecFileSystemPath", serde.Unexpected(val))
	}
	tag, err := indexedTag(val, "type", "one of `path`, `glob_pattern`, `special`", []string{"path", "glob_pattern", "special"}, nil)
	if err != nil {
		return p, err
	}
	p.Type = tag
	field := map[string]string{"path": "path", "glob_pattern": "pattern", "special": "value"}[tag]
	var seen bool
	err = members(val, func(key string, v []byte) error {
		if key != field {
			return nil
		}
		if seen {
			return invalid("duplicate field `%s`", key)
		}
		seen = true
		switch tag {
		case "path":
			s, err := stringOf(v)
			if err != nil {
				return err
			}
			path, err := parseURI(s)
			if pe, ok := err.(*protocol.Error); ok && pe.Code == protocol.CodeInvalidRequest {
				return protocol.InvalidRequest("invalid sandbox permission path URI: %s", pe.Message)
			}
			p.Path = path
			return err
		case "glob_pattern":
			s, err := stringOf(v)
			p.Pattern = s
			return err
		default:
			return parseSpecial(v, &p)
		}
	})
	if err != nil {
		return p, err
	}
	if !seen {
		return p, invalid("missing field `%s`", field)
	}
	return p, nil
}

// parseSpecial checks an internally tagged FileSystemSpecialPath. Its
// variant indexes (a number as the tag) are root, minimal,
// current_working_directory (project_roots is another name for it), tmpdir,
// slash_tmp, unknown, as observed on the reference.
func parseSpecial(val []byte, p *EntryPath) error {
	if val[0] != '{' {
		return invalid("invalid type: %s, expected internally tagged enum FileSystemSpecialPath", serde.Unexpected(val))
	}
	names := []string{"root", "minimal", "current_working_directory", "project_roots", "tmpdir", "slash_tmp", "unknown"}
	byIndex := []string{"root", "minimal", "current_working_directory", "tmpdir", "slash_tmp", "unknown"}
	kind, err := indexedTag(val, "kind", "one of `root`, `minimal`, `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`", names, byIndex)
	if err != nil {
		return err
	}
	p.Kind = kind
	switch kind {
	case "project_roots", "current_working_directory", "unknown":
	default:
		return nil
	}
	var seenPath, seenSub bool
	err = members(val, func(key string, v []byte) error {
		switch {
		case key == "subpath":
			if seenSub {
				return invalid("duplicate field `subpath`")
			}
			seenSub = true
			if isNull(v) {
				return nil
			}
			s, err := stringOf(v)
			p.Subpath = s
			return err
		case key == "path" && kind == "unknown":
			if seenPath {
				return invalid("duplicate field `path`")
			}
			seenPath = true
			_, err := stringOf(v)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if kind == "unknown" {
		p.Subpath = ""
		if !seenPath {
			return invalid("missing field `path`")
		}
	}
	return nil
}

// indexedTag reads the tag member of an internally tagged enum nested in
// the profile: a string names a variant, a non-negative integer is a
// variant index into byIndex (names when nil).
func indexedTag(obj []byte, name, expected string, names, byIndex []string) (string, error) {
	if byIndex == nil {
		byIndex = names
	}
	var tag []byte
	err := members(obj, func(key string, val []byte) error {
		if key == name && tag == nil {
			tag = val
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	switch {
	case tag == nil:
		return "", invalid("missing field `%s`", name)
	case tag[0] == '"':
		return variant(tag, "variant identifier", expected, names...)
	case isNumber(tag) && tag[0] != '-' && !bytes.ContainsAny(tag, ".eE"):
		n, err := strconv.ParseUint(string(tag), 10, 64)
		if err == nil && n < uint64(len(byIndex)) {
			return byIndex[n], nil
		}
		return "", invalid("invalid value: %s, expected variant index 0 <= i < %d", serde.Unexpected(tag), len(byIndex))
	}
	return "", invalid("invalid type: %s, expected variant identifier", serde.Unexpected(tag))
}

// tagOf reads the "type" tag of the top-level profile.
func tagOf(obj []byte, expected string, variants ...string) (string, error) {
	var tag []byte
	err := members(obj, func(key string, val []byte) error {
		if key == "type" && tag == nil {
			tag = val
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if tag == nil {
		return "", invalid("missing field `type`")
	}
	if tag[0] != '"' {
		return "", invalid("invalid type: %s, expected variant identifier", numberAsIs(tag))
	}
	return variant(tag, "variant identifier", expected, variants...)
}

// topVariant is variant for a top-level member, whose numbers the
// reference describes only as "number".
func topVariant(val []byte, expected string, variants ...string) (string, error) {
	if isNumber(val) {
		return "", invalid("invalid type: number, expected string or map")
	}
	return variant(val, "string or map", expected, variants...)
}

// variant decodes a unit enum variant written as a JSON string.
func variant(raw []byte, wantType, expected string, variants ...string) (string, error) {
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid("invalid type: %s, expected %s", serde.Unexpected(raw), wantType)
	}
	for _, v := range variants {
		if s == v {
			return s, nil
		}
	}
	return "", invalid("unknown variant `%s`, expected %s", s, expected)
}

// stringOf decodes a string member of the profile.
func stringOf(v []byte) (string, error) {
	if v[0] != '"' {
		return "", invalid("invalid type: %s, expected a string", serde.Unexpected(v))
	}
	return stringValue(v)
}

func stringValue(v []byte) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", invalid("invalid sandbox: %v", err)
	}
	return s, nil
}

// members walks an object's members in order, with keys decoded.
func members(obj []byte, f func(key string, val []byte) error) error {
	err := jsonscan.EachMember(obj, func(k, v []byte) error {
		key := string(k) // as written, without its quotes
		if bytes.IndexByte(k, '\\') >= 0 && json.Unmarshal([]byte(`"`+key+`"`), &key) != nil {
			return invalid("invalid object key `%s`", k)
		}
		return f(key, v)
	})
	if err != nil {
		if pe, ok := err.(*protocol.Error); ok {
			return pe
		}
		return invalid("invalid sandbox: %v", err)
	}
	return nil
}

// bigIntegers reports the first integer of raw outside 64-bit range as the
// reference's buffering does.
func bigIntegers(raw []byte) error {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '"' {
			j := jsonscan.ClosingQuote(raw, i+1)
			if j < 0 {
				return nil
			}
			i = j
			continue
		}
		if c != '-' && (c < '0' || c > '9') {
			continue
		}
		j := i + 1
		for j < len(raw) && strings.IndexByte("0123456789.eE+-", raw[j]) >= 0 {
			j++
		}
		num := raw[i:j]
		i = j - 1
		if bytes.ContainsAny(num, ".eE") {
			continue
		}
		if num[0] == '-' {
			if _, err := strconv.ParseInt(string(num), 10, 64); err != nil {
				return invalid("invalid type: integer `%s` as i128, expected any value", num)
			}
		} else if _, err := strconv.ParseUint(string(num), 10, 64); err != nil {
			return invalid("invalid type: integer `%s` as u128, expected any value", num)
		}
	}
	return nil
}

// numberAsIs is unexpected, except that a number is only "number" (a
// value the reference buffered before reading it).
func numberAsIs(v []byte) string {
	if isNumber(v) {
		return "number"
	}
	return serde.Unexpected(v)
}

func isNumber(v []byte) bool { return v[0] == '-' || (v[0] >= '0' && v[0] <= '9') }

func isNull(v []byte) bool { return bytes.Equal(v, []byte("null")) }

func invalid(format string, args ...any) *protocol.Error {
	return protocol.InvalidParams(format, args...)
}
