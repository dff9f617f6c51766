package process

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"testing"
	"time"
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
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if n := g.drain(buf, 0); n != 0 || g.pending != nil {
		t.Fatalf("drain past the deadline: %d bytes, pending %v", n, g.pending)
	}
	if n := g.holdFor(buf, 0, time.Now().Add(-time.Second)); n != 0 || g.pending != nil {
		t.Fatalf("hold past its deadline: %d bytes, pending %v", n, g.pending)
	}
	w.Close()
	chunks := gatherAll(t, g, len(buf))
	got := 0
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
