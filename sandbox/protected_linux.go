package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Mount points of missing protected paths are created on the host for the
// life of the sandboxes that need them and removed by the last one, if an
// exec-server made them (a marker file in them says so, hidden by the mask
// in every view) and they hold nothing else. Several servers, of any uid,
// may share one (a workspace, /tmp): each holds a shared flock on the
// directory while it uses it, and a server removes it only under an
// exclusive one. That matters beyond tidiness: rmdir of a directory that
// is a mount point in another namespace succeeds and lazily unmounts the
// mask there, which would let that sandbox create the protected path.
//
// Within one process a path's entry counts its sandboxes. Every acquire
// checks that the directory at the path is still one the entry holds: a
// mount point removed without the lock (rm -rf of the workspace by its
// owner, or by a sandbox whose writable root is a parent of it) is made
// again, where reusing the entry used to start the sandbox without one and
// fail it (-32603 "protected path missing and its mount point could not be
// made").
//
// Nothing is left behind after an orderly end: Quiesce (server.Close, so
// stdin EOF, SIGTERM and SIGINT too) ends the idle helpers and waits for
// every helper and removal in flight.
var (
	protMu  sync.Mutex
	protReg = map[string]*protEntry{}
)

type protEntry struct {
	n    int
	dirs []*os.File // directories held at the path (flocked shared), newest last
}

// holds reports whether the directory now at path is one e holds.
func (e *protEntry) holds(path string) bool {
	if len(e.dirs) == 0 {
		return false
	}
	var a, b unix.Stat_t
	return unix.Fstat(int(e.dirs[len(e.dirs)-1].Fd()), &a) == nil && unix.Lstat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// protMadeMarker marks a directory an exec-server made.
const protMadeMarker = policy.MountPointMarker

// lockWait bounds how long an acquire waits for another server's remover
// (which holds the directory exclusively for microseconds, but may be
// preempted meanwhile on a loaded machine) before failing closed; a
// variable for tests.
var lockWait = 20 * time.Second

func acquireProtected(p *policy.Plan) (func(), error) {
	var paths []string
	var failed error
	protMu.Lock()
	for _, m := range p.Mounts {
		// A plan resolved while another sandbox held the mount point saw
		// it exist: it must hold it too, or make it again if it went.
		// Any mount on an exec-server's mount point holds it, protected
		// or not: its last holder's removal would unmount it in this view.
		// An existing protected directory is held too, marker or not:
		// another server may be between its mkdir and its marker, or
		// between the marker's unlink and its rmdir (under its exclusive
		// lock, which this shared one then waits out).
		// So is a protected name that an entry of its own names (codex's
		// read entry for .git) below a writable parent: Resolve saw a
		// real directory there, or another server's mount point between
		// its rmdir and its marker.
		hold := isMountPoint(m.Path) ||
			m.Protected && (m.Missing || missingOrDir(m.Path)) ||
			!m.Protected && !m.Missing && isProtectedName(m.Path) && missingOrDir(m.Path) &&
				accessOf(p, filepath.Dir(m.Path)) == policy.AccessWrite
		if !hold {
			continue
		}
		e := protReg[m.Path]
		if e == nil {
			e = &protEntry{}
			protReg[m.Path] = e
		}
		if !e.holds(m.Path) {
			// A failure for a missing path (a missing parent) leaves it
			// to the helper, which fails closed if the path could be
			// created inside. One that exists and cannot be held (another
			// server is removing it, for longer than lockWait) could go
			// while the sandbox uses it: fail. One this server cannot
			// read is none of an exec-server's (0755).
			if dir := lockMountPoint(m.Path); dir != nil {
				e.dirs = append(e.dirs, dir)
			} else if exists(m.Path) && unix.Access(m.Path, unix.R_OK) == nil {
				failed = fmt.Errorf("protected path %s: its mount point could not be held", m.Path)
				if e.n == 0 {
					delete(protReg, m.Path)
				}
				break
			}
		}
		e.n++
		paths = append(paths, m.Path)
	}
	protMu.Unlock()
	var once sync.Once
	release := func() {
		once.Do(func() {
			protMu.Lock()
			defer protMu.Unlock()
			for _, path := range paths {
				e := protReg[path]
				if e.n--; e.n > 0 {
					continue
				}
				delete(protReg, path)
				if len(e.dirs) == 0 {
					continue
				}
				for _, d := range e.dirs {
					d.Close() // drops the shared lock
				}
				if !removeMountPoint(path) {
					startRetry(path)
				}
			}
		})
	}
	if failed != nil {
		release()
		return nil, failed
	}
	return release, nil
}

func exists(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil
}

// isProtectedName reports whether path's last component is one of
// ProtectedNames.
func isProtectedName(path string) bool {
	base := filepath.Base(path)
	for _, n := range policy.ProtectedNames {
		if base == n {
			return true
		}
	}
	return false
}

// missingOrDir reports whether path is missing or a directory (not a
// symlink).
func missingOrDir(path string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return true
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// isMountPoint reports whether path is a mount point an exec-server made
// (a directory, not a symlink to one, holding the marker).
func isMountPoint(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	return unix.Lstat(filepath.Join(path, protMadeMarker), &st) == nil
}

// lockMountPoint makes path (a directory) if needed and holds a shared
// flock on it; nil on failure.
func lockMountPoint(path string) *os.File {
	// Another server's remover holds the directory for microseconds, but
	// on a loaded machine it may be preempted meanwhile: ten 1 ms tries
	// gave up under load 90 and the request failed closed (-32603 "mount
	// …/.codex: no such file"). Retry for up to lockWait, backing off.
	deadline := time.Now().Add(lockWait)
	wait := time.Millisecond
	for try := 0; time.Now().Before(deadline); try++ {
		if try > 0 {
			time.Sleep(wait)
			wait = min(2*wait, 50*time.Millisecond)
		}
		err := unix.Mkdir(path, 0o755)
		made := err == nil
		if err != nil && !errors.Is(err, unix.EEXIST) {
			// A missing parent, a read-only or foreign directory: no
			// wait makes it possible (the helper fails closed if the
			// path could be created inside).
			return nil
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT {
			continue // removed by its last user meanwhile
		}
		if err != nil {
			return nil
		}
		if made {
			if m, err := unix.Openat(fd, protMadeMarker, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400); err == nil {
				unix.Close(m)
			}
			recordMountPoint(path) // for CleanStale, should this server die
		}
		// Never blocking: anyone who can open the directory can lock it.
		if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
			unix.Close(fd) // a remover holds it
			continue
		}
		// Still the directory at path (not removed before the lock)?
		var a, b unix.Stat_t
		if unix.Fstat(fd, &a) == nil && unix.Lstat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
			return os.NewFile(uintptr(fd), path)
		}
		unix.Close(fd)
	}
	return nil
}

// pending tracks what stands between this process and a host with nothing
// of it left: live fs helpers (their reaping releases their mount points)
// and removals being retried. Quiesce waits for it.
var pending struct {
	mu    sync.Mutex
	items map[*pendingItem]bool
}

type pendingItem struct {
	retry bool
	done  chan struct{}
}

func track(retry bool) *pendingItem {
	it := &pendingItem{retry: retry, done: make(chan struct{})}
	pending.mu.Lock()
	if pending.items == nil {
		pending.items = map[*pendingItem]bool{}
	}
	pending.items[it] = true
	pending.mu.Unlock()
	return it
}

func (it *pendingItem) end() {
	pending.mu.Lock()
	delete(pending.items, it)
	pending.mu.Unlock()
	close(it.done)
}

// snapshotPending returns the items in flight now (only retries if
// retriesOnly).
func snapshotPending(retriesOnly bool) []*pendingItem {
	pending.mu.Lock()
	defer pending.mu.Unlock()
	var out []*pendingItem
	for it := range pending.items {
		if !retriesOnly || it.retry {
			out = append(out, it)
		}
	}
	return out
}

// Quiesce makes removal retries hurry: the process is about to end.
var (
	quiescers atomic.Int32
	wakeMu    sync.Mutex
	wakeCh    = make(chan struct{})
)

// wake interrupts every retry's wait.
func wake() {
	wakeMu.Lock()
	close(wakeCh)
	wakeCh = make(chan struct{})
	wakeMu.Unlock()
}

func waitRetry(d time.Duration) {
	if quiescers.Load() > 0 {
		d = 5 * time.Millisecond
	}
	wakeMu.Lock()
	ch := wakeCh
	wakeMu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ch:
	}
}

// retryFor bounds the retries of one removal.
const retryFor = 10 * time.Second

// startRetry tries removeMountPoint again for a while, with backoff,
// while this server does not use path again (its release then removes
// it). Without it a lock held for longer than removeMountPoint waits (a
// child forked on a loaded machine that has not exec'ed yet) left the
// mount point on the host for good.
func startRetry(path string) {
	it := track(true)
	go func() {
		defer it.end()
		start := time.Now()
		for delay := 20 * time.Millisecond; time.Since(start) < retryFor; delay = min(2*delay, time.Second) {
			waitRetry(delay)
			protMu.Lock()
			done := protReg[path] != nil || removeMountPoint(path)
			protMu.Unlock()
			if done {
				return
			}
		}
		// Another server's sandbox uses it: that server removes it.
	}()
}

// Quiesce ends every idle helper and waits, until ctx ends, for the
// helpers in flight now and the removals they leave to finish: after it,
// this process has left no mount point of a missing protected path on the
// host, unless a sandbox of another process still uses it (that process
// removes it) or one of this process's commands still runs (its release,
// when it is reaped, does). A server calls it when it closes, before the
// process exits.
func Quiesce(ctx context.Context) {
	quiescers.Add(1)
	defer quiescers.Add(-1)
	wake()
	closeIdle()
	for _, retriesOnly := range []bool{false, true} {
		for _, it := range snapshotPending(retriesOnly) {
			select {
			case <-it.done:
			case <-ctx.Done():
				return
			}
		}
	}
}

// removeMountPoint removes path if nobody holds it, an exec-server made it
// and it holds nothing but the marker. It is false when the lock was held
// (another server's sandbox, or a child this one is forking, uses it).
func removeMountPoint(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	dir := os.NewFile(uintptr(fd), path)
	defer dir.Close()
	// A shared lock may also be held for a moment by a child this server
	// is forking (the descriptor is close-on-exec, but between fork and
	// exec the child shares it): retry briefly before concluding that
	// another server's sandbox uses it.
	locked := false
	for try := 0; try < 25 && !locked; try++ {
		if locked = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil; !locked {
			time.Sleep(2 * time.Millisecond)
		}
	}
	if !locked {
		return false // another server's sandbox uses it
	}
	names, err := dir.Readdirnames(3)
	if err != nil && err != io.EOF {
		return true
	}
	if len(names) == 1 && names[0] == protMadeMarker {
		if unix.Unlinkat(fd, protMadeMarker, 0) == nil && unix.Rmdir(path) == nil {
			forgetMountPoint(path)
		}
	}
	return true
}
