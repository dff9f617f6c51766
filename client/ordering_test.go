package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/client"
	"github.com/execgo/exec-server/protocol"
)

// fakeServer plays a scripted process over an in-memory connection: on
// process/start it sends the script's events (and the start response where
// the script says), and it serves process/read from its retained chunks.
// It lets the ordering tests make a server misbehave in exactly one way.
type fakeServer struct {
	script   []string // notification params templates; "RESPONSE" marks the start response
	retained []protocol.Chunk
	state    protocol.ReadResult // exited, exitCode, closed, sandboxDenied, nextSeq
	late     []string            // notifications sent on process/terminate, before its response
	// afterRead[n] are notifications sent after the answer to the n-th
	// process/read (from 1).
	afterRead map[int][]string

	mu    sync.Mutex
	reads []protocol.ReadParams
}

func out(seq uint64, stream, data string) string {
	return fmt.Sprintf(`{"method":"process/output","params":{"processId":"P","seq":%d,"stream":%q,"chunk":%q}}`, seq, stream, base64.StdEncoding.EncodeToString([]byte(data)))
}

func exited(seq uint64, code int, denied string) string {
	if denied == "" {
		return fmt.Sprintf(`{"method":"process/exited","params":{"processId":"P","seq":%d,"exitCode":%d}}`, seq, code)
	}
	return fmt.Sprintf(`{"method":"process/exited","params":{"processId":"P","seq":%d,"exitCode":%d,"sandboxDenied":%s}}`, seq, code, denied)
}

func closed(seq uint64) string {
	return fmt.Sprintf(`{"method":"process/closed","params":{"processId":"P","seq":%d}}`, seq)
}

func (f *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 1<<20)
	w := bufio.NewWriter(conn)
	send := func(s string) {
		w.WriteString(s + "\n")
		w.Flush()
	}
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || len(m.ID) == 0 {
			continue
		}
		reply := func(result any) {
			b, _ := json.Marshal(result)
			send(fmt.Sprintf(`{"id":%s,"result":%s}`, m.ID, b))
		}
		switch m.Method {
		case "initialize":
			reply(protocol.InitializeResult{SessionID: "s1", EnvironmentInfo: protocol.EnvironmentInfo{Cwd: "file:///"}})
		case "process/start":
			for _, s := range f.script {
				if s == "RESPONSE" {
					reply(protocol.StartResult{ProcessID: "P", SandboxType: "none"})
				} else {
					send(s)
				}
			}
		case "process/read":
			var p protocol.ReadParams
			json.Unmarshal(m.Params, &p)
			f.mu.Lock()
			f.reads = append(f.reads, p)
			nth := len(f.reads)
			f.mu.Unlock()
			res := f.state
			res.Chunks = []protocol.Chunk{}
			budget := uint64(1 << 62)
			if p.MaxBytes != nil {
				budget = *p.MaxBytes
			}
			var total uint64
			for _, ch := range f.retained {
				if p.AfterSeq != nil && ch.Seq <= *p.AfterSeq {
					continue
				}
				if len(res.Chunks) > 0 && total+uint64(len(ch.Chunk)) > budget {
					break
				}
				res.Chunks = append(res.Chunks, ch)
				total += uint64(len(ch.Chunk))
			}
			if p.MaxBytes != nil && len(res.Chunks) > 0 {
				res.NextSeq = res.Chunks[len(res.Chunks)-1].Seq + 1
			}
			reply(res)
			for _, s := range f.afterRead[nth] {
				send(s)
			}
		case "process/terminate":
			for _, s := range f.late {
				send(s)
			}
			reply(protocol.TerminateResult{Running: true})
		default:
			send(fmt.Sprintf(`{"error":{"code":-32601,"message":"no %s"},"id":%s}`, m.Method, m.ID))
		}
	}
}

// connect serves f on one end of a pipe and returns a client on the other,
// closed at the end of the test.
func (f *fakeServer) connect(t *testing.T, opts client.Options) *client.Client {
	t.Helper()
	cs, ss := net.Pipe()
	go f.serve(ss)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewConn(ctx, cs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func chunk(seq uint64, data string) protocol.Chunk {
	return protocol.Chunk{Seq: seq, Stream: "stdout", Chunk: []byte(data)}
}

func intp(i int) *int { return &i }

func TestEventOrderingAndRecovery(t *testing.T) {
	allRetained := []protocol.Chunk{chunk(1, "a"), chunk(2, "b"), chunk(3, "c")}
	done := func(next uint64, code int) protocol.ReadResult {
		return protocol.ReadResult{NextSeq: next, Exited: true, ExitCode: intp(code), Closed: true}
	}
	cases := []struct {
		name      string
		script    []string
		retained  []protocol.Chunk
		state     protocol.ReadResult
		wantOut   string
		wantErr   error // from reading stdout to the end
		wantCode  int
		wantReads int
		buffer    int // Cmd.BufferSize
	}{
		{
			name:    "complete and in order: no read",
			script:  []string{"RESPONSE", out(1, "stdout", "a"), out(2, "stdout", "b"), out(3, "stdout", "c"), exited(4, 0, "false"), closed(5)},
			wantOut: "abc", wantCode: 0, wantReads: 0,
		},
		{
			name:    "events before the start response",
			script:  []string{out(1, "stdout", "a"), out(2, "stdout", "b"), out(3, "stdout", "c"), exited(4, 2, "false"), closed(5), "RESPONSE"},
			wantOut: "abc", wantCode: 2, wantReads: 0,
		},
		{
			name:    "output after exit",
			script:  []string{"RESPONSE", out(1, "stdout", "a"), exited(2, 0, "false"), out(3, "stdout", "c"), closed(4)},
			wantOut: "ac", wantCode: 0, wantReads: 0,
		},
		{
			name:     "a gap is filled by exactly the missing chunk",
			script:   []string{"RESPONSE", out(1, "stdout", "a"), out(3, "stdout", "c"), exited(4, 0, "false"), closed(5)},
			retained: allRetained, state: done(6, 0),
			wantOut: "abc", wantCode: 0, wantReads: 1,
		},
		{
			name:     "pushes out of order",
			script:   []string{"RESPONSE", out(2, "stdout", "b"), out(1, "stdout", "a"), out(3, "stdout", "c"), exited(4, 0, "false"), closed(5)},
			retained: allRetained, state: done(6, 0),
			wantOut: "abc", wantCode: 0, wantReads: -1, // a read may or may not happen
		},
		{
			name:     "server omits sandboxDenied: one compatibility read",
			script:   []string{"RESPONSE", out(1, "stdout", "a"), exited(2, 1, ""), closed(3)},
			retained: allRetained[:1], state: done(4, 1),
			wantOut: "a", wantCode: 1, wantReads: 1,
		},
		{
			name:     "evicted chunk is reported lost",
			script:   []string{"RESPONSE", out(1, "stdout", "a"), out(3, "stdout", "c"), exited(4, 0, "false"), closed(5)},
			retained: allRetained[2:], state: done(6, 0),
			wantOut: "ac", wantErr: client.ErrOutputLost, wantCode: 0, wantReads: 1,
		},
		{
			name:     "lost exit push is recovered from the read's flags",
			script:   []string{"RESPONSE", out(1, "stdout", "a"), closed(3)},
			retained: allRetained[:1], state: done(4, 5),
			wantOut: "a", wantCode: 5, wantReads: 1,
		},
		{
			name:     "held-back pushes fill the buffer while a gap is open",
			script:   []string{"RESPONSE", out(2, "stdout", "cccc"), exited(3, 0, "false"), closed(4)},
			retained: []protocol.Chunk{chunk(1, "a"), chunk(2, "cccc")}, state: done(5, 0),
			wantOut: "acccc", wantCode: 0, wantReads: 1, buffer: 4,
		},
		{
			name:     "a tiny buffer recovers chunk by chunk",
			script:   []string{"RESPONSE", out(1, "stdout", "a"), out(3, "stdout", "cc"), out(4, "stdout", "dd"), exited(5, 0, "false"), closed(6)},
			retained: []protocol.Chunk{chunk(1, "a"), chunk(2, "bb"), chunk(3, "cc"), chunk(4, "dd")}, state: done(7, 0),
			wantOut: "abbccdd", wantCode: 0, wantReads: -1, buffer: 4,
		},
		{
			name:     "lost final events are found by Wait's idle probe",
			script:   []string{"RESPONSE", out(1, "stdout", "a")},
			retained: allRetained[:1], state: done(4, 9),
			wantOut: "a", wantCode: 9, wantReads: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{script: tc.script, retained: tc.retained, state: tc.state}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c := f.connect(t, client.Options{IdleProbe: 50 * time.Millisecond})
			p, err := c.Start(ctx, client.Cmd{Argv: []string{"x"}, ProcessID: "P", BufferSize: tc.buffer})
			if err != nil {
				t.Fatal(err)
			}
			code, err := p.Wait(ctx)
			if err != nil || code != tc.wantCode {
				t.Fatalf("Wait = %d, %v; want %d", code, err, tc.wantCode)
			}
			type result struct {
				out []byte
				err error
			}
			rc := make(chan result, 1)
			go func() {
				out, err := io.ReadAll(p.Stdout())
				rc <- result{out, err}
			}()
			var r result
			select {
			case r = <-rc:
			case <-ctx.Done():
				t.Fatal("reading the output did not end")
			}
			got, err := r.out, r.err
			if string(got) != tc.wantOut || !errors.Is(err, tc.wantErr) {
				t.Errorf("stdout %q, %v; want %q, %v", got, err, tc.wantOut, tc.wantErr)
			}
			f.mu.Lock()
			reads := f.reads
			f.mu.Unlock()
			if tc.wantReads >= 0 && len(reads) != tc.wantReads {
				t.Errorf("%d process/read requests (%+v), want %d", len(reads), reads, tc.wantReads)
			}
		})
	}
}

// TestPumpedOutputReportsLoss: when the output copied to Cmd.Stdout (and
// so Output's result) misses chunks the server no longer retains, Wait and
// Output report ErrOutputLost; they never return a short output with a nil
// error. The scripted pushes reach the client before the answer to its
// first process/read (the fake server is sequential), so the sequence is
// exact: seq 1's push is missing (a gap: recovery starts), seq 2 is held
// back, seq 3 finds the 4-byte buffer full (the client starts lagging and
// drops it), seq 4 is dropped while lagging; by the time the client reads,
// the server's window has moved on to seq 4 alone, so the read result
// jumps over seqs 1 and 3.
func TestPumpedOutputReportsLoss(t *testing.T) {
	script := []string{"RESPONSE", out(2, "stdout", "bbbb"), out(3, "stdout", "cccc"), out(4, "stdout", "dddd"), exited(5, 3, "false"), closed(6)}
	all := []protocol.Chunk{chunk(1, "a"), chunk(2, "bbbb"), chunk(3, "cccc"), chunk(4, "dddd")}
	state := protocol.ReadResult{NextSeq: 7, Exited: true, ExitCode: intp(3), Closed: true, SandboxDenied: false}
	cases := []struct {
		name     string
		retained []protocol.Chunk
		wantOut  string
		wantErr  error
	}{
		{"everything retained: complete", all, "abbbbccccdddd", nil},
		{"the window moved on: lost", all[3:], "bbbbdddd", client.ErrOutputLost},
	}
	for _, tc := range cases {
		for _, via := range []string{"Output", "Cmd.Stdout"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				f := &fakeServer{script: script, retained: tc.retained, state: state}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c := f.connect(t, client.Options{})
				cmd := client.Cmd{Argv: []string{"x"}, ProcessID: "P", BufferSize: 4}
				var got []byte
				var code int
				var err error
				if via == "Output" {
					got, code, err = c.Output(ctx, cmd)
				} else {
					var buf bytes.Buffer
					cmd.Stdout = &buf
					var p *client.Process
					if p, err = c.Start(ctx, cmd); err != nil {
						t.Fatal(err)
					}
					code, err = p.Wait(ctx)
					got = buf.Bytes()
				}
				if string(got) != tc.wantOut || code != 3 || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
					t.Errorf("got %q, code %d, %v; want %q, 3, %v", got, code, err, tc.wantOut, tc.wantErr)
				}
			})
		}
	}
}

// TestOutputNotWrittenAfterReturn: when Output returns early (its ctx
// ended while the process runs on) its copier is still running; output
// that arrives afterwards must not be written into the returned slice.
// Run with -race: before the fix the copier's write raced with the caller.
func TestOutputNotWrittenAfterReturn(t *testing.T) {
	f := &fakeServer{
		script: []string{"RESPONSE", out(1, "stdout", "a"), out(2, "stderr", "x")},
		// Cancelling Output's ctx terminates the process: the server then
		// sends output the client will deliver to the copier.
		late:     []string{out(3, "stdout", "late")},
		retained: []protocol.Chunk{chunk(1, "a")},
	}
	c := f.connect(t, client.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	// The process's stderr ends Output's ctx: Start has returned by then.
	stderr := writerFunc(func(b []byte) (int, error) { cancel(); return len(b), nil })
	got, code, err := c.Output(ctx, client.Cmd{Argv: []string{"x"}, ProcessID: "P", Stderr: stderr})
	if !errors.Is(err, context.Canceled) || code != -1 {
		t.Fatalf("Output = %q, %d, %v; want context.Canceled and -1", got, code, err)
	}
	// The terminate's answer follows the late push on the connection, so
	// once a second terminate returns the late chunk has been delivered
	// to the copier; give it time to write where the old Output let it.
	p0 := string(got)
	if _, err := client.TerminateByID(c, context.Background(), "P"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) && len(got) < cap(got) && string(got[len(got):min(cap(got), len(got)+4)]) != "late" {
		time.Sleep(10 * time.Millisecond)
	}
	// The late push may beat the cancellation to the copier (then it is
	// in the result from the start); what must not happen is a change
	// after Output returned.
	if string(got) != p0 || (p0 != "" && p0 != "a" && p0 != "alate") {
		t.Errorf("Output's result changed after it returned: %q then %q", p0, got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestOutputDoesNotDropPushes: Output keeps every pushed chunk, however far
// its copier is behind. Here seq 1's push is missing (a gap: its
// recovery read is answered only after all the pushes, and the server's
// window has moved on past it, so it is lost), and seq 3 arrives while 3
// MiB are held back behind the gap: with the default 4 MiB bound the
// client dropped it, to read it back from a window that no longer holds
// it either, and lost 3 MiB more than the server did.
func TestOutputDoesNotDropPushes(t *testing.T) {
	b := strings.Repeat("b", 3<<20)
	c3 := strings.Repeat("c", 3<<20)
	f := &fakeServer{
		script:   []string{"RESPONSE", out(2, "stdout", b), out(3, "stdout", c3), out(4, "stdout", "d"), exited(5, 0, "false"), closed(6)},
		retained: []protocol.Chunk{chunk(4, "d")},
		state:    protocol.ReadResult{NextSeq: 7, Exited: true, ExitCode: intp(0), Closed: true},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := f.connect(t, client.Options{})
	got, code, err := c.Output(ctx, client.Cmd{Argv: []string{"x"}, ProcessID: "P"})
	if !errors.Is(err, client.ErrOutputLost) || code != 0 || string(got) != b+c3+"d" {
		t.Errorf("Output = %d bytes, %d, %v; want %d bytes (all but the evicted seq 1), 0, ErrOutputLost", len(got), code, err, len(b+c3+"d"))
	}
}

// TestGuessedExitHoleContradicted: when a read reports the exit before the
// exit event's push arrived, the client takes the first hole for the exit
// event; if the push then shows the exit has another seq, that hole was an
// evicted chunk and the output ends with ErrOutputLost, not io.EOF.
// Sequence: seq 2's push is missing (a gap); the read after 1 finds the
// process exited and seq 2 evicted, and returns seq 3; the next read finds
// nothing newer; only then do the pushes of the exit (seq 4) and the close
// (seq 5) arrive.
func TestGuessedExitHoleContradicted(t *testing.T) {
	cases := []struct {
		name    string
		script  []string
		later   []string
		wantErr error
	}{
		{"the hole was output", []string{"RESPONSE", out(1, "stdout", "a"), out(3, "stdout", "c")}, []string{exited(4, 0, "false"), closed(5)}, client.ErrOutputLost},
		{"the hole was the exit", []string{"RESPONSE", out(1, "stdout", "a"), out(3, "stdout", "c")}, []string{exited(2, 0, "false"), closed(4)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{
				script:    tc.script,
				retained:  []protocol.Chunk{chunk(3, "c")},
				state:     protocol.ReadResult{NextSeq: 4, Exited: true, ExitCode: intp(0), SandboxDenied: false},
				afterRead: map[int][]string{2: tc.later},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c := f.connect(t, client.Options{})
			got, code, err := c.Output(ctx, client.Cmd{Argv: []string{"x"}, ProcessID: "P"})
			if string(got) != "ac" || code != 0 || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				f.mu.Lock()
				t.Errorf("Output = %q, %d, %v; want \"ac\", 0, %v (reads %d)", got, code, err, tc.wantErr, len(f.reads))
				f.mu.Unlock()
			}
		})
	}
}
