package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestCodexCallSequence runs the real `codex exec` with the same scripted
// model against the reference and against ours, the server's codex config
// declaring an HTTP MCP server (a tiny streamable-HTTP one on 127.0.0.1),
// and compares what codex asked of each server, in order. codex learns the
// MCP server through environmentConfig/read and reaches it through the
// executor with http/request; the MCP server must see initialize and
// tools/list in both runs.
func TestCodexCallSequence(t *testing.T) {
	codex := os.Getenv("EXEC_SERVER_REFERENCE")
	if codex == "" {
		t.Skip("EXEC_SERVER_REFERENCE is not set: the codex CLI (the reference binary) is needed; " +
			"run with EXEC_SERVER_REFERENCE=$(bash scripts/reference.sh)")
	}
	if len(targets) < 2 {
		t.Skip("needs both servers")
	}
	base := scratchBase(t)
	// The MCP server wants a bearer token that only the executor's
	// environment holds (bearer_token_env_var): codex then sends the header
	// as {"value":"Bearer ","valueEnvVar":...} and the executor fills it in
	// (httpHeaderEnvVars). Both servers inherit it; codex's own copy is
	// removed below by filteredEnv's CODEX_ prefix rule.
	t.Setenv("CODEX_PARITY_MCP_TOKEN", "tok-parity")
	runs := map[string]*codexRun{}
	mcps := map[string]*mcpServer{}
	var mu sync.Mutex
	t.Run("runs", func(t *testing.T) {
		for _, tg := range targets {
			t.Run(tg.name, func(t *testing.T) {
				t.Parallel()
				mcp := startMCPServer(t)
				sc := codexScenario{
					name:  "sequence",
					flags: []string{"--dangerously-bypass-approvals-and-sandbox"},
					script: func(work, token string) [][]map[string]any {
						return [][]map[string]any{execCommand("call-seq", "echo seq-"+token)}
					},
					serverHome: func(t *testing.T, home string) {
						if err := os.MkdirAll(home, 0o755); err != nil {
							t.Fatal(err)
						}
						cfg := fmt.Sprintf("[mcp_servers.parity]\nurl = %q\nbearer_token_env_var = \"CODEX_PARITY_MCP_TOKEN\"\n", mcp.url)
						if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o644); err != nil {
							t.Fatal(err)
						}
					},
				}
				r := runCodexOnce(t, codex, base, tg, sc)
				r.commandRan("call-seq", 0, "seq-"+r.token)
				mu.Lock()
				runs[tg.name], mcps[tg.name] = r, mcp
				mu.Unlock()
			})
		}
	})
	ref, ours := runs["reference"], runs["ours"]
	if ref == nil || ours == nil {
		t.Fatal("a run failed")
	}
	for name, m := range mcps {
		got := m.methods()
		if !slices.Contains(got, "initialize") || !slices.Contains(got, "tools/list") {
			t.Errorf("%s: the MCP server saw %v, want initialize and tools/list (through http/request)", name, got)
		}
		if auth := m.auths(); len(auth) == 0 || slices.ContainsFunc(auth, func(a string) bool { return a != "Bearer tok-parity" }) {
			t.Errorf("%s: the MCP server got Authorization %q, want the executor's token on every call", name, auth)
		}
	}
	for name, r := range runs {
		if !strings.Contains(r.traffic.String(), `"valueEnvVar":"CODEX_PARITY_MCP_TOKEN"`) {
			t.Errorf("%s: codex did not ask the executor to fill the token (no valueEnvVar in its http/request)", name)
		}
	}
	refSeq, oursSeq := callSequence(ref), callSequence(ours)
	if !slices.Equal(refSeq, oursSeq) {
		t.Errorf("codex's calls differ\nreference: %s\nours:      %s", strings.Join(refSeq, " "), strings.Join(oursSeq, " "))
	}
	if rp, op := probes(ref), probes(ours); !slices.Equal(rp, op) {
		t.Errorf("codex's fs/getMetadata probes differ\nreference: %s\nours:      %s", strings.Join(rp, ", "), strings.Join(op, ", "))
	}
	t.Logf("sequence: %s", strings.Join(oursSeq, " "))
	t.Logf("probes: %s", strings.Join(probes(ours), ", "))
}

// callSequence is the methods codex sent the server, in order, normalised
// where two runs differ for reasons that are not the server's:
//   - fs/getMetadata calls are left out of the sequence and compared apart
//     (probes): codex sends its probes concurrently with each other and
//     with fs/watchMissing, and re-probes a path now and then (17 or 18
//     probes with the same answers, against either server), so their
//     number and interleaving are its scheduling;
//   - http/request carries its MCP method ("http/request(initialize)"), so
//     the MCP conversation is compared too;
//   - consecutive process/terminate calls count as one: codex sends one or
//     two depending on whether the command's exit reached it before the
//     turn ended;
//   - fs/watchMissing and environmentConfig/read come from two tasks of
//     codex's that run at once (the skills watcher and the MCP config), so
//     when adjacent they are compared as a set (CI saw both orders against
//     the same server).
func callSequence(r *codexRun) []string {
	r.traffic.mu.Lock()
	defer r.traffic.mu.Unlock()
	var out []string
	for _, m := range r.traffic.msgs {
		if !m.toServer {
			continue
		}
		var msg struct {
			Method string `json:"method"`
			Params struct {
				BodyBase64 []byte `json:"bodyBase64"`
			} `json:"params"`
		}
		if json.Unmarshal(m.raw, &msg) != nil || msg.Method == "" || msg.Method == "fs/getMetadata" {
			continue
		}
		name := msg.Method
		if name == "http/request" {
			var body struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(msg.Params.BodyBase64, &body)
			name += "(" + body.Method + ")"
		}
		if n := len(out); n > 0 && name == "process/terminate" && out[n-1] == name {
			continue
		}
		out = append(out, name)
	}
	concurrent := func(m string) bool { return m == "fs/watchMissing" || m == "environmentConfig/read" }
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && concurrent(out[j]) {
			j++
		}
		slices.Sort(out[i:j])
		i = max(j, i+1)
	}
	return out
}

// probes is the set of paths codex probed with fs/getMetadata and the
// answer (error code, 0 for success), the run's own directory written
// ROOT.
func probes(r *codexRun) []string {
	root := filepath.Dir(r.outside) // the run's own directory (outside is ROOT/outside)
	seen := map[string]bool{}
	var out []string
	for _, c := range r.traffic.calls("fs/getMetadata") {
		code := 0
		if c.err != nil {
			code = c.err.Code
		}
		path, _ := c.params["path"].(string)
		p := fmt.Sprintf("%s %d", strings.Replace(path, FileURI(root), "ROOT", 1), code)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// mcpServer is a minimal streamable-HTTP MCP server: JSON answers to
// initialize and tools/list, 202 to notifications.
type mcpServer struct {
	url  string
	mu   sync.Mutex
	got  []string
	auth []string // the Authorization header of each call
}

func (m *mcpServer) auths() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.auth)
}

func (m *mcpServer) methods() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

func startMCPServer(t *testing.T) *mcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mcpServer{url: "http://" + ln.Addr().String() + "/mcp"}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.got = append(m.got, req.Method)
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.mu.Unlock()
		if req.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any
		switch req.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": req.Params.ProtocolVersion,
				"capabilities": map[string]any{"tools": map[string]any{"listChanged": false}},
				"serverInfo":   map[string]any{"name": "parity-mcp", "version": "1.0.0"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "parity_echo", "description": "Echoes its input.",
				"inputSchema": map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}}}}
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "error": map[string]any{"code": -32601, "message": "no such method"}})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": result})
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}
