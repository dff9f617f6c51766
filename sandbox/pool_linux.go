package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Run: an fs operation in a confined helper, through a pool of warm
// helpers per plan, and the helper protocol on the server's side.

// Reply status bytes.
const (
	replyOK    = 'O'
	replyError = 'E'
)

func run(ctx context.Context, p *policy.Plan, name string, req []byte) ([]byte, *os.File, error) {
	if s := Probe(); !s.Available {
		return nil, nil, unavailable(s)
	}
	return runHelper(ctx, p, name, req)
}

// A helper serves calls one at a time, for one plan. After a call it waits
// (warm) for another of the same plan, for at most warmIdle, so that a
// burst of operations (an apply_patch) pays the start-up (~4 ms: exec,
// the Go runtime, the view) once. Its view is checked before reuse: if a
// path of the plan now names another file (a workspace deleted and made
// again), the helper is dropped. The idle time is short because a warm
// helper keeps the host mount points of missing protected paths (empty
// directories such as W/.codex, removed when it exits): a server that
// exits leaves them behind for at most that long after its last call.
const (
	warmIdle       = 500 * time.Millisecond
	warmPerPlan    = 2       // idle helpers kept per plan
	warmTotal      = 16      // idle helpers kept in all
	warmRequestMax = 1 << 30 // bytes of a request or a reply
)

type helper struct {
	key     string
	conn    *net.UnixConn
	proc    *os.Process
	exited  chan *os.ProcessState // the exit status, once reaped
	inodes  map[string][2]uint64  // dev and inode of the plan's paths at start
	timer   *time.Timer           // idle timer, while in the pool
	started bool                  // served a call: the view was built
}

var (
	warmMu   sync.Mutex
	warmPool = map[string][]*helper{}
	warmN    int
)

func runHelper(ctx context.Context, p *policy.Plan, name string, req []byte) (reply []byte, file *os.File, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("sandbox helper: %w", err)
	}
	// The view does not depend on the context's cwd: plans that differ
	// only there share helpers.
	q := *p
	q.Cwd = ""
	if len(q.DenyGlobs) > 0 {
		q.CreationLock = creationLockPath()
	}
	key, err := json.Marshal(&q)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	h := takeWarm(string(key), p)
	defer observeHelper(ctx, start, h != nil)
	if h == nil {
		if h, err = startHelper(p, string(key)); err != nil {
			return nil, nil, err
		}
	}
	reply, file, err = h.call(ctx, name, req)
	if err != nil {
		h.close(true)
		return nil, nil, err
	}
	h.started = true
	putWarm(h)
	return reply, file, nil
}

// inodesOf records what p's paths are now.
func inodesOf(p *policy.Plan) map[string][2]uint64 {
	m := map[string][2]uint64{}
	for _, mt := range p.Mounts {
		var st unix.Stat_t
		if unix.Lstat(mt.Path, &st) == nil {
			m[mt.Path] = [2]uint64{st.Dev, st.Ino}
		}
	}
	return m
}

func takeWarm(key string, p *policy.Plan) *helper {
	warmMu.Lock()
	defer warmMu.Unlock()
	for hs := warmPool[key]; len(hs) > 0; hs = warmPool[key] {
		h := hs[len(hs)-1]
		warmPool[key] = hs[:len(hs)-1]
		warmN--
		if len(warmPool[key]) == 0 {
			delete(warmPool, key)
		}
		if !h.timer.Stop() {
			continue // its idle timer is closing it
		}
		select {
		case st := <-h.exited: // died idle (Pdeathsig follows the thread that started it)
			h.exited <- st
			go h.close(false)
			continue
		default:
		}
		now := inodesOf(p)
		same := len(now) == len(h.inodes)
		for k, v := range now {
			same = same && h.inodes[k] == v
		}
		if !same {
			go h.close(false)
			continue
		}
		return h
	}
	return nil
}

func putWarm(h *helper) {
	warmMu.Lock()
	defer warmMu.Unlock()
	if warmN >= warmTotal || len(warmPool[h.key]) >= warmPerPlan {
		go h.close(false)
		return
	}
	warmN++
	warmPool[h.key] = append(warmPool[h.key], h)
	h.timer = time.AfterFunc(warmIdle, func() {
		warmMu.Lock()
		hs := warmPool[h.key]
		for i, x := range hs {
			if x == h {
				warmPool[h.key] = append(hs[:i:i], hs[i+1:]...)
				warmN--
				break
			}
		}
		if len(warmPool[h.key]) == 0 {
			delete(warmPool, h.key)
		}
		warmMu.Unlock()
		h.close(false)
	})
}

// closeIdle ends every idle helper now (tests; a server shutting down).
func closeIdle() {
	warmMu.Lock()
	var hs []*helper
	for k, list := range warmPool {
		for _, h := range list {
			if h.timer.Stop() {
				hs = append(hs, h)
			}
		}
		delete(warmPool, k)
	}
	warmN = 0
	warmMu.Unlock()
	for _, h := range hs {
		h.close(false)
	}
}

// close ends the helper: EOF makes an idle one exit; kill for one in an
// unknown state. Its reaping releases its host mount points.
func (h *helper) close(kill bool) {
	if kill {
		_ = h.proc.Kill()
	}
	h.conn.Close()
}

func startHelper(p *policy.Plan, key string) (*helper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, stepErr("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, stepErr("socketpair", err)
	}
	f := os.NewFile(uintptr(fds[0]), "sandbox-helper")
	c, err := net.FileConn(f)
	f.Close()
	child := os.NewFile(uintptr(fds[1]), "sandbox-helper")
	if err != nil {
		child.Close()
		return nil, stepErr("socketpair", err)
	}
	conn := c.(*net.UnixConn)
	null, err := os.Open(os.DevNull)
	if err != nil {
		child.Close()
		conn.Close()
		return nil, err
	}
	h := &helper{key: key, conn: conn, exited: make(chan *os.ProcessState, 1), inodes: inodesOf(p)}
	release, err := acquireProtected(p)
	if err != nil {
		child.Close()
		null.Close()
		conn.Close()
		return nil, err
	}
	// Quiesce waits for the helper's exit and the release after it.
	live := track(false)
	uid, gid := idMaps()
	h.proc, err = os.StartProcess("/proc/self/exe", []string{"exec-server-sandbox", helperArg, "run"}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{null, null, null, child}, // failures travel on the socket
		Sys: &syscall.SysProcAttr{
			Cloneflags:  cloneflags(false, policy.NetworkRestricted),
			UidMappings: sysMaps(uid),
			GidMappings: sysMaps(gid),
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	child.Close()
	null.Close()
	if err != nil {
		release()
		live.end()
		conn.Close()
		return nil, stepErr("start the helper", err)
	}
	// The exit (namespace teardown) is waited for in the background; the
	// host mount points go after it.
	go func() {
		st, _ := h.proc.Wait()
		release()
		live.end()
		h.exited <- st
	}()
	// The plan goes first: the helper builds its view while the call is
	// being written.
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(key)))
	bufs := net.Buffers{n[:], []byte(key)}
	if _, err := bufs.WriteTo(conn); err != nil {
		h.close(true)
		return nil, stepErr("sandbox helper: send the plan", err)
	}
	return h, nil
}

// call runs one operation in the helper.
func (h *helper) call(ctx context.Context, name string, req []byte) ([]byte, *os.File, error) {
	if len(req) > warmRequestMax {
		return nil, nil, fmt.Errorf("sandbox helper: request of %d bytes", len(req))
	}
	stop := context.AfterFunc(ctx, func() {
		_ = h.proc.Kill()
		_ = h.conn.SetDeadline(time.Now())
	})
	defer stop()
	var lens [8]byte
	binary.LittleEndian.PutUint32(lens[:4], uint32(len(name)))
	binary.LittleEndian.PutUint32(lens[4:], uint32(len(req)))
	bufs := net.Buffers{lens[:4], []byte(name), lens[4:], req}
	if _, err := bufs.WriteTo(h.conn); err != nil {
		// A helper that failed to build its view said why before exiting.
		if status, body, _, rerr := readReply(h.conn); rerr == nil && status == replyError {
			return nil, nil, fmt.Errorf("sandbox helper: %s", body)
		}
		return nil, nil, h.failed(ctx, "send the request", err)
	}
	status, body, fd, err := readReply(h.conn)
	if err != nil {
		return nil, nil, h.failed(ctx, "read the reply", err)
	}
	var file *os.File
	if fd >= 0 {
		file = os.NewFile(uintptr(fd), "sandbox-file")
	}
	if status == replyError {
		if file != nil {
			file.Close()
		}
		return nil, nil, fmt.Errorf("sandbox helper: %s", body)
	}
	return body, file, nil
}

// failed makes the error of a helper that did not answer: ctx's if it
// ended, else the helper's exit status.
func (h *helper) failed(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox helper: %w", ctx.Err())
	}
	select {
	case st := <-h.exited:
		h.exited <- st
		if st != nil && !h.started {
			return fmt.Errorf("sandbox helper exited before answering (%v): is reexec.Main called first in main?", st)
		}
		if st != nil {
			return fmt.Errorf("sandbox helper exited before answering (%v)", st)
		}
	case <-time.After(5 * time.Second):
	}
	return stepErr("sandbox helper: "+step, err)
}

// readReply reads [status][u32 len][body] with an optional descriptor
// attached to the first bytes.
func readReply(conn *net.UnixConn) (byte, []byte, int, error) {
	var hdr [5]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(hdr[:], oob)
	fd := -1
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fds, perr := unix.ParseUnixRights(&m); perr == nil {
					for _, x := range fds {
						if fd < 0 {
							fd = x
						} else {
							unix.Close(x)
						}
					}
				}
			}
		}
	}
	fail := func(err error) (byte, []byte, int, error) {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, nil, -1, err
	}
	if err != nil {
		return fail(err)
	}
	if n < len(hdr) {
		if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
			return fail(err)
		}
	}
	if hdr[0] != replyOK && hdr[0] != replyError {
		return fail(fmt.Errorf("bad reply status %q", hdr[0]))
	}
	size := binary.LittleEndian.Uint32(hdr[1:])
	if size > warmRequestMax {
		return fail(fmt.Errorf("reply of %d bytes", size))
	}
	// Grown as the bytes arrive: a header alone allocates nothing.
	body, err := io.ReadAll(io.LimitReader(conn, int64(size)))
	if err == nil && len(body) < int(size) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fail(err)
	}
	return hdr[0], body, fd, nil
}
