package process

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// gatherAll reads r through a gatherer with chunks of size until the end
// and returns the chunks.
func gatherAll(t *testing.T, g *gatherer, size int) [][]byte {
	t.Helper()
	var chunks [][]byte
	for {
		buf := make([]byte, size)
		n, err := g.read(buf)
		if n > 0 {
			if err != nil {
				t.Fatalf("read returned %d bytes and %v", n, err)
			}
			chunks = append(chunks, buf[:n])
			continue
		}
		if err != io.EOF {
			t.Fatalf("read: %v (want io.EOF)", err)
		}
		return chunks
	}
}

// A child writing 4 KiB at a time gets full chunks once its output comes
// at bulk rates: with a hold that never runs out, every chunk but the
// first and the last is full, whatever the timing.
func TestGatherBulkPipeFillsChunks(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const size, total = 64 << 10, 1 << 20
	go func() {
		piece := bytes.Repeat([]byte{'x'}, 4096)
		for range total / len(piece) {
			if _, err := w.Write(piece); err != nil {
				break
			}
		}
		w.Close()
	}()
	chunks := gatherAll(t, newGatherer(r, time.Hour), size)
	got := 0
	for i, c := range chunks {
		got += len(c)
		if i > 0 && i < len(chunks)-1 && len(c) != size {
			t.Errorf("chunk %d of %d has %d bytes, want %d", i, len(chunks), len(c), size)
		}
	}
	if got != total {
		t.Fatalf("got %d bytes, want %d", got, total)
	}
}

// Interactive output is never held: a small write after a pause goes out
// at once, even with a hold that never runs out (a held chunk would hang
// this test until its timeout).
func TestGatherInteractiveNotHeld(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	g := newGatherer(r, time.Hour)
	buf := make([]byte, 64<<10)
	for i := range 20 {
		msg := []byte("prompt " + strconv.Itoa(i) + "$ ")
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		n, err := g.read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, msg)
		}
	}
	// After bulk output (a full chunk and then some), the next small
	// write ends the hold only when the hold runs out: here, a short one.
	g.hold = 20 * time.Millisecond
	big := bytes.Repeat([]byte{'y'}, 8192)
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	if n, err := g.read(buf); err != nil || n != len(big) {
		t.Fatalf("read %d, %v; want %d", n, err, len(big))
	}
	if _, err := w.Write([]byte("$ ")); err != nil {
		t.Fatal(err)
	}
	if n, err := g.read(buf); err != nil || string(buf[:n]) != "$ " {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// A hold's deadline passing between its reads ends the hold, not the
// stream (it did once: the drain after the hold's read met the expired
// deadline and took it for the stream's end).
func TestGatherExpiredHoldIsNotAnError(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g := newGatherer(r, time.Millisecond)
	if g.rc == nil {
		t.Fatal("a pipe from os.Pipe is not read without waiting")
	}
	data := bytes.Repeat([]byte{'z'}, 8192)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := g.setDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	// A pipe's non-blocking reads take what is there whatever the
	// deadline (it bounds only waiting); a pollable stream's may stop at
	// the deadline. Either way nothing is lost and the stream goes on.
	buf := make([]byte, 64<<10)
	n := g.drain(buf, 0)
	if g.pending != nil {
		t.Fatalf("drain past the deadline: %d bytes, pending %v", n, g.pending)
	}
	if n = g.holdFor(buf, n, time.Now().Add(-time.Second)); g.pending != nil {
		t.Fatalf("hold past its deadline: %d bytes, pending %v", n, g.pending)
	}
	w.Close()
	chunks := gatherAll(t, g, len(buf))
	got := n
	for _, c := range chunks {
		got += len(c)
	}
	if got != len(data) {
		t.Fatalf("got %d bytes after the hold, want %d", got, len(data))
	}
}

// Pieces of output written with pauses longer than the hold all arrive,
// in order, and the stream ends once.
func TestGatherPausesLongerThanHold(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var want []byte
	go func() {
		for i := range 30 {
			piece := bytes.Repeat([]byte{byte('a' + i%26)}, 4096+i)
			if _, err := w.Write(piece); err != nil {
				break
			}
			if i%3 == 0 {
				time.Sleep(2 * time.Millisecond)
			}
		}
		w.Close()
	}()
	for i := range 30 {
		want = append(want, bytes.Repeat([]byte{byte('a' + i%26)}, 4096+i)...)
	}
	var got []byte
	for _, c := range gatherAll(t, newGatherer(r, time.Millisecond), 16<<10) {
		got = append(got, c...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d, or not in order", len(got), len(want))
	}
}

// PTY output: the master returns at most 4 KiB per read; the chunks are
// still full (the hold never runs out here), and nothing is lost at the
// end (EIO once the child is gone).
func TestGatherPTYChunks(t *testing.T) {
	t.Parallel()
	m, sink := newTestManager(t, Options{OutputHold: time.Hour})
	const total = 1 << 20
	p := params(t, "tty", "head", "-c", strconv.Itoa(total), "/dev/zero")
	p.TTY = true
	mustStart(t, m, p)
	evs := sink.waitClosed(t, "tty")
	var sizes []int
	got := 0
	for _, ev := range evs {
		if ev.Kind == EventOutput {
			sizes = append(sizes, len(ev.Data))
			got += len(ev.Data)
		}
	}
	if got != total {
		t.Fatalf("got %d bytes, want %d", got, total)
	}
	// One read per chunk made 256 chunks of 4 KiB. A chunk is held until
	// full once the one before it had bulkMin bytes or more (see gatherer);
	// the chunks before that go out as soon as the stream is drained, which
	// on a loaded machine (the child descheduled) may take a few of them:
	// seen [2048 8192 65536 ...].
	held := 0
	for i, n := range sizes {
		if i == 0 || i == len(sizes)-1 || sizes[i-1] < bulkMin {
			continue
		}
		held++
		if n != 64<<10 {
			t.Errorf("chunk %d of %d has %d bytes after one of %d, want %d: %v", i, len(sizes), n, sizes[i-1], 64<<10, sizes)
			break
		}
	}
	if held == 0 {
		t.Errorf("no chunk was held to fill up: %v", sizes)
	}
}

// A pipe read by a gatherer is not in the Go runtime's epoll set, only in
// the gatherer's own (see quietWait): the runtime's idle thread must not
// be woken by every write of a busy child. /proc/self/fdinfo of each epoll
// instance lists the inodes it watches.
func TestGatherPipeOutsideRuntimePoller(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	g := newGatherer(r, time.Millisecond)
	defer g.close()
	if g.q == nil {
		t.Fatal("a pipe from os.Pipe gets no quiet wait")
	}
	own := -1
	if rc, err := g.q.ep.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { own = int(fd) })
	}
	wfd := -1
	if rc, err := w.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { wfd = int(fd) })
	}
	// The write end stays in the runtime's poller here (in a spawn the
	// parent closes it); the read end must be in the gatherer's only.
	watchers := epollWatchers(t, st.Ino, wfd)
	if len(watchers) != 1 || watchers[0] != own {
		t.Fatalf("the pipe's read end (inode %d) is watched by epoll instances %v; want only the gatherer's own (%d)", st.Ino, watchers, own)
	}
	// And it is read all the same.
	go func() { _, _ = w.Write([]byte("hello")) }()
	buf := make([]byte, 64)
	if n, err := g.read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

// epollWatchers returns the descriptors of this process's epoll instances
// that watch the file with inode ino through a descriptor other than
// except.
func epollWatchers(t *testing.T, ino uint64, except int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	want := " ino:" + strconv.FormatUint(ino, 16) + " "
	var out []int
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(info)) {
			var tfd int
			if _, err := fmt.Sscanf(line, "tfd: %d", &tfd); err != nil || tfd == except || !strings.Contains(line, want) {
				continue
			}
			fd, _ := strconv.Atoi(e.Name())
			out = append(out, fd)
			break
		}
	}
	return out
}

// drained (what a sandbox's reaper waits for when a stream's writer lives
// on outside the sandbox) holds only while the reader waits with nothing
// in hand and the stream is empty: never while bytes are in the stream,
// in a PTY's pending flush, or read and not yet handed back by read.
func TestGatherDrained(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"pipe", "pty"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var r, w *os.File
			var err error
			if kind == "pipe" {
				r, w, err = os.Pipe()
			} else {
				var master *os.File
				if master, w, err = pty.Open(); err == nil {
					r, err = pollable(master)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			g := newGatherer(r, 0)
			defer g.close()
			got := make(chan int)
			cont := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 4096)
				for {
					n, err := g.read(buf)
					got <- n
					if err != nil {
						return
					}
					<-cont // the chunk is in hand until the test lets go
				}
			}()
			waitDrained := func() {
				t.Helper()
				for deadline := time.Now().Add(15 * time.Second); !g.drained(); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("not drained with nothing in hand and nothing to read")
					}
				}
			}
			waitDrained()
			for i := range 20 {
				if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
					t.Fatal(err)
				}
				// Written: in the stream, or read and in hand.
				if g.drained() {
					t.Fatalf("write %d: drained with output not handed back", i)
				}
				if n := <-got; n <= 0 {
					t.Fatalf("write %d: read %d", i, n)
				}
				if g.drained() {
					t.Fatalf("write %d: drained with a chunk in hand", i)
				}
				cont <- struct{}{}
				waitDrained()
			}
			g.close()
			<-got
			<-done
		})
	}
}
