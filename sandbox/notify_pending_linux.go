package sandbox

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pending opens: an open the kernel would make wait (a FIFO with no
// partner yet, a file under a lease being broken) is held here and
// completed between notifications, never by blocking the supervisor, which
// serves every other call of the command tree (openNoWait).

// pendingOpen is an open that waits: a FIFO's writer with no reader yet,
// an open held up by a lease's break (retried as asked), or a FIFO's
// reader with no writer yet (the supervisor's own non-blocking reader,
// handed over once a writer has come: fifoReady).
type pendingOpen struct {
	id      uint64
	cloexec bool // the target asked for O_CLOEXEC (args always have it)

	// A writer, or an open held up by a lease: the file the open waits
	// on (O_PATH), reopened through /proc/self/fd as args ask.
	obj  int
	args openArgs

	fifo fileID // the FIFO a writer or reader waits on

	// A FIFO's writer: retried at gaps that double from 5 ms to
	// maxScanGap, at once while a reader of its FIFO waits here.
	nextTry time.Time
	tryGap  time.Duration

	// A reader.
	reader bool
	fd     int // the supervisor's non-blocking reader
}

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

// The scan for a FIFO's writers (writersOf) reads every descriptor of the
// sandbox's processes: one schedule per supervisor (scanSchedule), not per
// reader. A new reader makes a scan due at once (retryPending does it,
// outside the creation lock); then after 5 ms, 10 ms, ... at most every
// maxScanGap, and never sooner than 10 times the last scan took after it
// (a sandbox with many descriptors is not scanned back to back).
const (
	firstScanGap = 5 * time.Millisecond
	maxScanGap   = 100 * time.Millisecond
	scanCostMul  = 10
)

// scanSchedule is when the supervisor next scans for silent writers.
type scanSchedule struct {
	next  time.Time     // the next scan is due (zero: at once)
	gap   time.Duration // the gap after the next scan (doubling)
	floor time.Time     // no scan before: last scan's end + 10 x its cost
}

// readerCame makes a scan due as soon as the last one's cost allows.
func (sc *scanSchedule) readerCame() {
	sc.next, sc.gap = sc.floor, firstScanGap
}

func (sc *scanSchedule) due(now time.Time) bool { return !now.Before(sc.next) }

// scanned records a scan that ran from start to end.
func (sc *scanSchedule) scanned(start, end time.Time) {
	if sc.gap == 0 {
		sc.gap = firstScanGap
	}
	sc.floor = end.Add(max(firstScanGap, scanCostMul*end.Sub(start)))
	sc.next = end.Add(sc.gap)
	if sc.next.Before(sc.floor) {
		sc.next = sc.floor
	}
	sc.gap = min(2*sc.gap, maxScanGap)
}

func newPendingReader(fd int, fifo fileID) *pendingOpen {
	return &pendingOpen{obj: -1, reader: true, fd: fd, fifo: fifo}
}

// close lets go of what po holds (its notification is gone).
func (po *pendingOpen) close() {
	if po.obj >= 0 {
		unix.Close(po.obj)
	}
	if po.reader {
		unix.Close(po.fd)
	}
}

// retryPending completes the pending opens whose wait is over, all of
// them in one round, as the kernel wakes every waiter at once: every
// writer and lease first, then every reader, then the answers. Answered
// one by one, a writer could run, write and close before the next was
// opened, and its reader see end of file between them.
func (s *supervisor) retryPending() {
	type done struct {
		id    uint64
		fd    fdResult
		errno unix.Errno
	}
	var answers []done
	// FIFOs opened for writing here this round: their waiting readers'
	// opens would have returned (the writer came).
	var opened map[fileID]bool
	keep := s.pending[:0]
	for _, po := range s.pending {
		if !s.idValid(po.id) { // interrupted or gone: the kernel asks again
			po.close()
			continue
		}
		keep = append(keep, po)
	}
	s.pending = keep
	// A second pass for the writers of a FIFO that another writer got
	// into in the first: its reader came during the first, after they
	// were tried. The kernel had counted them all as writers before any
	// ran; answered without them, the others could write and close, and
	// the reader see end of file while they wait.
	now := time.Now()
	var readers map[fileID]bool // FIFOs a reader waits on here
	for _, po := range s.pending {
		if po.reader {
			if readers == nil {
				readers = map[fileID]bool{}
			}
			readers[po.fifo] = true
		}
	}
	for pass := 0; pass < 2 && (pass == 0 || opened != nil); pass++ {
		keep = s.pending[:0]
		for _, po := range s.pending {
			if po.reader || (pass == 1 && !opened[po.fifo]) {
				keep = append(keep, po)
				continue
			}
			writer := po.fifo != fileID{}
			if pass == 0 && writer && !readers[po.fifo] && now.Before(po.nextTry) {
				keep = append(keep, po) // backing off: no reader seen yet
				continue
			}
			fd, errno, w, rd := attempt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(po.obj), po.args)
			if w != noWait && w.holds(po.obj) {
				if writer {
					po.tryGap = min(max(2*po.tryGap, firstScanGap), maxScanGap)
					po.nextTry = now.Add(po.tryGap)
				}
				keep = append(keep, po)
				continue
			}
			unix.Close(po.obj)
			if rd != nil {
				// Held up by a lease, then found a FIFO (not possible
				// today: a lease is on a regular file).
				rd.id, rd.cloexec = po.id, po.cloexec
				keep = append(keep, *rd)
				continue
			}
			if fd >= 0 && inSupervisor(fd) {
				unix.Close(fd)
				fd, errno = -1, unix.EACCES
			}
			var st unix.Stat_t
			if fd >= 0 && unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
				if opened == nil {
					opened = map[fileID]bool{}
				}
				opened[fileID{st.Dev, st.Ino}] = true
			}
			answers = append(answers, done{po.id, fdResult{fd, po.cloexec}, errno})
		}
		s.pending = keep
	}

	var scan map[fileID]bool
	if s.scan.due(time.Now()) {
		for _, po := range s.pending {
			if po.reader && !opened[po.fifo] {
				if scan == nil {
					scan = map[fileID]bool{}
				}
				scan[po.fifo] = true
			}
		}
	}
	var writers map[fileID]bool
	if scan != nil {
		start := time.Now()
		writers = writersOf(scan)
		s.scan.scanned(start, time.Now())
	}
	keep = s.pending[:0]
	for _, po := range s.pending {
		if !po.reader {
			keep = append(keep, po)
			continue
		}
		if !opened[po.fifo] && !fifoReady(po.fd) && !writers[po.fifo] {
			keep = append(keep, po)
			continue
		}
		fd, errno := po.fd, clearNonblock(po.fd)
		if errno != 0 {
			unix.Close(fd)
			fd = -1
		}
		answers = append(answers, done{po.id, fdResult{fd, po.cloexec}, errno})
	}
	s.pending = keep

	for _, a := range answers {
		s.answer(a.id, a.fd, a.errno)
	}
}

// fifoReady reports whether a blocking open of the FIFO that fd (a
// reader opened with O_NONBLOCK when it had no writer) reads would have
// returned by now, as far as the FIFO itself tells: a writer has come
// since and either written (POLLIN) or gone (POLLHUP).
//
// What this relies on (Linux's fs/pipe.c): fifo_open counts the pipe's
// writer opens (w_counter); a blocking reader's open waits until that
// count moves (wait_for_partner), so a writer that comes and goes at once
// still ends the wait. A non-blocking reader opened while there is no
// writer records the count in its file, and pipe_poll reports EPOLLHUP
// to it only once there is no writer and the count has moved since: a
// FIFO no writer ever opened does not report POLLHUP to it (it does to a
// reader opened while a writer was there, once they are all gone). A
// writer that is there and has written nothing yet shows in neither:
// writersOf looks for it.
func fifoReady(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
}

// scanHook, when set (by the tests, in every process of the test binary,
// the sandboxes' inits too), is called as writersOf begins: it checks that
// the scan runs outside the creation lock (creationHolds), where its cost
// (every descriptor of every process of the sandbox) stalls no other
// sandbox's creations and renames.
var scanHook func()

// writersOf reports which of the FIFOs in want a process of the sandbox
// (every process this supervisor's /proc shows but itself: its PID
// namespace is the sandbox's) holds open for writing. A writer the
// supervisor cannot see (a process of the host, or one that is not
// dumpable) is found only once it writes or goes (fifoReady).
func writersOf(want map[fileID]bool) map[fileID]bool {
	if scanHook != nil {
		scanHook()
	}
	found := map[fileID]bool{}
	procs, err := readNames("/proc")
	if err != nil {
		return found
	}
	self := strconv.Itoa(os.Getpid())
	for _, pid := range procs {
		if pid == self || pid[0] < '0' || pid[0] > '9' {
			continue
		}
		dir := "/proc/" + pid + "/fd/"
		fds, err := readNames(dir)
		if err != nil {
			continue
		}
		for _, n := range fds {
			// The access mode first: only a descriptor open for writing
			// is worth a stat (which follows the link to the file).
			if !openForWriting("/proc/" + pid + "/fdinfo/" + n) {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(dir+n, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
				continue
			}
			id := fileID{st.Dev, st.Ino}
			if want[id] && !found[id] {
				found[id] = true
				if len(found) == len(want) {
					return found
				}
			}
		}
	}
	return found
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// openForWriting reads a descriptor's access mode from its fdinfo.
func openForWriting(fdinfo string) bool {
	b, err := os.ReadFile(fdinfo)
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), "flags:")
	if !ok {
		return false
	}
	v, _, _ := strings.Cut(strings.TrimSpace(rest), "\n")
	fl, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
	return err == nil && fl&unix.O_ACCMODE != unix.O_RDONLY
}

// clearNonblock clears O_NONBLOCK on a descriptor opened with it for the
// command, which did not ask for it.
func clearNonblock(fd int) unix.Errno {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return toErrno(err)
}
