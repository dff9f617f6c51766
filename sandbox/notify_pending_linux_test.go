package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Every process of the test binary (the sandboxes' inits, whose
// supervisors scan for FIFO readers' silent writers) checks that the scan
// never runs under the creation lock: if it does, the init says so and
// exits, which ends its command and fails the test that ran it
// (TestCommandPendingScanOutsideLock exercises the scan on purpose).
func init() {
	scanHook = func() {
		if creationHolds.Load() != 0 {
			fmt.Fprintln(os.Stderr, "sandbox: writersOf ran under the creation lock")
			os.Exit(125)
		}
	}
}

// pySilentWriter: a FIFO's reader opened through the supervisor (O_CREAT)
// waits for its writer; the writer (opened by the kernel: no O_CREAT)
// comes and says nothing, so only the supervisor's scan of the sandbox's
// descriptors (writersOf) can end the reader's wait, while other
// supervised creations (under the creation lock) keep coming.
const pySilentWriter = `
import os, signal
signal.alarm(100)
bad = 0
for n in range(3):
    name = "f%d" % n
    os.mkfifo(name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CREAT)
            os.write(w, b"o")
        except OSError as e:
            os.write(w, b"E" + str(e).encode())
        os._exit(0)
    os.close(w)
    for i in range(3000):
        try:
            with open("/proc/%d/wchan" % pid) as f:
                if "seccomp" in f.read():
                    break
        except OSError:
            pass
        os.close(os.open("c%d.%d" % (n, i), os.O_CREAT | os.O_WRONLY, 0o644))
    p = os.open(name, os.O_WRONLY)
    for i in range(20):
        os.close(os.open("d%d.%d" % (n, i), os.O_CREAT | os.O_WRONLY, 0o644))
    got = os.read(r, 100)
    if got != b"o":
        print("%s: reader got %r, want o" % (name, got))
        bad += 1
    os.close(p)
    os.close(r)
    os.waitpid(pid, 0)
print("failed=%d" % bad)
`

// TestCommandPendingScanOutsideLock: the scan for a waiting reader's
// silent writer runs outside the machine-wide creation lock (the hook
// above fails the test otherwise): its cost is the command's to choose,
// and under the lock it stalled every other sandbox's supervised renames.
func TestCommandPendingScanOutsideLock(t *testing.T) {
	runPyNoFailures(t, pySilentWriter)
}

// TestPendingScanSchedule: one scan schedule per supervisor; a new reader
// makes a scan due at once unless the last scan's cost forbids it (no scan
// sooner than 10 times its duration after it), and the gaps double from
// 5 ms to 100 ms.
func TestPendingScanSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var sc scanSchedule
	sc.readerCame()
	if !sc.due(t0) {
		t.Fatal("a first reader's scan is not due at once")
	}
	// A cheap scan: next after 5 ms, then 10, 20, 40, 80, 100, 100.
	now := t0
	for _, want := range []time.Duration{5, 10, 20, 40, 80, 100, 100} {
		sc.scanned(now, now)
		if got := sc.next.Sub(now); got != want*time.Millisecond {
			t.Fatalf("gap %v, want %v ms", got, want)
		}
		now = sc.next
	}
	// A reader comes: due at once again (the cheap scan's floor is 5 ms).
	now = now.Add(time.Second)
	sc.readerCame()
	if !sc.due(now) {
		t.Fatal("a new reader's scan is not due at once")
	}
	// A costly scan (30 ms): nothing before 300 ms after it, even for a
	// new reader.
	end := now.Add(30 * time.Millisecond)
	sc.scanned(now, end)
	sc.readerCame()
	if sc.due(end.Add(299*time.Millisecond)) || !sc.due(end.Add(300*time.Millisecond)) {
		t.Fatalf("after a 30 ms scan the next is due at +%v, want +300ms", sc.next.Sub(end))
	}
}

// TestAttemptFullNoDescriptor: with no room for another pending open and
// no descriptor left to look at the file with (isFIFO's pin failing with
// EMFILE), a reader's open is refused with ENFILE, never tried: taken for
// "not a FIFO", it went on to the open itself (which, given a descriptor
// freed meanwhile, lets in the writers waiting for a reader). Here the
// open fails too, with EMFILE, which is what it answered.
func TestAttemptFullNoDescriptor(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	free, err := unix.Dup(dfd) // the lowest free descriptor
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(free)
	// Every descriptor from free up is over the limit, for a moment.
	// Prlimit, not Setrlimit: syscall.Setrlimit forgets the soft limit
	// the runtime restores in every child the test binary starts later.
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(free), Max: old.Max}, nil); err != nil {
		t.Fatal(err)
	}
	fd, errno, w, rd := attempt(dfd, "p", openArgs{flags: unix.O_RDONLY | unix.O_CREAT, full: true})
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	if rd != nil {
		rd.close()
	}
	if fd >= 0 || errno != unix.ENFILE || w != noWait || rd != nil {
		t.Errorf("attempt = fd %d, %v, wait %v, reader %v; want -1, ENFILE, no wait, no reader", fd, errno, w, rd != nil)
	}
}

// TestPendingRoomCountsConnects: the sockets of the connects in flight
// count against the supervisor's descriptors, for the pending opens and
// for more connects. Without them, a command with a few hundred blocking
// TCP connects under the managed proxy ran the supervisor out of
// descriptors while pendingRoom still let opens wait.
func TestPendingRoomCountsConnects(t *testing.T) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	s := &supervisor{baseFDs: countFDs()}
	if uint64(s.baseFDs+fdReserve+1) >= rl.Cur {
		t.Skipf("RLIMIT_NOFILE %d: no room for the test's own descriptors", rl.Cur)
	}
	if !s.pendingRoom() || !s.connectRoom() {
		t.Fatalf("no room with nothing held (%d descriptors open, limit %d)", s.baseFDs, rl.Cur)
	}
	inFlight(s, int(rl.Cur)-(s.baseFDs+fdReserve))
	if s.pendingRoom() {
		t.Errorf("room for a pending open with %d connects in flight (limit %d)", len(s.connects), rl.Cur)
	}
	// Only the descriptors decide here: a base that leaves room for
	// maxConnects-1 connects and no more, with that many in flight.
	if rl.Cur < uint64(fdReserve+maxConnects+1) {
		t.Skipf("RLIMIT_NOFILE %d: under maxConnects' room", rl.Cur)
	}
	s = &supervisor{baseFDs: int(rl.Cur) - fdReserve - maxConnects}
	inFlight(s, maxConnects-1)
	if !s.connectRoom() {
		t.Errorf("no room for a connect with %d in flight and one descriptor left (limit %d)", len(s.connects), rl.Cur)
	}
	s.baseFDs++
	if s.connectRoom() {
		t.Errorf("room for a connect with %d in flight and no descriptor left (limit %d)", len(s.connects), rl.Cur)
	}
	inFlight(s, maxConnects)
	if s.connectRoom() {
		t.Errorf("room for a connect past maxConnects")
	}
}

// inFlight makes s hold n connects in flight (placeholders: no socket).
func inFlight(s *supervisor, n int) {
	s.connects = map[int]*pendingConnect{}
	for i := range n {
		s.connects[1<<20+i] = &pendingConnect{}
	}
}

// TestFDRoomCountsNearLimit: descriptors opened after baseFDs was counted
// (here 8, in the test process) count once the room gets tight: fdRoom
// counts the table within fdSlack of the limit. Reckoned from baseFDs
// alone, a limit that left fdReserve+4 over the base let another
// descriptor be held where only 4 of the reserve were left.
func TestFDRoomCountsNearLimit(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	s := &supervisor{baseFDs: countFDs()}
	const later = 8
	if old.Max < uint64(s.baseFDs+later+fdReserve+fdSlack) {
		t.Skipf("hard RLIMIT_NOFILE %d: no room for the test's descriptors", old.Max)
	}
	for range later {
		fd, err := unix.Dup(0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	// Prlimit, not Setrlimit (TestAttemptFullNoDescriptor says why).
	roomAt := func(cur int) bool {
		if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(cur), Max: old.Max}, nil); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &old, nil); err != nil {
				t.Fatal(err)
			}
		}()
		return s.fdRoom()
	}
	if roomAt(s.baseFDs + fdReserve + later/2) {
		t.Errorf("room for another descriptor with %d open (%d counted at start), a reserve of %d, under a limit of %d",
			s.baseFDs+later, s.baseFDs, fdReserve, s.baseFDs+fdReserve+later/2)
	}
	if !roomAt(s.baseFDs + later + fdReserve + 2) {
		t.Errorf("no room for another descriptor with %d open, a reserve of %d, under a limit of %d",
			s.baseFDs+later, fdReserve, s.baseFDs+later+fdReserve+2)
	}
}

// TestPollQuietConnect: where serve waits with poll (no epoll), a
// connect whose event did not end it is left out of the poll for
// connectQuiet and looked at again then: poll reports an error queue
// (POLLERR) for as long as it lasts, and polling such a socket while it
// still connects made serve spin.
func TestPollQuietConnect(t *testing.T) {
	port := fullListener(t)
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			unix.Close(sock)
		}
	}()
	addr := make([]byte, unix.SizeofSockaddrInet4)
	addr[0] = unix.AF_INET // little-endian sa_family
	addr[2], addr[3] = byte(port>>8), byte(port)
	addr[4], addr[7] = 127, 1
	if errno := connectNonblock(sock, addr); errno != unix.EINPROGRESS {
		t.Fatalf("connect to a full listener: %v, want EINPROGRESS", errno)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	now := time.Now()
	c := &pendingConnect{sock: sock, addr: addr}
	s := &supervisor{ep: -1, listener: p[0], connects: map[int]*pendingConnect{sock: c}, reaped: now}
	// An event that did not end it (as a POLLERR would bring).
	s.connectReady(c)
	if s.connects[sock] == nil {
		t.Fatal("the connect ended")
	}
	if !c.quietUntil.After(now) {
		t.Fatalf("quietUntil %v: not after the event", c.quietUntil)
	}
	if ms := s.connectWake(now, -1); ms < 0 || ms > int(connectQuiet/time.Millisecond)+1 {
		t.Errorf("connectWake = %d ms, want the quiet end (≤ %v)", ms, connectQuiet)
	}
	// Its socket is not polled meanwhile: make it pollable by anything
	// (POLLNVAL if it were in the set: a closed descriptor number) and
	// the wait must not report it.
	unix.Close(sock)
	closed = true
	if _, err := s.wait(0); err != nil {
		t.Fatal(err)
	}
	if len(s.ready) != 0 {
		t.Errorf("wait reported %v: a quiet connect was polled", s.ready)
	}
	delete(s.connects, sock)
}
