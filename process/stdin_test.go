package process

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/protocol"
)

// A write larger than the pipe is written in part at once and queued for
// the rest; the writes behind it, and the end of input, must wait for it:
// the child reads every chunk in request order.
func TestWritesKeepOrderPastAFullPipe(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	p := params(t, "cat", "cat")
	p.PipeStdin = true
	mustStart(t, m, p)
	var want bytes.Buffer
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: 16 pipes' worth
	chunks := [][]byte{[]byte("first|"), big, []byte("|after-big"), []byte("|small"), big[:70000], []byte("|last")}
	for i, c := range chunks {
		res, err := m.Write(protocol.WriteParams{ProcessID: "cat", Chunk: c, WriteID: str(strconv.Itoa(i))})
		if err != nil || res.Status != protocol.WriteAccepted {
			t.Fatalf("write %d: %+v %v", i, res, err)
		}
		want.Write(c)
	}
	if err := m.CloseStdin("cat"); err != nil {
		t.Fatal(err)
	}
	got := output(sink.waitClosed(t, "cat"), protocol.StreamStdout)
	if got != want.String() {
		t.Fatalf("cat read %d bytes, want %d; first difference at byte %d", len(got), want.Len(), firstDiff(got, want.String()))
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The PTY master is non-blocking: a child that does not read its terminal
// must not block process/write (which runs on the connection's read loop)
// once the terminal's input buffer is full; the rest is queued.
func TestPTYWriteToAChildThatDoesNotRead(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{})
	p := params(t, "deaf", "sh", "-c", "stty -echo -icanon; echo ready; exec sleep 60")
	p.TTY = true
	mustStart(t, m, p)
	sink.waitOutput(t, "deaf", "ready")
	proc := m.get("deaf")
	rc, err := proc.master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		t.Fatalf("F_GETFL: %v %v", err, ferr)
	}
	if flags&unix.O_NONBLOCK == 0 {
		t.Error("the PTY master is in blocking mode")
	}
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	for i := range 64 { // 1 MiB: far more than a terminal buffers
		res, err := m.Write(protocol.WriteParams{ProcessID: "deaf", Chunk: chunk, WriteID: str(fmt.Sprint(i))})
		if err != nil || res.Status != protocol.WriteAccepted {
			t.Fatalf("write %d: %+v %v", i, res, err)
		}
	}
	proc.stdin.mu.Lock()
	queued := proc.stdin.queued
	proc.stdin.mu.Unlock()
	if queued == 0 {
		t.Error("nothing queued: 1 MiB went into a terminal nobody reads")
	}
	m.Terminate(protocol.TerminateParams{ProcessID: "deaf"})
	sink.waitClosed(t, "deaf")
}

// Events keep their order and numbering when every output stream and the
// reaper deliver on their own goroutines: seq starts at 1 with no gap,
// nothing is lost, closed is last.
func TestEventsInSeqOrderFromEveryProducer(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{ReadSize: 512})
	for i := range 8 {
		id := fmt.Sprint("both", i)
		mustStart(t, m, params(t, id, "sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do echo out$i; echo err$i >&2; done; head -c 100000 /dev/zero; exit 3"))
	}
	for i := range 8 {
		id := fmt.Sprint("both", i)
		evs := sink.waitClosed(t, id)
		var exited bool
		for j, ev := range evs {
			if ev.Seq != uint64(j+1) {
				t.Fatalf("%s: event %d has seq %d", id, j, ev.Seq)
			}
			switch ev.Kind {
			case EventExited:
				exited = true
				if ev.ExitCode != 3 {
					t.Errorf("%s: exit code %d", id, ev.ExitCode)
				}
			case EventClosed:
				if j != len(evs)-1 {
					t.Errorf("%s: closed is event %d of %d", id, j+1, len(evs))
				}
			}
		}
		if !exited {
			t.Errorf("%s: no exited event", id)
		}
		if out := output(evs, protocol.StreamStdout); len(out) != 100000+len("out1\n")*9+len("out10\n") {
			t.Errorf("%s: %d bytes of stdout", id, len(out))
		}
	}
}
