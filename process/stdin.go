package process

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/budget"
	"github.com/execgo/exec-server/protocol"
)

// stdinWriter feeds a child's stdin (a pipe or the PTY master). A write
// that finds nothing queued is tried at once, without blocking, on the
// caller's goroutine: an interactive keystroke then reaches the child with
// no hand-off. Whatever does not fit goes to a bounded queue that its own
// goroutine writes, so a child that does not read its input never blocks
// the connection that writes to it.
type stdinWriter struct {
	f        *os.File
	rc       syscall.RawConn // for the non-blocking attempt; nil: always queue
	ownsFile bool            // a pipe's write end is ours to close; a PTY master is closed by its reader
	limit    int
	budget   *budget.Bytes // shared by every writer of the server; nil: unlimited
	mu       sync.Mutex
	cond     *sync.Cond
	queue    [][]byte
	queued   int
	done     bool
	eof      bool // input ended by the client: close once the queue is written
	broken   bool
	writing  bool // run is writing data it took from the queue
}

func newStdinWriter(f *os.File, limit int, b *budget.Bytes, ownsFile bool) *stdinWriter {
	w := &stdinWriter{f: f, limit: limit, budget: b, ownsFile: ownsFile}
	w.cond = sync.NewCond(&w.mu)
	if rc, err := f.SyscallConn(); err == nil {
		w.rc = rc
	}
	return w
}

// enqueue queues data; it fails when the queue is full or stdin is gone.
func (w *stdinWriter) enqueue(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.broken {
		return protocol.Internal("failed to write to process stdin").WithKind(protocol.KindStdinClosed)
	}
	if w.eof {
		return protocol.Internal("failed to write to process stdin: it was closed with process/closeStdin").WithKind(protocol.KindStdinClosed)
	}
	if w.queued+len(data) > w.limit {
		return protocol.Internal("failed to write to process stdin: %d bytes already queued and not yet read by the process (limit %d)", w.queued, w.limit).WithKind(protocol.KindStdinFull)
	}
	if !w.budget.TryAcquire(int64(len(data))) {
		// Server-wide and temporary: a distinct kind, so that a client does
		// not take it for a closed stdin.
		return protocol.Internal("failed to write to process stdin: %v; the processes are not reading their input", w.budget.Exhausted(int64(len(data)))).WithKind(protocol.KindStdinBusy)
	}
	if len(w.queue) == 0 && !w.writing {
		// Nothing ahead of data: order allows writing it now.
		n, err := w.tryWrite(data)
		w.budget.Release(int64(n))
		if err != nil {
			// What the writer goroutine would have found: the
			// write is accepted and the input is gone.
			w.broken = true
			w.budget.Release(int64(len(data) - n))
			return nil
		}
		if data = data[n:]; len(data) == 0 {
			return nil
		}
	}
	w.queue = append(w.queue, data)
	w.queued += len(data)
	w.cond.Signal()
	return nil
}

// run writes queued data until close is called.
func (w *stdinWriter) run() {
	defer func() {
		if w.ownsFile {
			w.f.Close()
		}
	}()
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.done && !w.eof {
			w.cond.Wait()
		}
		if w.done || len(w.queue) == 0 {
			// Stopped, or end of input with everything written: the
			// deferred close gives the child its end-of-file.
			w.dropLocked()
			w.mu.Unlock()
			return
		}
		data := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.writing = true
		w.mu.Unlock()

		_, err := w.f.Write(data)

		w.mu.Lock()
		w.writing = false
		w.queued -= len(data)
		w.budget.Release(int64(len(data)))
		if err != nil {
			w.broken = true
			w.dropLocked()
		}
		w.mu.Unlock()
	}
}

// tryWrite writes what the file takes at once, without waiting: it stops
// at EAGAIN, and does not try at all on a descriptor in blocking mode (a
// PTY master is one after an ioctl through (*os.File).Fd), where a write
// could block the caller until the child reads. The caller holds w.mu.
func (w *stdinWriter) tryWrite(data []byte) (n int, err error) {
	if w.rc == nil {
		return 0, nil
	}
	rerr := w.rc.Write(func(fd uintptr) bool {
		if fl, ferr := unix.FcntlInt(fd, unix.F_GETFL, 0); ferr != nil || fl&unix.O_NONBLOCK == 0 {
			return true
		}
		for n < len(data) {
			m, werr := unix.Write(int(fd), data[n:])
			switch {
			case werr == unix.EINTR:
				continue
			case werr == unix.EAGAIN:
				return true
			case werr != nil:
				err = werr
				return true
			case m <= 0:
				return true
			}
			n += m
		}
		return true
	})
	if rerr != nil && err == nil {
		err = rerr // the file is closed
	}
	return n, err
}

// dropLocked forgets what is queued and gives its bytes back.
func (w *stdinWriter) dropLocked() {
	w.budget.Release(int64(w.queued))
	w.queue, w.queued = nil, 0
}

// closeInput ends the child's input once what is queued has been written.
func (w *stdinWriter) closeInput() {
	w.mu.Lock()
	w.eof = true
	w.cond.Signal()
	w.mu.Unlock()
}

// close stops the writer. A write blocked on a full pipe ends when the
// child dies (EPIPE), which is when close is called.
func (w *stdinWriter) close() {
	w.mu.Lock()
	w.done = true
	w.cond.Signal()
	w.mu.Unlock()
	if w.ownsFile {
		// Unblocks a pending write whose reader is a surviving
		// descendant.
		w.f.Close()
	}
}
