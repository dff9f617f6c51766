package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Deny globs hold under concurrency. A supervisor checks a new name's
// path and then makes it relative to the directory it checked; another
// sandbox's supervisor checks a rename's new paths (walking a moved
// directory) and then renames. Each is sound alone, but interleaved a
// creation checked as d/f lands in secrets/f when d becomes secrets in
// between (TestCommandDenyGlobConcurrentRename: every run within 2 000
// tries). So every supervised creation (and every fs helper call of a
// plan with deny globs) holds a shared flock on one machine-wide lock file
// from its check to its creation, and every supervised rename holds it
// exclusively from its walk to the rename: no interleaving of sandboxes
// of any number of servers, of any user, is left. The file is in /dev/shm,
// which no sandbox view shows (each gets a fresh /dev), opened by the
// helper before it builds its view; where there is no /dev/shm, it is in
// the state directory's parent.

// creationLockName is the lock file's name.
const creationLockName = "exec-server-sandbox-creation.lock"

// creationLockWait bounds a wait for the lock (a process outside every
// sandbox holding it cannot stall a sandbox for longer): the call then
// fails with EAGAIN.
const creationLockWait = 30 * time.Second

// creationLockPath is where the lock file is ("" when nowhere).
func creationLockPath() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && unix.Access("/dev/shm", unix.W_OK|unix.X_OK) == nil {
		return "/dev/shm/" + creationLockName
	}
	if d := registryDir(); d != "" {
		return filepath.Join(filepath.Dir(d), creationLockName)
	}
	return ""
}

// openCreationLock opens (making it if needed, 0644: a shared flock needs
// only reading) the lock file at path, read-only and close-on-exec.
func openCreationLock(path string) (int, error) {
	if path == "" {
		return -1, errors.New("no place for the creation lock (no /dev/shm, no state directory)")
	}
	for try := 0; try < 10; try++ {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != unix.ENOENT {
			if err != nil {
				return -1, fmt.Errorf("creation lock %s: %w", path, err)
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				unix.Close(fd)
				return -1, fmt.Errorf("creation lock %s: not a regular file", path)
			}
			return fd, nil
		}
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
		// O_EXCL: never through a name planted meanwhile (protected_regular
		// would refuse O_CREAT on another user's file in a sticky dir).
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_ = unix.Fchmod(fd, 0o644) // whatever the umask
			return fd, nil
		}
		if err != unix.EEXIST {
			return -1, fmt.Errorf("creation lock %s: %w", path, err)
		}
	}
	return -1, fmt.Errorf("creation lock %s: keeps changing", path)
}

// creationHolds counts this process's holds of the creation lock (a
// plan without deny globs counts too: the same section of a call). Work
// whose cost a command controls must never run under it (writersOf): a
// test hook checks (scanHook).
var creationHolds atomic.Int32

// lockCreation takes the creation lock (exclusive for a rename), waiting
// at most creationLockWait; the returned func releases it. fd < 0: no lock
// (a plan without deny globs).
func lockCreation(fd int, exclusive bool) (func(), unix.Errno) {
	if fd < 0 {
		creationHolds.Add(1)
		return func() { creationHolds.Add(-1) }, 0
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	deadline := time.Now().Add(creationLockWait)
	wait := 50 * time.Microsecond
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			creationHolds.Add(1)
			return func() {
				creationHolds.Add(-1)
				_ = unix.Flock(fd, unix.LOCK_UN)
			}, 0
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return nil, unix.EACCES // fail closed
		}
		if time.Now().After(deadline) {
			return nil, unix.EAGAIN
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Millisecond)
	}
}
