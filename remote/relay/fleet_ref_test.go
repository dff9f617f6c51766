package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
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
	"github.com/execgo/exec-server/remote/channel"
	"github.com/execgo/exec-server/remote/executor"
	"github.com/execgo/exec-server/remote/harness"
	"github.com/execgo/exec-server/server"
)

// The reference's ends across two nodes (EXEC_SERVER_REFERENCE names the
// codex binary: 0.169 from scripts/reference.sh, or 0.171). Its streams
// are plain (no acknowledgements, no resume): the fabric must lose
// nothing while both nodes live.

// rpcCall sends a JSON-RPC request on ch and returns its result, skipping
// notifications.
func rpcCall(t *testing.T, ch *channel.Channel, id int, method string, params any) json.RawMessage {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ch.Write(ctx, b, false); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := ch.Read(ctx)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		var r struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(m, &r); err != nil {
			t.Fatalf("%s: bad message %.100q", method, m)
		}
		if r.ID == nil {
			continue
		}
		if *r.ID != id || r.Error != nil {
			t.Fatalf("%s: answer %.200s", method, m)
		}
		return r.Result
	}
}

// The reference executor holds its socket on node a, this project's
// harness connects on node b: files of 1 MiB go out and come back byte for
// byte (messages of many records each way, all across the fabric).
func TestFleetReferenceExecutor(t *testing.T) {
	codexref.Bin(t)
	url := startNATS(t)
	a := startNode(t, url, "a", "", nil)
	b := startNode(t, url, "b", "", nil)
	startReference(t, a.base, "E", execToken)
	a.executorOn(t, "E", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ch := dialStream(ctx, t, b.base, "E", harness.Options{})
	rpcCall(t, ch, 1, "initialize", map[string]any{"clientName": "fleet-test"})
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "initialized", "params": map[string]any{}})
	ch.Write(ctx, note, false)
	work := codexref.Scratch(t, "exec-server-relay", "fleet-")
	for i := range 4 {
		data := make([]byte, 1<<20)
		rand.Read(data)
		path := filepath.Join(work, fmt.Sprint("f", i))
		rpcCall(t, ch, 10+2*i, "fs/writeFile", map[string]any{"path": "file://" + path, "dataBase64": base64.StdEncoding.EncodeToString(data)})
		if disk, err := os.ReadFile(path); err != nil || !bytes.Equal(disk, data) {
			t.Fatalf("file %d on disk differs (%v)", i, err)
		}
		var res struct {
			DataBase64 string `json:"dataBase64"`
		}
		json.Unmarshal(rpcCall(t, ch, 11+2*i, "fs/readFile", map[string]any{"path": "file://" + path}), &res)
		if got, _ := base64.StdEncoding.DecodeString(res.DataBase64); !bytes.Equal(got, data) {
			t.Fatalf("file %d read back differs (%d bytes)", i, len(got))
		}
	}
	if st := b.FleetStats(); st.FramesIn < 16 || st.FramesOut < 16 {
		t.Fatalf("too few frames crossed: %+v", st)
	}
}

// mockModel is a scripted Responses API: the first request gets one
// exec_command call, the next ones a final message.
type mockModel struct {
	mu   sync.Mutex
	reqs []map[string]any
	call map[string]any
	url  string
}

func startModel(t *testing.T, cmd string) *mockModel {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"cmd": cmd, "yield_time_ms": 10000})
	m := &mockModel{url: "http://" + ln.Addr().String() + "/v1",
		call: map[string]any{"type": "function_call", "id": "fc-1", "call_id": "call-1", "name": "exec_command", "arguments": string(args)}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		json.Unmarshal(body, &req)
		m.mu.Lock()
		n := len(m.reqs)
		m.reqs = append(m.reqs, req)
		m.mu.Unlock()
		items := []map[string]any{{"type": "message", "role": "assistant", "id": fmt.Sprint("msg-", n),
			"content": []any{map[string]any{"type": "output_text", "text": "done"}}}}
		if n == 0 {
			items = []map[string]any{m.call}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		event := func(v map[string]any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], b)
		}
		id := fmt.Sprint("resp-", n)
		event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
		for _, it := range items {
			event(map[string]any{"type": "response.output_item.done", "item": it})
		}
		event(map[string]any{"type": "response.completed", "response": map[string]any{"id": id,
			"usage": map[string]any{"input_tokens": 0, "input_tokens_details": nil, "output_tokens": 0, "output_tokens_details": nil, "total_tokens": 0}}})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return m
}

// output is what codex sent back to the model for the command.
func (m *mockModel) output() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.reqs {
		input, _ := req["input"].([]any)
		for _, it := range input {
			item, _ := it.(map[string]any)
			if item != nil && item["call_id"] == "call-1" && item["type"] == "function_call_output" {
				if s, ok := item["output"].(string); ok {
					return s, true
				}
				b, _ := json.Marshal(item["output"])
				return string(b), true
			}
		}
	}
	return "", false
}

// The real codex harness (codex exec) connects on node b to an executor
// holding its socket on node a: this project's executor serving this
// project's server, and the reference executor.
func TestFleetCodexHarness(t *testing.T) {
	codex := codexref.Bin(t)
	for _, impl := range []string{"go", "reference"} {
		t.Run(impl, func(t *testing.T) {
			url := startNATS(t)
			a := startNode(t, url, "a", "", nil)
			b := startNode(t, url, "b", "", nil)
			env := "E-" + impl
			if impl == "reference" {
				// Its workspace-write sandbox writes /tmp (codexref.HoldSlashTmp).
				t.Cleanup(codexref.HoldSlashTmp(t))
				startReference(t, a.base, env, execToken)
			} else {
				srv := server.New(server.Config{})
				t.Cleanup(srv.Close)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					executor.Run(ctx, executor.Config{RegistryURL: a.base, EnvironmentID: env, Token: execToken, Server: srv})
				}()
				t.Cleanup(func() { cancel(); <-done })
			}
			a.executorOn(t, env, 30*time.Second)
			root := codexref.Scratch(t, "exec-server-relay", "codex-")
			work, home := filepath.Join(root, "work"), filepath.Join(root, "home")
			os.MkdirAll(work, 0o755)
			os.MkdirAll(home, 0o755)
			token := fmt.Sprint(time.Now().UnixNano())
			// 200 000 bytes of output: many records from the executor.
			model := startModel(t, "echo hello-"+token+" > made.txt && head -c 150000 /dev/zero | tr '\\0' x && cat made.txt")
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := codexref.Exec(ctx, codex, work, model.url, "-s", "workspace-write")
			cmd.Env = []string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CODEX_HOME=" + home, "RUST_LOG=warn",
				"CODEX_EXEC_SERVER_NOISE_REGISTRY_URL=" + b.base,
				"CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID=" + env,
				"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=" + harnessToken,
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil {
				t.Fatalf("codex exec: %v\nstderr:\n%s", err, codexref.Tail(stderr.String(), 3000))
			}
			out, ok := model.output()
			if !ok || !strings.Contains(out, "hello-"+token) || !strings.Contains(out, strings.Repeat("x", 1000)) {
				t.Fatalf("exec_command output to the model: %.300q (found %v)", out, ok)
			}
			if got, err := os.ReadFile(filepath.Join(work, "made.txt")); err != nil || string(got) != "hello-"+token+"\n" {
				t.Fatalf("made.txt: %q %v", got, err)
			}
			if b.rec.count(func(e Event) bool { return e.Kind == "attach" && e.Code == "forward" }) == 0 {
				t.Fatal("codex's socket was not forwarded from node b")
			}
		})
	}
}
