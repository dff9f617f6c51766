package fsys

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/test/testbin"
	"github.com/execgo/exec-server/protocol"
)

// buildServer returns the path of this project's exec-server, built once
// per test run by internal/test/testbin (skipping under -short).
func buildServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the server")
	}
	bin, err := testbin.ExecServer()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

type stdioReply struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

// stdioClient speaks newline-delimited JSON-RPC to a server process, one
// request at a time. The process ends (stdin EOF) at the end of the test.
type stdioClient struct {
	t      *testing.T
	stdin  io.WriteCloser
	lines  chan []byte
	stderr *bytes.Buffer
	nextID int
}

func startStdio(t *testing.T, cmd *exec.Cmd) *stdioClient {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	c := &stdioClient{t: t, stdin: stdin, lines: make(chan []byte, 16), stderr: &bytes.Buffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Error("server did not exit at stdin EOF")
		}
	})
	go func() {
		defer close(c.lines)
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				c.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	if r := c.send("initialize", map[string]any{"clientName": "fsys-test"}); r.Error != nil {
		t.Fatal(r.Error)
	}
	io.WriteString(stdin, `{"method":"initialized","params":{}}`+"\n")
	return c
}

// send sends one request (params may be json.RawMessage) and waits for
// its reply.
func (c *stdioClient) send(method string, params any) stdioReply {
	c.t.Helper()
	c.nextID++
	msg, _ := json.Marshal(map[string]any{"id": c.nextID, "method": method, "params": params})
	if _, err := c.stdin.Write(append(msg, '\n')); err != nil {
		c.t.Fatalf("write: %v (stderr: %s)", err, c.stderr.String())
	}
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("server closed stdout (stderr: %s)", c.stderr.String())
			}
			var r stdioReply
			if err := json.Unmarshal(line, &r); err != nil {
				c.t.Fatalf("bad frame %q: %v", line, err)
			}
			if r.ID == c.nextID {
				return r
			}
		case <-time.After(20 * time.Second):
			c.t.Fatalf("no reply to %s", method)
		}
	}
}

// TestIntegrationStdio builds the real exec-server, speaks newline-delimited
// JSON-RPC to it over stdio and runs the fs family end to end: the frame
// encoding (Appenders), the handle table per connection and the error
// mapping as a client sees them.
func TestIntegrationStdio(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	srv := exec.Command(bin, "--listen", "stdio")
	srv.Dir = dir
	c := startStdio(t, srv)
	send := c.send

	data := pattern(3<<20 + 5)
	if r := send("fs/createDirectory", obj("path", uri(dir+"/a/b"))); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := send("fs/writeFile", obj("path", uri(dir+"/a/b/big"), "dataBase64", b64(data))); r.Error != nil || string(r.Result) != "{}" {
		t.Fatalf("writeFile: %s %v", r.Result, r.Error)
	}
	r := send("fs/readFile", obj("path", uri(dir+"/a/b/big")))
	if got := decodeResult[protocol.FsReadFileResult](t, r.Result); !bytes.Equal(got.DataBase64, data) {
		t.Fatalf("readFile returned %d bytes, want %d", len(got.DataBase64), len(data))
	}
	r = send("fs/getMetadata", obj("path", uri(dir+"/a/b/big")))
	if m := decodeResult[protocol.FsMetadata](t, r.Result); !m.IsFile || m.Size != int64(len(data)) {
		t.Fatalf("metadata %+v", m)
	}
	r = send("fs/walk", obj("path", uri(dir), "options", obj("maxDepth", 5, "maxDirectories", 10, "maxEntries", 10, "followDirectorySymlinks", false)))
	if got := walkSummary(t, dir, r.Result); got != "a/ a/b/ a/b/big" {
		t.Fatalf("walk: %s", got)
	}
	if r := send("fs/open", obj("handleId", "h", "path", uri(dir+"/a/b/big"))); r.Error != nil {
		t.Fatal(r.Error)
	}
	r = send("fs/readBlock", obj("handleId", "h", "offset", 3<<20, "len", 100))
	if got := decodeResult[protocol.FsReadBlockResult](t, r.Result); !got.EOF || !bytes.Equal(got.Chunk, data[3<<20:]) {
		t.Fatalf("readBlock: %+v", got)
	}
	send("fs/close", obj("handleId", "h"))
	r = send("fs/readBlock", obj("handleId", "h", "offset", 0, "len", 1))
	if r.Error == nil || r.Error.Code != protocol.CodeNotFound {
		t.Fatalf("readBlock after close: %s %v", r.Result, r.Error)
	}
	for _, tc := range []struct {
		method string
		params any
		code   int
	}{
		{"fs/remove", obj("path", "file:///"), protocol.CodeInvalidRequest},
		{"fs/readFile", obj("path", uri(dir+"/nosuch")), protocol.CodeNotFound},
		{"fs/readFile", obj("path", dir+"/a"), protocol.CodeInvalidParams},
		{"fs/copy", obj("sourcePath", uri(dir+"/a"), "destinationPath", uri(dir+"/c")), protocol.CodeInvalidParams},
	} {
		r := send(tc.method, tc.params)
		if r.Error == nil || r.Error.Code != tc.code {
			t.Errorf("%s %v: %s %v, want code %d", tc.method, tc.params, r.Result, r.Error, tc.code)
		}
	}
	if r := send("fs/remove", obj("path", uri(dir+"/a"))); r.Error != nil {
		t.Fatal(r.Error)
	}
	if exists(dir + "/a") {
		t.Fatal("fs/remove left the tree")
	}
}
