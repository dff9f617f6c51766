package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManagedNetworkFailsClosed pins that a process/start asking for a
// managed network this server cannot enforce is refused (-32603, kind
// sandboxUnavailable, the message naming the field) and never runs: it
// used to run with open network, the fields ignored.
func TestManagedNetworkFailsClosed(t *testing.T) {
	proxy := json.RawMessage(`{"proxy":{"enabled":true,"enableSocks5":true,"enableSocks5Udp":true,"allowUpstreamProxy":true,` +
		`"dangerouslyAllowAllUnixSockets":false,"mode":"full","domains":{"allowed.example.com":"allow"},"unixSockets":null,` +
		`"allowLocalBinding":false},"auditMetadata":{},"environmentId":"remote","executionId":"e1"}`)
	cases := []struct {
		name  string
		set   map[string]any
		field string // "" when the start must run
	}{
		{"networkProxy", map[string]any{"enforceManagedNetwork": true, "managedNetwork": nil, "networkProxy": proxy}, "networkProxy"},
		{"enforceOnly", map[string]any{"enforceManagedNetwork": true, "managedNetwork": nil}, "enforceManagedNetwork"},
		{"proxyOnly", map[string]any{"networkProxy": proxy}, "networkProxy"},
		{"managedNetwork", map[string]any{"managedNetwork": map[string]any{"x": 1}}, "managedNetwork"},
		{"codexDefaults", map[string]any{"enforceManagedNetwork": false, "managedNetwork": nil, "networkProxy": nil}, ""},
	}
	p := stdioPeer(t, New(Config{}))
	p.init()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "ran")
			sp := startParams(t, c.name, false, "/bin/sh", "-c", "echo ran > "+marker)
			for k, v := range c.set {
				sp[k] = v
			}
			w := p.response(p.request("process/start", sp))
			if c.field == "" {
				if w.Error != nil {
					t.Fatalf("start refused: %s", w.raw)
				}
				p.events(c.name)
				if _, err := os.Stat(marker); err != nil {
					t.Fatalf("command did not run: %v", err)
				}
				return
			}
			if w.Error == nil {
				t.Fatalf("start accepted: %s", w.raw)
			}
			var e struct {
				Error struct {
					Code    int             `json:"code"`
					Message string          `json:"message"`
					Data    json.RawMessage `json:"data"`
				} `json:"error"`
			}
			mustUnmarshal(t, []byte(w.raw), &e)
			if e.Error.Code != -32603 || string(e.Error.Data) != `{"kind":"sandboxUnavailable"}` || !strings.Contains(e.Error.Message, c.field) {
				t.Fatalf("got %s, want -32603 sandboxUnavailable naming %s", w.raw, c.field)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the refused command ran")
			}
		})
	}
}

// proxySandbox is a codex read-only profile with the network enabled, as
// the 0.171 client sends it with a managed proxy.
func proxySandbox(dir string) json.RawMessage {
	return json.RawMessage(`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
   {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
   {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}]},"network":"enabled"},
 "cwd":"file://` + dir + `","workspaceRoots":["file://` + dir + `"],"windowsSandboxLevel":"disabled",
 "windowsSandboxProxySettingsMode":"reconcile","useLegacyLandlock":false}`)
}

func proxyLaunch(domains string, extra string) json.RawMessage {
	return json.RawMessage(`{"proxy":{"enabled":true,"enableSocks5":true,"enableSocks5Udp":false,"allowUpstreamProxy":true,` +
		`"dangerouslyAllowAllUnixSockets":false,"mode":"full","domains":` + domains + `,"unixSockets":null,` +
		`"allowLocalBinding":false},"auditMetadata":{},"environmentId":"remote","executionId":"e1"` + extra + `}`)
}
