package fsys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execgo/exec-server/fileuri"
	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/jsonrpc"
	"github.com/execgo/exec-server/protocol"
)

// TestMain doubles as the unprivileged helper: with FSYS_TEST_HELPER set,
// the test binary reads calls ({"method":..,"params":..} per line) from
// stdin, runs them against a fresh FS and prints one reply per line. It is
// also the sandbox helper: the re-executed personalities come first
// (reexec.Main, which the helper's own sandboxed calls re-execute), then
// the shared test main.
func TestMain(m *testing.M) {
	reexec.Main()
	if os.Getenv("FSYS_TEST_HELPER") == "1" {
		runHelper()
		return
	}
	testbin.Run(m)
}

type helperCall struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

type helperReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *protocol.Error `json:"error,omitempty"`
}

func runHelper() {
	f := New(Options{})
	h := f.NewHandles()
	dec := json.NewDecoder(os.Stdin)
	enc := json.NewEncoder(os.Stdout)
	for {
		var c helperCall
		if err := dec.Decode(&c); err != nil {
			return
		}
		res, err := f.Call(context.Background(), h, c.Method, c.Params)
		var r helperReply
		if err != nil {
			r.Error = protocol.ToError(err)
		} else {
			b, _ := jsonrpc.AppendValue(nil, res)
			r.Result = b
		}
		enc.Encode(r)
	}
}

// runAsNobody runs calls in a copy of the test binary as uid/gid 65534 and
// returns the replies. It skips the test when that is impossible (not root,
// or no setuid in this environment).
func runAsNobody(t *testing.T, calls []helperCall) []helperReply {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to uid 65534")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	openUp(t, dir)
	bin := filepath.Join(dir, "helper")
	copyForTest(t, exe, bin)
	var in bytes.Buffer
	for _, c := range calls {
		b, _ := json.Marshal(c)
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{"FSYS_TEST_HELPER=1"}
	cmd.Stdin = &in
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helper failed: %v\n%s", err, ee.Stderr)
		}
		t.Skipf("cannot run a helper as uid 65534: %v", err)
	}
	var replies []helperReply
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var r helperReply
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("helper output: %v\n%s", err, out)
		}
		replies = append(replies, r)
	}
	if len(replies) != len(calls) {
		t.Fatalf("helper answered %d of %d calls:\n%s", len(replies), len(calls), out)
	}
	return replies
}

// openUp makes dir and its temp-dir parents traversable by other users.
func openUp(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != "/" && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func copyForTest(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// call runs method with params (a value to marshal, or json.RawMessage) and
// returns the JSON the server would send as the result (through the
// jsonrpc encoder, so Appenders are exercised) or the wire error.
func call(t testing.TB, f *FS, h *Handles, method string, params any) (json.RawMessage, *protocol.Error) {
	t.Helper()
	return callCtx(t, context.Background(), f, h, method, params)
}

func callCtx(t testing.TB, ctx context.Context, f *FS, h *Handles, method string, params any) (json.RawMessage, *protocol.Error) {
	t.Helper()
	raw, ok := params.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(params); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.Call(ctx, h, method, raw)
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			// The server maps with ToError; make sure that works too.
			pe = protocol.ToError(err)
		}
		return nil, pe
	}
	out, encErr := jsonrpc.AppendValue(nil, res)
	if encErr != nil {
		t.Fatalf("%s: encoding the result: %v", method, encErr)
	}
	if !json.Valid(out) {
		t.Fatalf("%s: invalid JSON result %q", method, out)
	}
	return out, nil
}

// mustCall fails the test on an error and returns the result JSON.
func mustCall(t testing.TB, f *FS, h *Handles, method string, params any) json.RawMessage {
	t.Helper()
	out, e := call(t, f, h, method, params)
	if e != nil {
		t.Fatalf("%s %v: unexpected error %v", method, params, e)
	}
	return out
}

// wantErr checks an error's code and, when msg is not empty, that its
// message contains msg.
func wantErr(t testing.TB, e *protocol.Error, code int, msg string) {
	t.Helper()
	if e == nil {
		t.Fatalf("want error %d %q, got success", code, msg)
	}
	if e.Code != code || !strings.Contains(e.Message, msg) {
		t.Fatalf("want error %d containing %q, got %d %q", code, msg, e.Code, e.Message)
	}
}

func uri(p string) string { return fileuri.FromPath(p) }

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func writeTestFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t testing.TB, p string) {
	t.Helper()
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// obj builds params from alternating keys and values.
func obj(kv ...any) map[string]any {
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func decodeResult[T any](t testing.TB, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return v
}

func allBytes() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
