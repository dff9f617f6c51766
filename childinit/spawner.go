package childinit

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Spawner is one init shared by many children, typically those of one
// session: it pays the init's start-up once rather than per child. The
// server asks it, over the lifeline, to start each child (the child's
// stdin, stdout and stderr travel as SCM_RIGHTS); the spawner is the
// child's parent and the subreaper of everything below it, reports each
// child's pid and wait status, kills one child's tree on request, and kills
// everything it ever started when asked to or when the lifeline reaches
// EOF, which the kernel guarantees when the server dies, however it dies.
//
// Because the spawner, not the server, is the child's parent, the server
// learns exit statuses from Spawner.Start's channel instead of wait4.
type Spawner struct {
	f   *os.File
	pid int

	startMu sync.Mutex // one start request at a time
	reply   chan spawnReply

	mu    sync.Mutex
	exits map[int]chan syscall.WaitStatus
	kills []chan struct{} // KillTree calls waiting for the spawner's word, in order
	err   error           // set when the lifeline broke
	done  chan struct{}   // closed when the reader ends
}

type spawnReply struct {
	pid   int
	exit  chan syscall.WaitStatus
	errno syscall.Errno
}

// SpawnAttr describes one child.
type SpawnAttr struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Setsid, Setctty (the terminal on fd 0) and Pdeathsig (SIGKILL when
	// the spawner dies) as in syscall.SysProcAttr.
	Setsid    bool `json:"setsid"`
	Setctty   bool `json:"setctty"`
	Pdeathsig bool `json:"pdeathsig"`
	// Cloneflags and the ID maps (for CLONE_NEWUSER) as in
	// syscall.SysProcAttr: a sandboxed child starts in new namespaces.
	Cloneflags  uintptr                `json:"cloneflags,omitempty"`
	UidMappings []syscall.SysProcIDMap `json:"uidMappings,omitempty"`
	GidMappings []syscall.SysProcIDMap `json:"gidMappings,omitempty"`
}

// Spawner protocol bytes (in addition to msgStarted, msgFailed, msgExited).
const (
	msgSpawn   = 'R' // + uint32 length, JSON SpawnAttr; SCM_RIGHTS stdin, stdout, stderr
	msgKillOne = 'k' // + uint32 pid: kill that child's tree
	msgKilled  = 'A' // + uint32 pid: its tree was killed (the answer to msgKillOne)
	msgReady   = 'Y' // spawner up
	spawnerArg = "spawner"
)

// StartSpawner starts a spawner (this binary re-executed; MaybeMain must
// run first in main) and waits until it is ready.
func StartSpawner() (*Spawner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("childinit: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("childinit: lifeline: %w", err)
	}
	initEnd := os.NewFile(uintptr(fds[1]), "spawner-lifeline")
	defer initEnd.Close()
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("childinit: lifeline: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "spawner-lifeline")
	null, err := os.Open(os.DevNull)
	if err != nil {
		f.Close()
		return nil, err
	}
	defer null.Close()
	sweepOnce.Do(func() { go sweepStaleCgroups() })
	pidfd := -1
	proc, err := os.StartProcess(self, []string{"exec-server-spawner", Arg, spawnerArg}, &os.ProcAttr{
		// One P: the spawner has little to do, and there is one per
		// session. With the default it keeps more OS threads (8 rather
		// than 5), and its idle Ps spin whenever it wakes, which a server
		// ending a thousand sessions at once pays for on every core.
		// Its children get only the environment they are given.
		Env:   append(os.Environ(), "GOMAXPROCS=1"),
		Files: []*os.File{null, null, os.Stderr, initEnd},
		Sys:   &syscall.SysProcAttr{Setpgid: true, PidFD: &pidfd},
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("childinit: starting the spawner: %w", err)
	}
	s := &Spawner{f: f, pid: proc.Pid, reply: make(chan spawnReply, 1), exits: map[int]chan syscall.WaitStatus{}, done: make(chan struct{})}
	_ = f.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(f, b[:]); err != nil || b[0] != msgReady {
		f.Close()
		_ = syscall.Kill(s.pid, syscall.SIGKILL) // not reaped yet: the pid is still its own
		go reapChild(proc, pidfd)
		return nil, fmt.Errorf("childinit: the spawner did not start: %v", err)
	}
	// The spawner is reaped when it exits; nobody needs its status.
	go reapChild(proc, pidfd)
	_ = f.SetReadDeadline(time.Time{})
	go s.readLoop()
	return s, nil
}

// sweepOnce removes what killed spawners left in the cgroup hierarchy,
// once per server.
var sweepOnce sync.Once

// reapChild reaps a spawner, whose status nobody needs, and then releases
// its cgroups. With a pidfd it waits in the netpoller (the pidfd turns
// readable when the child exits): a goroutine blocked in wait would hold
// an OS thread for the child's whole life, and os.Process.Wait does
// exactly that, pidfd or not (it blocks in waitid). One spawner per
// session would then cost a thread per session, and Go aborts the whole
// server at 10 000 threads.
func reapChild(proc *os.Process, pidfd int) {
	pid := proc.Pid
	var st unix.WaitStatus
	defer func() {
		// A spawner that ran its course removed its cgroups itself:
		// looking them up in cgroupfs would only contend with the other
		// spawners' removals when many end at once.
		if !st.Exited() || st.ExitStatus() != 0 {
			releaseSpawnerCgroups(pid)
		}
	}()
	if pidfd < 0 {
		// No pidfd (kernel older than 5.3): a blocked thread it is.
		if ps, err := proc.Wait(); err == nil {
			st = unix.WaitStatus(ps.Sys().(syscall.WaitStatus))
		}
		return
	}
	// The pidfd, not the os.Process, keeps the pid from being reused
	// until it is reaped below.
	_ = proc.Release()
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		_, _ = unix.Wait4(pid, &st, 0, nil)
		return
	}
	f := os.NewFile(uintptr(pidfd), "spawner-pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Read(func(uintptr) bool {
			for {
				wpid, err := unix.Wait4(pid, &st, unix.WNOHANG, nil)
				if err == unix.EINTR {
					continue
				}
				return err != nil || wpid == pid
			}
		})
	}
	if err != nil {
		_, _ = unix.Wait4(pid, &st, 0, nil)
	}
}

// Pid is the spawner's pid.
func (s *Spawner) Pid() int { return s.pid }

func (s *Spawner) readLoop() {
	defer close(s.done)
	var err error
	for {
		var b [5]byte
		if _, err = io.ReadFull(s.f, b[:]); err != nil {
			break
		}
		v := binary.LittleEndian.Uint32(b[1:])
		switch b[0] {
		case msgStarted:
			ch := make(chan syscall.WaitStatus, 1)
			s.mu.Lock()
			s.exits[int(v)] = ch
			s.mu.Unlock()
			s.reply <- spawnReply{pid: int(v), exit: ch}
		case msgFailed:
			s.reply <- spawnReply{errno: syscall.Errno(v)}
		case msgKilled:
			s.mu.Lock()
			if len(s.kills) > 0 {
				close(s.kills[0])
				s.kills = s.kills[1:]
			}
			s.mu.Unlock()
		case msgExited:
			var st [4]byte
			if _, err = io.ReadFull(s.f, st[:]); err != nil {
				break
			}
			s.mu.Lock()
			ch := s.exits[int(v)]
			delete(s.exits, int(v))
			s.mu.Unlock()
			if ch != nil {
				ch <- syscall.WaitStatus(binary.LittleEndian.Uint32(st[:]))
				close(ch)
			}
		}
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	s.mu.Lock()
	s.err = err
	// Children whose status will never come: their channels close without
	// a value (the spawner died, so they are dead too).
	for pid, ch := range s.exits {
		close(ch)
		delete(s.exits, pid)
	}
	for _, ch := range s.kills {
		close(ch)
	}
	s.kills = nil
	s.mu.Unlock()
	close(s.reply)
}

// Start starts a child. files are its stdin, stdout and stderr; the caller
// keeps (and should close) its own copies. The returned channel yields the
// child's wait status once, when it exits, and is closed; it is closed
// without a value if the spawner died first. A failed exec returns its
// syscall.Errno.
func (s *Spawner) Start(attr SpawnAttr, files [3]*os.File) (int, <-chan syscall.WaitStatus, error) {
	payload, err := json.Marshal(attr)
	if err != nil {
		return 0, nil, err
	}
	s.startMu.Lock()
	defer s.startMu.Unlock()
	hdr := make([]byte, 5, 5+len(payload))
	hdr[0] = msgSpawn
	binary.LittleEndian.PutUint32(hdr[1:], uint32(len(payload)))
	rights := unix.UnixRights(int(files[0].Fd()), int(files[1].Fd()), int(files[2].Fd()))
	if err := s.sendmsg(hdr, rights); err != nil {
		return 0, nil, fmt.Errorf("childinit: spawner: %w", err)
	}
	if _, err := s.f.Write(payload); err != nil {
		return 0, nil, fmt.Errorf("childinit: spawner: %w", err)
	}
	r, ok := <-s.reply
	if !ok {
		return 0, nil, fmt.Errorf("childinit: the spawner is gone: %w", s.lifelineErr())
	}
	if r.errno != 0 {
		return 0, nil, r.errno
	}
	return r.pid, r.exit, nil
}

// sendmsg writes hdr with rights through the non-blocking lifeline.
func (s *Spawner) sendmsg(hdr, rights []byte) error {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), hdr, rights, nil, 0)
		return serr != unix.EAGAIN
	})
	if werr != nil {
		return werr
	}
	return serr
}

func (s *Spawner) lifelineErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// KillTree kills child pid and every process below it: its session and
// process group, descendants that started their own, and orphans of the
// tree, which were reparented to the spawner. It returns once the spawner
// has sent SIGKILL to all of them (they may not have exited yet), so a
// signal the caller sends afterwards cannot race with the tree kill (a
// group killed first would orphan its setsid descendants, and the
// spawner, with no cgroup, would no longer tell them apart). A pid that is
// not a live child of the spawner is ignored.
func (s *Spawner) KillTree(pid int) error {
	var b [5]byte
	b[0] = msgKillOne
	binary.LittleEndian.PutUint32(b[1:], uint32(pid))
	done := make(chan struct{})
	s.startMu.Lock()
	s.mu.Lock()
	if s.err != nil {
		// The spawner is gone, and so is everything it started.
		s.mu.Unlock()
		s.startMu.Unlock()
		return nil
	}
	s.kills = append(s.kills, done)
	s.mu.Unlock()
	_, err := s.f.Write(b[:])
	s.startMu.Unlock()
	if err != nil {
		// The lifeline broke: the reader ends and releases done.
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) {
			err = nil
		}
	}
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		if err == nil {
			err = errors.New("childinit: the spawner did not confirm the kill in time")
		}
	}
	return err
}

// killTimeout bounds how long KillTree waits for the spawner: a kill
// through a cgroup takes microseconds, a scan of /proc milliseconds.
const killTimeout = 10 * time.Second

// Close kills every process the spawner started, and everything below
// them, and lets the spawner exit. It waits (at most 5 s) for the spawner's
// report of the last exits to be read.
func (s *Spawner) Close() error {
	s.startMu.Lock()
	_, _ = s.f.Write([]byte{msgKillTree})
	s.startMu.Unlock()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
	return s.f.Close()
}

// ---- the spawner process ----

func runSpawner() int {
	lifeline := os.NewFile(lifelineFD, "lifeline")
	unix.CloseOnExec(lifelineFD)
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := make(chan os.Signal, 128)
	signal.Notify(sigs)

	var wmu sync.Mutex
	send := func(parts ...[]byte) {
		wmu.Lock()
		defer wmu.Unlock()
		for _, p := range parts {
			_, _ = lifeline.Write(p)
		}
	}
	msg := func(kind byte, v uint32) []byte {
		b := make([]byte, 5)
		b[0] = kind
		binary.LittleEndian.PutUint32(b[1:], v)
		return b
	}

	var cmu sync.Mutex
	children := map[int]bool{} // started and not yet reaped
	cg := newCgroups()         // guarded by cmu too
	reap := func() {
		reapExited(func(wpid int, st syscall.WaitStatus) {
			cmu.Lock()
			mine := children[wpid]
			delete(children, wpid)
			if mine {
				cg.reaped(wpid)
			} else if len(cg.stale) > 0 {
				// Maybe the last process of a reaped child's cgroup.
				cg.sweep()
			}
			cmu.Unlock()
			if mine {
				var sb [4]byte
				binary.LittleEndian.PutUint32(sb[:], uint32(st))
				send(msg(msgExited, uint32(wpid)), sb[:])
			}
		})
	}

	killAll := make(chan struct{})
	go func() {
		defer close(killAll)
		fd := int(lifeline.Fd())
		for {
			hdr := make([]byte, 5)
			oob := make([]byte, unix.CmsgSpace(3*4))
			n, oobn, _, _, err := unix.Recvmsg(fd, hdr, oob, unix.MSG_CMSG_CLOEXEC)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return // EOF: the server is gone
			}
			if n < 5 && hdr[0] != msgKillTree {
				if _, err := io.ReadFull(lifeline, hdr[n:]); err != nil {
					return
				}
			}
			switch hdr[0] {
			case msgKillTree:
				return
			case msgKillOne:
				pid := int(binary.LittleEndian.Uint32(hdr[1:]))
				cmu.Lock()
				known := children[pid]
				// Held during the kill: the child cannot be reaped (and
				// its pid reused) meanwhile.
				if known && !cg.kill(pid) {
					killSubtree(pid)
				}
				cmu.Unlock()
				send(msg(msgKilled, uint32(pid)))
			case msgSpawn:
				var files []int
				if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
					for _, m := range msgs {
						if fds, err := unix.ParseUnixRights(&m); err == nil {
							files = append(files, fds...)
						}
					}
				}
				payload := make([]byte, binary.LittleEndian.Uint32(hdr[1:]))
				if _, err := io.ReadFull(lifeline, payload); err != nil {
					return
				}
				var a SpawnAttr
				if json.Unmarshal(payload, &a) != nil || len(files) != 3 {
					for _, f := range files {
						unix.Close(f)
					}
					send(msg(msgFailed, uint32(syscall.EINVAL)))
					continue
				}
				sys := &syscall.SysProcAttr{Setsid: a.Setsid, Setctty: a.Setctty,
					Cloneflags: a.Cloneflags, UidMappings: a.UidMappings, GidMappings: a.GidMappings}
				if a.Pdeathsig {
					sys.Pdeathsig = syscall.SIGKILL
				}
				// Hold the lock across the fork and the report, so that a
				// fast exit is reaped as ours and reported after its start.
				cmu.Lock()
				cgDir, cgFD := cg.prepare()
				if cgFD >= 0 {
					// Born into its own cgroup, with everything it starts.
					sys.UseCgroupFD, sys.CgroupFD = true, cgFD
				}
				attr := &syscall.ProcAttr{
					Dir: a.Dir, Env: a.Env, Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])}, Sys: sys,
				}
				pid, err := syscall.ForkExec(a.Path, a.Argv, attr)
				if err != nil && cgFD >= 0 && !execError(err) {
					// Maybe the cgroup is what failed (CLONE_INTO_CGROUP
					// refused): if a start without one succeeds, stop using
					// cgroups; the trees are then found by scanning.
					sys.UseCgroupFD, sys.CgroupFD = false, 0
					if pid, err = syscall.ForkExec(a.Path, a.Argv, attr); err == nil {
						cg.off = true
					}
				}
				if cgFD >= 0 {
					unix.Close(cgFD)
				}
				for _, f := range files {
					unix.Close(f)
				}
				if err != nil || !sys.UseCgroupFD {
					cg.failed(cgDir)
					cgDir = ""
				}
				if err != nil {
					cmu.Unlock()
					errno, _ := err.(syscall.Errno)
					if errno == 0 {
						errno = syscall.EINVAL
					}
					send(msg(msgFailed, uint32(errno)))
					continue
				}
				children[pid] = true
				cg.started(pid, cgDir)
				send(msg(msgStarted, uint32(pid)))
				cmu.Unlock()
				reap() // in case it is already gone and SIGCHLD was missed
			}
		}
	}()
	send([]byte{msgReady})

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGCHLD {
				reap()
			}
		case <-tick.C:
			reap()
		case <-killAll:
			cmu.Lock()
			known := make([]int, 0, len(children))
			for pid := range children {
				known = append(known, pid)
			}
			cmu.Unlock()
			viaCgroups := false
			killTree(func() {
				viaCgroups = cg.killAll()
				// Children started without a cgroup (see cg.off) too.
				for _, pid := range known {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}, func(reaped map[int]bool) bool {
				for _, pid := range known {
					if !reaped[pid] {
						return false
					}
				}
				return !viaCgroups || !cg.populated()
			})
			reap()
			cmu.Lock()
			// Killed processes may still be exiting.
			err := cg.remove(2 * time.Second)
			cmu.Unlock()
			if err != nil {
				// The server kills what is left and removes the cgroups
				// when it sees a spawner fail (releaseSpawnerCgroups).
				return 1
			}
			return 0
		}
	}
}

// execError reports whether a failed start failed in execve (the
// program's fault), not in clone (EACCES and EPERM may be either).
func execError(err error) bool {
	switch err {
	case syscall.ENOENT, syscall.ENOEXEC, syscall.ENOTDIR, syscall.ELOOP,
		syscall.ENAMETOOLONG, syscall.E2BIG, syscall.ETXTBSY, syscall.EISDIR:
		return true
	}
	return false
}

// killSubtree SIGKILLs child pid and everything that belongs to its tree,
// without a cgroup: its session and process group, every descendant, and
// the orphans of the tree that were reparented to the spawner, recognised
// by their session or group (an orphan that also started its own session
// cannot be told apart from another child's, and is missed; cgroups do not
// have that hole). The tree is frozen with SIGSTOP first, pass after pass
// until no new member appears, so that none can fork, or be orphaned by
// its parent's death, between the scan and the kill.
func killSubtree(pid int) {
	seen := map[int]bool{pid: true}
	_ = syscall.Kill(-pid, syscall.SIGSTOP)
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for pass := 0; pass < 100; pass++ {
		grew := false
		for _, p := range tree(pid, scanProcs()) {
			if !seen[p] {
				seen[p] = true
				grew = true
				_ = syscall.Kill(p, syscall.SIGSTOP)
			}
		}
		if !grew {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for p := range seen {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// tree lists the members of pid's session and process group (pid is a
// live child, so these ids are its own) and every process below them.
func tree(pid int, procs []procStat) []int {
	var members []int
	for _, p := range procs {
		if p.pid != pid && (p.sid == pid || p.pgid == pid) {
			members = append(members, p.pid)
		}
	}
	return descendants(pid, procs, members...)
}
