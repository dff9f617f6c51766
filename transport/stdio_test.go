package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgo/exec-server/jsonrpc"
)

// readAll reads messages until an error other than a *DecodeError; decode
// errors are recorded as "ERR:<detail>".
func readAll(t *testing.T, s *Stdio) []string {
	t.Helper()
	var got []string
	for range 1000 {
		msg, err := s.Read(context.Background())
		var de *jsonrpc.DecodeError
		switch {
		case errors.As(err, &de):
			got = append(got, "ERR:"+de.Detail)
		case errors.Is(err, io.EOF):
			return got
		case err != nil:
			t.Fatalf("Read: %v", err)
		default:
			got = append(got, string(msg))
		}
	}
	t.Fatal("no EOF after 1000 reads")
	return nil
}

func TestStdioRead(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // longer than the 64 KiB read buffer
	tests := []struct {
		name  string
		in    string
		limit int
		want  []string
	}{
		{"lines", "a\nb\n", 100, []string{"a", "b"}},
		{"crlf", "a\r\nb\r\n", 100, []string{"a", "b"}},
		{"blank lines skipped", "\n\na\n\n  \n\t\r\n\r\nb\n\n", 100, []string{"a", "b"}},
		{"last line without newline", "a\nb", 100, []string{"a", "b"}},
		{"last line crlf-less cr", "a\nb\r", 100, []string{"a", "b"}},
		{"only blanks", "\n \n\r\n", 100, nil},
		{"empty", "", 100, nil},
		{"inner cr kept", "a\rb\n", 100, []string{"a\rb"}},
		{"leading space kept", "  {}\n", 100, []string{"  {}"}},
		{"at the limit", "0123456789\n", 10, []string{"0123456789"}},
		{"at the limit with crlf", "0123456789\r\nnext\n", 10, []string{"0123456789", "next"}},
		{"over the limit", "01234567890\nnext\n", 10,
			[]string{"ERR:message of 11 bytes exceeds the limit of 10 bytes", "next"}},
		{"over the limit, last line", "ok\n01234567890", 10,
			[]string{"ok", "ERR:message of 11 bytes exceeds the limit of 10 bytes"}},
		{"two over the limit", "01234567890\n01234567890123\nend\n", 10, []string{
			"ERR:message of 11 bytes exceeds the limit of 10 bytes",
			"ERR:message of 14 bytes exceeds the limit of 10 bytes", "end"}},
		{"long line within the limit", long + "\nnext\n", 300 << 10, []string{long, "next"}},
		{"long line over the limit", "first\n" + long + "\nnext\n", 100 << 10, []string{"first",
			"ERR:message of 204800 bytes exceeds the limit of 102400 bytes", "next"}},
		{"long last line over the limit", long, 100 << 10, []string{
			"ERR:message of 204800 bytes exceeds the limit of 102400 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStdio(strings.NewReader(tt.in), io.Discard, nil, tt.limit)
			got := readAll(t, s)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d messages %.200q, want %d %.200q", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("message %d = %.80q, want %.80q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestStdioReadReturnsWithoutWaitingForMore(t *testing.T) {
	r, w := io.Pipe()
	s := NewStdio(r, io.Discard, nil, 1<<20)
	got := make(chan string, 2)
	go func() {
		for {
			msg, err := s.Read(context.Background())
			if err != nil {
				close(got)
				return
			}
			got <- string(msg)
		}
	}()
	for _, line := range []string{`{"id":1}`, `{"id":2}`} {
		if _, err := w.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != line {
				t.Fatalf("read %q, want %q", m, line)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("line %s not returned while the writer stays open", line)
		}
	}
	w.Close()
	if _, ok := <-got; ok {
		t.Error("more messages after EOF")
	}
}

func TestStdioZeroLimitIsTheDefault(t *testing.T) {
	msg := strings.Repeat("z", 1<<20)
	s := NewStdio(strings.NewReader(msg+"\n"), io.Discard, nil, 0)
	if got := readAll(t, s); len(got) != 1 || got[0] != msg {
		t.Errorf("a 1 MiB line with limit 0: %d messages, first %.40q", len(got), got)
	}
}

func TestStdioReadReturnsOwnedSlices(t *testing.T) {
	// The Conn keeps a message while it reads the next: the slices must
	// not share the reader's buffer.
	s := NewStdio(strings.NewReader("aaaa\nbbbb\n"), io.Discard, nil, 100)
	first, _ := s.Read(context.Background())
	second, _ := s.Read(context.Background())
	if string(first) != "aaaa" || string(second) != "bbbb" {
		t.Errorf("got %q then %q", first, second)
	}
}

// recordingWriter records each Write call to the underlying writer.
type recordingWriter struct {
	mu     sync.Mutex
	writes []string
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *recordingWriter) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.writes, "")
}

func TestStdioWrite(t *testing.T) {
	w := &recordingWriter{}
	s := NewStdio(strings.NewReader(""), w, nil, 100)
	ctx := context.Background()
	if err := s.Write(ctx, []byte(`{"id":1}`), false); err != nil {
		t.Fatal(err)
	}
	if got := w.all(); got != "{\"id\":1}\n" {
		t.Fatalf("after an unbuffered write: %q", got)
	}
	// more=true may hold the message back until the next flush...
	if err := s.Write(ctx, []byte(`{"id":2}`), true); err != nil {
		t.Fatal(err)
	}
	if got := w.all(); got != "{\"id\":1}\n" {
		t.Fatalf("a message with more=true was flushed at once: %q", got)
	}
	// ... which the next message without more does.
	if err := s.Write(ctx, []byte(`{"id":3}`), false); err != nil {
		t.Fatal(err)
	}
	if got := w.all(); got != "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n" {
		t.Fatalf("after the flush: %q", got)
	}
	// A large backlog is flushed even while more keep coming.
	big := bytes.Repeat([]byte("x"), 40<<10)
	if err := s.Write(ctx, big, true); err != nil {
		t.Fatal(err)
	}
	if got := w.all(); !strings.HasSuffix(got, "xxx\n") {
		t.Errorf("40 KiB held back with more=true (len %d)", len(got))
	}
}

type errWriter struct{}

func (errWriter) Write([]byte) (int, error) { return 0, errors.New("EPIPE") }

type countCloser struct{ n int }

func (c *countCloser) Close() error { c.n++; return nil }

func TestStdioWriteErrorAndClose(t *testing.T) {
	c := &countCloser{}
	s := NewStdio(strings.NewReader(""), errWriter{}, c, 100)
	if err := s.Write(context.Background(), []byte("x"), false); err == nil {
		t.Error("Write to a failing writer succeeded")
	}
	if err := s.Close(); err != nil || c.n != 1 {
		t.Errorf("Close = %v, closer called %d times", err, c.n)
	}
	if err := NewStdio(strings.NewReader(""), io.Discard, nil, 1).Close(); err != nil {
		t.Errorf("Close without a closer = %v", err)
	}
	if s.Describe() != "exec-server stdio" {
		t.Errorf("Describe = %q", s.Describe())
	}
}

func TestStdioConcurrentWrites(t *testing.T) {
	w := &recordingWriter{}
	s := NewStdio(strings.NewReader(""), w, nil, 100)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_ = s.Write(context.Background(), bytes.Repeat([]byte{'a' + byte(i)}, 100), false)
			}
		}()
	}
	wg.Wait()
	for _, line := range strings.Split(strings.TrimSuffix(w.all(), "\n"), "\n") {
		if len(line) != 100 || strings.Count(line, line[:1]) != 100 {
			t.Fatalf("interleaved line %q", line)
		}
	}
}

// A recycled large message's buffer is the next large message's: no new
// buffer (its clearing and page faults) per message of a run of them.
//
// The kept buffer is server-wide and dropped by the reclaim of large
// messages (jsonrpc/reclaim.go: 5 s after the last one, or after a large
// message of another test of this binary), which may fire between a
// Recycle and the next Read on a loaded machine. A drop is one event, and
// each Recycle re-arms the keep, so the test tries a few pairs and fails
// only when no pair reused the buffer: a defect fails every pair.
func TestStdioRecyclesLargeMessages(t *testing.T) {
	const tries = 4
	line := func(c byte) string { return `"` + strings.Repeat(string(c), 1<<20) + `"` + "\n" }
	var in strings.Builder
	for i := range tries + 2 {
		in.WriteString(line('a' + byte(i)))
	}
	s := NewStdio(strings.NewReader(in.String()), io.Discard, nil, 0)
	prev, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reused := false
	var next []byte
	for i := 1; i <= tries && !reused; i++ {
		s.Recycle(prev)
		if next, err = s.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
		c := 'a' + byte(i)
		if next[1] != c || next[len(next)-2] != c || len(next) != 1<<20+2 {
			t.Fatalf("message %d read wrong: %d bytes", i, len(next))
		}
		reused = &next[0] == &prev[0]
		prev = next
	}
	if !reused {
		t.Fatalf("the recycled buffer was not reused in %d tries", tries)
	}
	s.Release(next) // not recycled: the next one gets a new buffer
	last, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if &last[0] == &next[0] {
		t.Fatal("a released (not recycled) buffer was reused")
	}
}
