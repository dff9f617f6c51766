package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestParseMatchesReference: each text is what the reference (codex
// exec-server 0.169.0) answered for the same sandbox parameter of
// fs/getMetadata.
func TestParseMatchesReference(t *testing.T) {
	const ok = ""
	for _, c := range []struct{ in, want string }{
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, ok},
		{`{"permissions":{"type":"external","network":"enabled"},"windowsSandboxLevel":"elevated","bogusField":1}`, ok},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"mxc"}`, ok},
		{`{"windowsSandboxLevel":"disabled"}`, "missing field `permissions`"},
		{`{"permissions":{"type":"disabled"}}`, "missing field `windowsSandboxLevel`"},
		{`{"permissions":{"type":"bogus"},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`"},
		{`{"permissions":{"type":"read-only"},"windowsSandboxLevel":"disabled"}`, "unknown variant `read-only`, expected one of `managed`, `disabled`, `external`"},
		{`{"permissions":{},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"Type":"disabled"},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"zz"}`, "unknown variant `zz`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`"},
		{`{"permissions":{"type":"external"},"windowsSandboxLevel":"disabled"}`, "missing field `network`"},
		{`{"permissions":{"type":"external","network":"zz"},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `enabled`"},
		{`{"permissions":{"type":"managed","network":"enabled"},"windowsSandboxLevel":"disabled"}`, "missing field `file_system`"},
		{`{"permissions":{"type":"managed","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, "missing field `network`"},
		{`{"permissions":{"type":"managed"},"windowsSandboxLevel":"disabled"}`, "missing field `file_system`"},
		{`{"permissions":{"type":"managed","network":"zz"},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `enabled`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"zz"}},"windowsSandboxLevel":"disabled"}`, "unknown variant `zz`, expected `restricted` or `unrestricted`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{}},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":3},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum ExecManagedFileSystemPermissions"},
		{`{"permissions":{"type":"bogus"},"windowsSandboxLevel":"zz"}`, "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`"},
		{`{"windowsSandboxLevel":"zz","permissions":{"type":"bogus"}}`, "unknown variant `zz`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`"},
		{`{"permissions":{"type":true},"windowsSandboxLevel":"disabled"}`, "invalid type: boolean `true`, expected variant identifier"},
		{`{"permissions":{"type":null},"windowsSandboxLevel":"disabled"}`, "invalid type: null, expected variant identifier"},
		{`{"permissions":3,"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum ExecPermissionProfile"},
		{`{"permissions":null,"windowsSandboxLevel":"disabled"}`, "invalid type: null, expected internally tagged enum ExecPermissionProfile"},
		{`{"permissions":"x","windowsSandboxLevel":"disabled"}`, `invalid type: string "x", expected internally tagged enum ExecPermissionProfile`},
		{`{"permissions":{"type":"external","network":3},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected string or map"},
		{`{"permissions":{"type":3},"windowsSandboxLevel":"disabled"}`, "invalid type: number, expected variant identifier"},
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":3}`, "invalid type: number, expected string or map"},
		{`"x"`, `invalid type: string "x", expected struct WireFileSystemSandboxContext`},
		{`[]`, "invalid length 0, expected struct WireFileSystemSandboxContext with 10 elements"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":[1]}`, "invalid type: number, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":["file:///w"]}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":true,"entries":[]}},"windowsSandboxLevel":"disabled"}`, "invalid type: boolean `true`, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[[{"type":"special","value":{"kind":"root"}},"read"]]}},"windowsSandboxLevel":"disabled"}`, ""},
		// The full context, each row checked on the reference the same way (Nov 2026),
		// but for glob_scan_max_depth 1e3, sent to it as 1000.0. A "-32600 " prefix
		// means that code instead of -32602.
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted"}},"windowsSandboxLevel":"disabled"}`, "missing field `entries`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":3}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[3]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected struct ExecFileSystemSandboxEntry"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}}}]}},"windowsSandboxLevel":"disabled"}`, "missing field `access`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"bogus"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `read`, `write`, `deny`, `none`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"Read"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `Read`, expected one of `read`, `write`, `deny`, `none`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":3}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected string or map"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":1.5}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: floating point `1.5`, expected string or map"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"none"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"access":"bogus","path":3}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `read`, `write`, `deny`, `none`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":3,"access":"bogus"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum ExecFileSystemPath"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"bogus"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `path`, `glob_pattern`, `special`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `type`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"foo"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"/abs"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":3},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"http://x/y"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "unsupported path URI scheme `http`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file://other/y"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "-32600 invalid sandbox permission path URI: 'file://other/y' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:///a%00b"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "'file:///a%00b' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:///a?b"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "query parameters are not allowed in path URIs"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:///a#b"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "fragments are not allowed in path URIs"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file://u@h/a"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid URI: invalid international domain name"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file://localhost/a"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"FILE:///a"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":""},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":3},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid value: integer `3`, expected variant index 0 <= i < 3"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":0},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":0,"path":"file:///w"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":3,"entries":[]}},"windowsSandboxLevel":"disabled"}`, "invalid value: integer `3`, expected variant index 0 <= i < 2"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":0,"entries":[]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":1}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"unrestricted","entries":3}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `pattern`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":3},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":"**/*.env"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":"/abs/**/*.env"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":"file:///abs/*.env"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special"},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `value`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":3},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected internally tagged enum FileSystemSpecialPath"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `kind`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"bogus"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected one of `root`, `minimal`, `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"Root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `Root`, expected one of `root`, `minimal`, `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown","path":":future","subpath":null}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown","path":3}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"unknown","path":"x","subpath":3}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root","extra":1}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":0}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":1}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":2}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":3}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":4}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":5}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "missing field `path`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":6}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid value: integer `6`, expected variant index 0 <= i < 6"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":-1}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `-1`, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":1.5}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: floating point `1.5`, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":true}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: boolean `true`, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":null}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: null, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":[1]}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: sequence, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":{"a":1}}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: map, expected variant identifier"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":18446744073709551616}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `18446744073709551616` as u128, expected any value"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":3}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":"/abs"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots","subpath":null}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file:///w"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read","missing_path_behavior":"skip"}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read","missing_path_behavior":null}]}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read","missing_path_behavior":"bogus"}]}},"windowsSandboxLevel":"disabled"}`, "unknown variant `bogus`, expected `skip`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read","missing_path_behavior":3}]}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `3`, expected string or map"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":0}},"windowsSandboxLevel":"disabled"}`, "invalid value: integer `0`, expected a nonzero usize"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":-1}},"windowsSandboxLevel":"disabled"}`, "invalid value: integer `-1`, expected a nonzero usize"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":1.5}},"windowsSandboxLevel":"disabled"}`, "invalid type: floating point `1.5`, expected a nonzero usize"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":1e3}},"windowsSandboxLevel":"disabled"}`, "invalid type: floating point `1000.0`, expected a nonzero usize"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":"x"}},"windowsSandboxLevel":"disabled"}`, "invalid type: string \"x\", expected a nonzero usize"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":3}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":null}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":18446744073709551615}},"windowsSandboxLevel":"disabled"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":18446744073709551616}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `18446744073709551616` as u128, expected any value"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":-9223372036854775809}},"windowsSandboxLevel":"disabled"}`, "invalid type: integer `-9223372036854775809` as i128, expected any value"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"foo"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"/abs"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":3}`, "invalid type: number, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":true}`, "invalid type: boolean `true`, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file:///a%00b"}`, "'file:///a%00b' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file:///a?b"}`, "query parameters are not allowed in path URIs"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"http://x/a"}`, "unsupported path URI scheme `http`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file:///a/../b"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file://other/x"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":3}`, "invalid type: number, expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":["foo"]}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":null}`, "invalid type: null, expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":[3]}`, "invalid type: number, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":["file://other/x"]}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":["file://u@h/a"]}`, "invalid URI: invalid international domain name"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","userHomeDir":"foo"}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","userHomeDir":3}`, "invalid type: number, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","userHomeDir":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","userHomeDir":"file://other/x"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","temporaryDirectories":"x"}`, "invalid type: string \"x\", expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","temporaryDirectories":["x"]}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","temporaryDirectories":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","temporaryDirectories":["file://other/x"]}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":3}`, "invalid type: number, expected struct WireFileSystemPolicyContext"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":"x"}`, "invalid type: string \"x\", expected struct WireFileSystemPolicyContext"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{}}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":[]}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"cwd":"foo"}}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"cwd":3}}`, "invalid type: number, expected a string"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"cwd":null}}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"cwd":"file://other/x"}}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"workspaceRoots":["foo"]}}`, "invalid URI: relative URL without a base"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"workspaceRoots":3}}`, "invalid type: number, expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"workspaceRoots":null}}`, "invalid type: null, expected a sequence"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxPrivateDesktop":"x"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxPrivateDesktop":null}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","useLegacyLandlock":"x"}`, "invalid type: string \"x\", expected a boolean"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","useLegacyLandlock":null}`, "invalid type: null, expected a boolean"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","useLegacyLandlock":3}`, "invalid type: number, expected a boolean"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","useLegacyLandlock":true}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":"x"}`, "unknown variant `x`, expected `reconcile` or `preserve`"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":3}`, "invalid type: number, expected string or map"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","windowsSandboxProxySettingsMode":"reconcile"}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","policyContext":{"cwd":"file:///w"}}`, ""},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"glob_pattern","pattern":"f.txt"},"access":"deny"}]}},"windowsSandboxLevel":"disabled","cwd":"file://other/w"}`, "-32600 'file://other/w' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"deny"}]}},"windowsSandboxLevel":"disabled","cwd":"file://other/w","workspaceRoots":["file:///w"]}`, "-32600 'file://other/w' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":"file:///w","workspaceRoots":["file://other/w"]}`, "-32600 file system sandbox workspace root is not native to this exec-server host: 'file://other/w' is invalid on 'linux'"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}]}},"windowsSandboxLevel":"disabled","workspaceRoots":["file:///w"]}`, "file system sandbox context with dynamic permissions requires cwd"},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"read"}]}},"windowsSandboxLevel":"disabled","cwd":null}`, "file system sandbox context with dynamic permissions requires cwd"},
	} {
		_, err := Parse([]byte(c.in))
		var pe *protocol.Error
		code, want := protocol.CodeInvalidParams, c.want
		if m, found := strings.CutPrefix(want, "-32600 "); found {
			code, want = protocol.CodeInvalidRequest, m
		}
		switch {
		case c.want == ok && err != nil:
			t.Errorf("%s: %v, want accepted", c.in, err)
		case c.want == ok:
		case !errors.As(err, &pe) || pe.Code != code || pe.Message != want:
			t.Errorf("%s:\n got %v\nwant %d %s", c.in, err, code, want)
		}
	}
}

func TestCheckRefusesRestrictivePolicies(t *testing.T) {
	for _, c := range []struct {
		in      string
		refused bool
	}{
		{`{"permissions":{"type":"disabled"},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"external","network":"restricted"},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, false},
		{`{"permissions":{"type":"managed","network":"restricted","file_system":{"type":"unrestricted"}},"windowsSandboxLevel":"disabled"}`, true},
		{`{"permissions":{"type":"managed","network":"enabled","file_system":{"type":"restricted","entries":[]}},"windowsSandboxLevel":"disabled"}`, true},
	} {
		err := Check([]byte(c.in))
		var pe *protocol.Error
		refused := errors.As(err, &pe) && pe.Code == protocol.CodeInternal
		if refused != c.refused || (!c.refused && err != nil) {
			t.Errorf("%s: Check = %v, want refused=%v", c.in, err, c.refused)
		}
	}
}
