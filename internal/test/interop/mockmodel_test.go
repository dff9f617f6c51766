package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// mockModel is a scripted OpenAI Responses API on 127.0.0.1 for `codex
// exec`: each POST /v1/responses is answered, as SSE, with the next step
// of the script (response.created, one response.output_item.done per
// item, response.completed). Once the script is used up it answers with
// a final assistant message, so a turn always ends. Every request body is
// kept: the test reads what the tools returned from the function_call_output
// and custom_tool_call_output items codex sends back.
type mockModel struct {
	t    *testing.T
	srv  *http.Server
	ln   net.Listener
	URL  string // base_url for codex: http://127.0.0.1:PORT/v1
	mu   sync.Mutex
	reqs []map[string]any
	// steps are the scripted responses, in order; each is a list of output items.
	steps [][]map[string]any
}

func newMockModel(t *testing.T, steps ...[]map[string]any) *mockModel {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &mockModel{t: t, ln: ln, URL: "http://" + ln.Addr().String() + "/v1", steps: steps}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", m.responses)
	// Anything else (a models list, telemetry) gets a 404, which codex
	// tolerates; it is logged so a new codex call shows up when debugging.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		t.Logf("mock model: unscripted %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	m.srv = &http.Server{Handler: mux}
	go func() { _ = m.srv.Serve(ln) }()
	t.Cleanup(func() { _ = m.srv.Close() })
	return m
}

func (m *mockModel) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		// codex may compress request bodies; say so rather than guess.
		m.t.Logf("mock model: request body is not JSON (Content-Encoding %q): %v", r.Header.Get("Content-Encoding"), err)
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	n := len(m.reqs)
	m.reqs = append(m.reqs, req)
	var items []map[string]any
	if n < len(m.steps) {
		items = m.steps[n]
	} else {
		items = []map[string]any{assistantMessage(fmt.Sprintf("msg-%d", n), "done")}
	}
	m.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	id := fmt.Sprintf("resp-%d", n)
	var sb strings.Builder
	event := func(v map[string]any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(&sb, "event: %s\ndata: %s\n\n", v["type"], b)
	}
	event(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	for _, it := range items {
		event(map[string]any{"type": "response.output_item.done", "item": it})
	}
	event(map[string]any{"type": "response.completed", "response": map[string]any{
		"id": id,
		"usage": map[string]any{"input_tokens": 0, "input_tokens_details": nil, "output_tokens": 0,
			"output_tokens_details": nil, "total_tokens": 0},
	}})
	_, _ = io.WriteString(w, sb.String())
}

// requests returns the request bodies received so far.
func (m *mockModel) requests() []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]map[string]any(nil), m.reqs...)
}

// toolOutput returns what codex sent back for callID (the output of a
// function_call_output or custom_tool_call_output input item), and
// whether it was found.
func (m *mockModel) toolOutput(callID string) (string, bool) {
	for _, req := range m.requests() {
		input, _ := req["input"].([]any)
		for _, it := range input {
			item, _ := it.(map[string]any)
			if item == nil || item["call_id"] != callID {
				continue
			}
			switch item["type"] {
			case "function_call_output", "custom_tool_call_output":
				return outputText(item["output"]), true
			}
		}
	}
	return "", false
}

// hostRace returns a tool output that shows bwrap (the reference's
// sandbox) failing on a /tmp mount point of another sandbox that came and
// went ("bwrap: Can't find source path /tmp/.git"), or "".
func (m *mockModel) hostRace() string {
	for _, req := range m.requests() {
		input, _ := req["input"].([]any)
		for _, it := range input {
			item, _ := it.(map[string]any)
			if item == nil || (item["type"] != "function_call_output" && item["type"] != "custom_tool_call_output") {
				continue
			}
			out := outputText(item["output"])
			if i := strings.Index(out, "bwrap: Can't"); i >= 0 && strings.Contains(out[i:], "tmp/.") {
				line, _, _ := strings.Cut(out[i:], "\n")
				return line
			}
		}
	}
	return ""
}

// outputText flattens a tool output: a string, or a list of content items
// with text.
func outputText(v any) string {
	switch o := v.(type) {
	case string:
		return o
	case []any:
		var sb strings.Builder
		for _, x := range o {
			if c, ok := x.(map[string]any); ok {
				if s, ok := c["text"].(string); ok {
					sb.WriteString(s)
				}
			}
		}
		return sb.String()
	case map[string]any:
		if s, ok := o["content"].(string); ok {
			return s
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// toolNames lists the tools codex offered in its first request.
func (m *mockModel) toolNames() []string {
	reqs := m.requests()
	if len(reqs) == 0 {
		return nil
	}
	tools, _ := reqs[0]["tools"].([]any)
	var out []string
	for _, t := range tools {
		if tm, ok := t.(map[string]any); ok {
			out = append(out, fmt.Sprint(tm["name"]))
		}
	}
	return out
}

// functionCall is a response item asking codex to run tool name with
// JSON arguments.
func functionCall(callID, name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "id": "fc-" + callID, "call_id": callID, "name": name, "arguments": string(b)}
}

// customToolCall is a response item for a freeform tool (apply_patch): the
// input is the raw text.
func customToolCall(callID, name, input string) map[string]any {
	return map[string]any{"type": "custom_tool_call", "id": "ctc-" + callID, "call_id": callID, "name": name, "input": input}
}

// assistantMessage is a final answer that ends the turn.
func assistantMessage(id, text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "id": id,
		"content": []any{map[string]any{"type": "output_text", "text": text}}}
}
