package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/codexref"
	"github.com/execgo/exec-server/remote/relay"
)

// The real codex harness (codex exec with the CODEX_EXEC_SERVER_NOISE_*
// variables) runs a command and applies a patch on an executor through
// exec-relay; the model is a scripted mock Responses API on 127.0.0.1.

type mockModel struct {
	mu    sync.Mutex
	reqs  []map[string]any
	steps [][]map[string]any
	url   string
}

func startMockModel(t *testing.T, steps ...[]map[string]any) *mockModel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mockModel{steps: steps, url: "http://" + ln.Addr().String() + "/v1"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", m.responses)
	mux.HandleFunc("/", http.NotFound)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return m
}

func (m *mockModel) responses(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	n := len(m.reqs)
	m.reqs = append(m.reqs, req)
	items := []map[string]any{{"type": "message", "role": "assistant", "id": fmt.Sprint("msg-", n),
		"content": []any{map[string]any{"type": "output_text", "text": "done"}}}}
	if n < len(m.steps) {
		items = m.steps[n]
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	id := fmt.Sprint("resp-", n)
	event := func(v map[string]any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], b)
	}
	event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	for _, it := range items {
		event(map[string]any{"type": "response.output_item.done", "item": it})
	}
	event(map[string]any{"type": "response.completed", "response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 0, "input_tokens_details": nil, "output_tokens": 0, "output_tokens_details": nil, "total_tokens": 0}}})
}

// toolOutput is what codex sent back to the model for callID.
func (m *mockModel) toolOutput(callID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.reqs {
		input, _ := req["input"].([]any)
		for _, it := range input {
			item, _ := it.(map[string]any)
			if item == nil || item["call_id"] != callID {
				continue
			}
			if item["type"] == "function_call_output" || item["type"] == "custom_tool_call_output" {
				switch o := item["output"].(type) {
				case string:
					return o, true
				default:
					b, _ := json.Marshal(o)
					return string(b), true
				}
			}
		}
	}
	return "", false
}

func TestCodexHarness(t *testing.T) {
	codex := codexref.Bin(t)
	forEachImpl(t, func(t *testing.T, impl string) {
		for _, c := range []struct {
			name   string
			faults relay.Faults
		}{
			{"clean", relay.Faults{}},
			{"duplicate reorder delay", relay.Faults{Duplicate: 0.2, Reorder: 0.2, ReorderDepth: 16, Delay: time.Millisecond, Seed: 9}},
		} {
			t.Run(c.name, func(t *testing.T) { codexRun(t, codex, impl, c.faults) })
		}
	})
}

func codexRun(t *testing.T, codex, impl string, faults relay.Faults) {
	if impl == "reference" {
		// Its workspace-write sandbox writes /tmp (codexref.HoldSlashTmp).
		t.Cleanup(codexref.HoldSlashTmp(t))
	}
	r := startRig(t, impl, faults, nil)
	r.waitAttached()
	root := codexref.Scratch(t, "exec-server-executor-test", "codex-")
	work, home := filepath.Join(root, "work"), filepath.Join(root, "home")
	os.MkdirAll(work, 0o755)
	os.MkdirAll(home, 0o755)
	token := fmt.Sprint(time.Now().UnixNano())

	call := func(id, name string, args map[string]any) map[string]any {
		b, _ := json.Marshal(args)
		return map[string]any{"type": "function_call", "id": "fc-" + id, "call_id": id, "name": name, "arguments": string(b)}
	}
	model := startMockModel(t,
		[]map[string]any{call("call-echo", "exec_command", map[string]any{"cmd": "echo hello-" + token + " > made.txt && cat made.txt && echo $PPID >/dev/null", "yield_time_ms": 10000})},
		[]map[string]any{{"type": "custom_tool_call", "id": "ctc-patch", "call_id": "call-patch", "name": "apply_patch",
			"input": "*** Begin Patch\n*** Add File: sub/new.txt\n+patched-" + token + "\n*** End Patch\n"}},
		// Outside the workspace: the sandbox refuses it.
		[]map[string]any{call("call-outside", "exec_command", map[string]any{"cmd": "touch ../outside-" + token, "yield_time_ms": 10000})},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := codexref.Exec(ctx, codex, work, model.url, "-s", "workspace-write")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CODEX_HOME=" + home, "RUST_LOG=warn",
		"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + r.base,
		"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + r.env,
		"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessToken,
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("codex exec: %v\nstdout:\n%s\nstderr:\n%s", err, codexref.Tail(stdout.String(), 4000), codexref.Tail(stderr.String(), 4000))
		}
	})
	if err != nil {
		t.Fatalf("codex exec: %v", err)
	}
	out, ok := model.toolOutput("call-echo")
	if !ok || !strings.Contains(out, "hello-"+token) {
		t.Fatalf("exec_command output to the model: %q (found %v)", out, ok)
	}
	if b, err := os.ReadFile(filepath.Join(work, "made.txt")); err != nil || string(b) != "hello-"+token+"\n" {
		t.Fatalf("made.txt: %q %v", b, err)
	}
	if out, ok := model.toolOutput("call-patch"); !ok || !strings.Contains(out, "sub/new.txt") {
		t.Fatalf("apply_patch output to the model: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(work, "sub", "new.txt")); err != nil || string(b) != "patched-"+token+"\n" {
		t.Fatalf("sub/new.txt: %q %v", b, err)
	}
	if _, ok := model.toolOutput("call-outside"); !ok {
		t.Fatal("no output for the command outside the workspace")
	}
	if _, err := os.Stat(filepath.Join(root, "outside-"+token)); err == nil {
		t.Fatal("a sandboxed command wrote outside the workspace")
	}
	// It went through the relay: a /connect and a /validate per stream.
	if r.events.count(func(e relay.Event) bool { return e.Kind == "validate" && e.Status == 200 }) == 0 {
		t.Fatal("no /validate through the relay")
	}
}
