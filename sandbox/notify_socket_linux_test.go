package sandbox

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/internal/test/tcptest"
	"github.com/execgo/exec-server/sandbox/policy"
)

// fullListener listens on 127.0.0.1 with a backlog of 0 and fills its
// accept queue with one connection it never accepts: the kernel drops
// every later SYN while the queue is full, so a connect to it waits in
// SYN_SENT (until its SO_SNDTIMEO, or the kernel's SYN retries give up
// after minutes). It returns the port.
func fullListener(t *testing.T) int {
	t.Helper()
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(l) })
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(l, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)) // the one the queue holds
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return port
}

// closedPort is a 127.0.0.1 port nothing listens on (bound, never
// listened: no other test can take it meanwhile).
func closedPort(t *testing.T) int {
	t.Helper()
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	if err := unix.Bind(s, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(s)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*unix.SockaddrInet4).Port
}

func networkPlan(ws string) *policy.Plan {
	p := workspaceWrite(ws)
	p.Network = policy.NetworkEnabled
	return p
}

// pyConnectsAtPidsMax: 16 threads wait, the process then forks until the
// process bound refuses (EAGAIN), and only then do the threads connect,
// blocking (SO_SNDTIMEO 2 s), to a listener whose queue is full: 16
// connects wait in the supervisor at once while nothing in the sandbox
// can make a thread.
const pyConnectsAtPidsMax = `
import errno, os, socket, struct, sys, threading
port, n = int(sys.argv[1]), 16
go, lock, res = threading.Event(), threading.Lock(), []
def run():
    go.wait()
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 2, 0))
    try:
        s.connect(("127.0.0.1", port))
        r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    with lock:
        res.append(r)
ths = [threading.Thread(target=run) for _ in range(n)]
for t in ths:
    t.start()
r, w = os.pipe()
kids = []
while True:
    try:
        pid = os.fork()
    except OSError as e:
        fill = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
go.set()
for t in ths:
    t.join()
os.close(w)
for k in kids:
    os.waitpid(k, 0)
print("fill", fill, "connects", " ".join(sorted(set(res))), len(res))
`

// TestCommandConnectsAtPidsMax: blocking TCP connects made while the
// sandbox is at its process bound are waited for without a thread each in
// the init. When each was a goroutine blocked in connect(2), the init's Go
// runtime had to start a thread per connect, failed to (the init is in the
// sandbox's pids cgroup), and died of it, taking the command with it.
func TestCommandConnectsAtPidsMax(t *testing.T) {
	t.Setenv(PidsMaxEnv, "64")
	code, out := runPyNet(t, pyConnectsAtPidsMax, nil, fullListener(t))
	if code != 0 || strings.TrimSpace(out) != "fill EAGAIN connects EINPROGRESS 16" {
		t.Errorf("exit %d, %q; want 0, %q", code, head(out), "fill EAGAIN connects EINPROGRESS 16")
	}
}

// runPyNet runs python3 -c script with args in a sandbox with the network
// on (networkPlan), env added to its environment; it skips where there is
// no sandbox or no python3.
func runPyNet(t *testing.T, script string, env []string, args ...int) (int, string) {
	t.Helper()
	needSandbox(t)
	needPython(t)
	ws, _ := fixture(t)
	cmd := "exec /usr/bin/python3 -c '" + script + "'"
	for _, a := range args {
		cmd += " " + strconv.Itoa(a)
	}
	return runShEnvHook(t, networkPlan(ws), ws, cmd, env, nil)
}

// head is the start of a command's output (a dying init's is its stacks).
func head(out string) string {
	if len(out) > 600 {
		return out[:600] + "..."
	}
	return out
}

// pyConnectSemantics: what connect says, as the kernel's own would, for
// a blocking socket (connected, then EISCONN; refused, with SO_ERROR
// consumed; SO_SNDTIMEO passed: EINPROGRESS, then EALREADY), with the
// socket left blocking; a non-blocking socket (EINPROGRESS, the error
// in SO_ERROR); a UDP socket.
const pyConnectSemantics = `
import errno, fcntl, os, select, socket, struct, sys
op, cp, fp = map(int, sys.argv[1:4])
def name(e):
    return errno.errorcode.get(e, str(e))
def conn(s, port):
    try:
        s.connect(("127.0.0.1", port))
        return "ok"
    except OSError as e:
        return name(e.errno)
def mode(s):
    return "nonblocking" if fcntl.fcntl(s, fcntl.F_GETFL) & os.O_NONBLOCK else "blocking"
def soerr(s):
    return name(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))
s = socket.socket()
print("open", conn(s, op), conn(s, op), mode(s), s.getpeername()[1] == op)
s = socket.socket()
print("closed", conn(s, cp), soerr(s), mode(s), conn(s, cp))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 200000))
print("full", conn(s, fp), conn(s, fp), mode(s))
s = socket.socket()
s.setblocking(False)
r = conn(s, cp)
select.select([], [s], [], 60)
print("nonblocking", r, soerr(s), mode(s))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print("udp", conn(u, cp))
`

// TestCommandConnectSemantics: a supervised TCP connect answers what the
// kernel's would (pyConnectSemantics), the blocking ones waited for by
// the supervisor without a thread (connectInet).
func TestCommandConnectSemantics(t *testing.T) {
	// Connections stay open until the test ends.
	l := tcptest.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		<-t.Context().Done()
		c.Close()
	})
	open := l.Addr().(*net.TCPAddr).Port
	code, out := runPyNet(t, pyConnectSemantics, nil, open, closedPort(t), fullListener(t))
	want := "open ok EISCONN blocking True\n" +
		"closed ECONNREFUSED 0 blocking ECONNREFUSED\n" +
		"full EINPROGRESS EALREADY blocking\n" +
		"nonblocking EINPROGRESS ECONNREFUSED nonblocking\n" +
		"udp ok"
	if code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("exit %d:\n%s\nwant exit 0:\n%s", code, head(out), want)
	}
}

// maxConnectsEnv, in a command's environment, sets maxConnects in its
// init (the test binary, which unwraps its command's environment here):
// TestCommandConnectCallerKilled needs a bound of 1.
const maxConnectsEnv = "SANDBOX_TEST_MAX_CONNECTS"

// connectSettleEnv, in a command's environment, sets connectSettle in its
// init: TestCommandConnectResetAfterAccept has serve come late to every
// finished connect.
const connectSettleEnv = "SANDBOX_TEST_CONNECT_SETTLE"

func init() {
	for _, e := range unwrapEnv(os.Environ()) {
		if v, ok := strings.CutPrefix(e, maxConnectsEnv+"="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				maxConnects = n
			}
		}
		if v, ok := strings.CutPrefix(e, connectSettleEnv+"="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				connectSettle = d
			}
		}
	}
}

// resetListener is a 127.0.0.1 port whose connections are accepted and
// reset at once, as netproxy refuses a transparent connection.
func resetListener(t *testing.T) int {
	t.Helper()
	l := tcptest.Serve(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// pyConnectReset: a blocking connect to a port that accepts and resets,
// then a read; a blocking connect to a closed port.
const pyConnectReset = `
import errno, socket, sys
rp, cp = int(sys.argv[1]), int(sys.argv[2])
def name(e):
    return errno.errorcode.get(e, str(e))
s = socket.socket()
try:
    s.connect(("127.0.0.1", rp))
    try:
        r = "read " + repr(s.recv(10))
    except OSError as e:
        r = "read " + name(e.errno)
    print("reset ok", r)
except OSError as e:
    print("reset", name(e.errno))
s = socket.socket()
try:
    s.connect(("127.0.0.1", cp))
    print("closed ok")
except OSError as e:
    print("closed", name(e.errno))
`

// TestCommandConnectResetAfterAccept: a connection made and reset by the
// peer before serve looks at it (here serve waits 300 ms first, as a
// loaded machine may make it) is connected for the caller, the reset
// left for its read, as the kernel's own blocking connect has it; a
// refused connect still fails. Connecting again to learn the result
// reported the reset as the connect's failure: the transparent proxy's
// refusals (TestTransparentTCP, in server) read "connect failed" under
// load in CI.
func TestCommandConnectResetAfterAccept(t *testing.T) {
	code, out := runPyNet(t, pyConnectReset, []string{connectSettleEnv + "=300ms"}, resetListener(t), closedPort(t))
	want := "reset ok read ECONNRESET\nclosed ECONNREFUSED"
	if code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("exit %d:\n%s\nwant exit 0:\n%s", code, head(out), want)
	}
}

// pyConnectCallerKilled, with one connect slot: a child's blocking
// connect to a full listener takes it (retried until it does), which the
// parent sees as its own connects failing with ENOBUFS; the child is
// killed and reaped, and the parent connects again.
const pyConnectCallerKilled = `
import errno, os, signal, socket, sys, time
fp, cp = int(sys.argv[1]), int(sys.argv[2])
def conn(port):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
pid = os.fork()
if pid == 0:
    while conn(fp) == "ENOBUFS":
        time.sleep(0.001)
    os._exit(0)
seen = set()
for i in range(100000):
    r = conn(cp)
    if r == "ENOBUFS":
        break
    seen.add(r)
    time.sleep(0.001)
else:
    print("the child never held the slot:", seen)
    sys.exit(1)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
print("before", " ".join(sorted(seen)), "after", conn(cp))
`

// TestCommandConnectCallerKilled: a connect whose caller was killed gives
// its slot back (reapConnects) when another connect needs it. It kept it
// until the kernel gave up on the connection (minutes for a SYN nobody
// answers): every connect meanwhile failed with ENOBUFS.
func TestCommandConnectCallerKilled(t *testing.T) {
	code, out := runPyNet(t, pyConnectCallerKilled, []string{maxConnectsEnv + "=1"}, fullListener(t), closedPort(t))
	// Before: the parent's connects that came before the child's
	// (refused), or none.
	got := strings.Join(strings.Fields(out), " ")
	if code != 0 || (got != "before ECONNREFUSED after ECONNREFUSED" && got != "before after ECONNREFUSED") {
		t.Errorf("exit %d, %q; want 0, %q", code, head(out), "before ECONNREFUSED after ECONNREFUSED")
	}
}

// pyConnectTwoCallers: two threads connect one blocking socket to the
// command's own listener while its accept queue is full (the SYN dropped:
// both wait); the queue is emptied and the SYN's retransmission connects
// the socket. Both connects return 0, as two blocking connects waiting on
// one socket do in the kernel.
const pyConnectTwoCallers = `
import errno, socket, sys, threading, time
nr = sys.argv[1]
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(0)
q = socket.create_connection(l.getsockname())
s = socket.socket()
res, tids = [], []
def conn():
    tids.append(threading.get_native_id())
    try:
        s.connect(l.getsockname())
        res.append("ok")
    except OSError as e:
        res.append(errno.errorcode.get(e.errno, str(e.errno)))
def in_connect(tid):
    try:
        with open("/proc/self/task/%d/syscall" % tid) as f:
            return f.read().split()[0] == nr
    except OSError:
        return False
ths = [threading.Thread(target=conn) for _ in range(2)]
for t in ths:
    t.start()
# Both in connect before the queue is emptied (a connect made after
# the socket connected is EISCONN in the kernel too).
end = time.time() + 60
while time.time() < end and not (len(tids) == 2 and all(in_connect(t) for t in tids)):
    time.sleep(0.01)
time.sleep(0.05)
l.accept()[0].close()
for t in ths:
    t.join()
print(" ".join(sorted(res)))
`

// TestCommandConnectTwoCallers: a second caller's blocking connect on a
// socket already connecting waits beside the first and gets 0 when it
// connects (connectResult); it got EISCONN from connecting again after
// the first had.
func TestCommandConnectTwoCallers(t *testing.T) {
	code, out := runPyNet(t, pyConnectTwoCallers, nil, unix.SYS_CONNECT)
	if code != 0 || strings.TrimSpace(out) != "ok ok" {
		t.Errorf("exit %d, %q; want 0, %q", code, head(out), "ok ok")
	}
}

// pySocketFamilies opens a socket of each kind and prints what socket()
// said.
const pySocketFamilies = `
import errno, socket
for name, args in [("tcp", (socket.AF_INET, socket.SOCK_STREAM, 0)), ("udp6", (socket.AF_INET6, socket.SOCK_DGRAM, 0)),
        ("netlink", (socket.AF_NETLINK, socket.SOCK_RAW, 0)), ("vsock", (40, socket.SOCK_STREAM, 0)),
        ("sctp", (socket.AF_INET, socket.SOCK_STREAM, 132)), ("seqpacket", (socket.AF_INET, socket.SOCK_SEQPACKET, 0))]:
    try:
        socket.socket(*args).close()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
`

// TestCommandSocketFamilies: with the network on, a command opens TCP,
// UDP and netlink sockets, and the connection-oriented protocols whose
// connect the supervisor cannot wait for are answered as absent
// (seccompProgram; TestSeccompProgramTable has every row). vsock is the
// one this test's kernel may have: without the rule it opens.
func TestCommandSocketFamilies(t *testing.T) {
	code, out := runPyNet(t, pySocketFamilies, nil)
	want := "tcp ok\nudp6 ok\nnetlink ok\nvsock EAFNOSUPPORT\nsctp EPROTONOSUPPORT\nseqpacket ESOCKTNOSUPPORT"
	if code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("exit %d:\n%s\nwant exit 0:\n%s", code, head(out), want)
	}
}

// pyDatagramFlags connects a UDP socket again and again while another
// thread reads its file status flags: the supervisor must not make the
// open file (which the command shares) non-blocking while it connects.
const pyDatagramFlags = `
import fcntl, os, socket, sys, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
seen, stop = [0, 0], [False]
def watch():
    while not stop[0]:
        seen[1] += 1
        if fcntl.fcntl(u.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK:
            seen[0] += 1
t = threading.Thread(target=watch)
t.start()
for i in range(300):
    u.connect(("127.0.0.1", int(sys.argv[1]) + i % 2))
stop[0] = True
t.join()
print("nonblocking seen", seen[0], "looks", "many" if seen[1] > 30 else seen[1])
`

// TestCommandDatagramConnectKeepsFlags: a datagram socket's supervised
// connect leaves its flags alone throughout (rawConnect), where a
// connection-oriented one's is started non-blocking (connectNonblock).
func TestCommandDatagramConnectKeepsFlags(t *testing.T) {
	code, out := runPyNet(t, pyDatagramFlags, nil, closedPort(t))
	if want := "nonblocking seen 0 looks many"; code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("exit %d, %q; want 0, %q", code, head(out), want)
	}
}
