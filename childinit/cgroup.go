package childinit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Each child of a spawner gets its own cgroup (cgroup v2, when this process
// may create one there): every descendant is born into it, whatever its
// session, process group or parent, so killing the cgroup (cgroup.kill)
// kills the whole tree at once, with no /proc scan and no race with a
// process that forks, calls setsid or dies and orphans its children
// meanwhile. The layout is <own cgroup>/exec-server-spawner-<pid>/<n>: one
// directory per spawner, one below it per child. Without cgroups (no v2
// hierarchy, no permission, a kernel without cgroup.kill) the spawner falls
// back to freezing the tree and scanning /proc (killSubtree).

// noCgroupsEnv, set to anything in the server's environment, makes its
// spawners do without cgroups (for tests of the fallback, and as a way out
// should cgroups misbehave on some host).
const noCgroupsEnv = "EXEC_SERVER_NO_CGROUPS"

// cgroupBase is the directory of this process's own cgroup in the v2
// hierarchy, or "" when there is none.
func cgroupBase() string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	var path string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = p, true
			break
		}
	}
	if !found || !strings.HasPrefix(path, "/") {
		return ""
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(mi), "\n") {
		// id parent major:minor root mountpoint options... - fstype source options
		f := strings.Fields(line)
		sep := -1
		for i, w := range f {
			if w == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		root, mnt := f[3], f[4]
		if strings.Contains(mnt, `\`) {
			continue // an escaped mount point: not worth decoding
		}
		rel, ok := strings.CutPrefix(path, root)
		if root == "/" {
			rel, ok = path, true
		}
		if !ok {
			continue
		}
		return filepath.Join(mnt, rel)
	}
	return ""
}

var cgroupBaseOnce = sync.OnceValue(cgroupBase)

// releaseSpawnerCgroups kills whatever is left in the cgroups of a spawner
// that has exited, and removes them. A spawner that exits normally leaves
// nothing; one that was killed (SIGKILL, the OOM killer) leaves its
// directory, and its children's descendants running in it: Pdeathsig
// killed the children, not what they started.
func releaseSpawnerCgroups(pid int) {
	base := cgroupBaseOnce()
	if base == "" {
		return
	}
	dir := spawnerCgroup(base, pid)
	if _, err := os.Stat(dir); err != nil {
		return
	}
	_ = cgroupKill(dir)
	for range 100 {
		if removeCgroupTree(dir) == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spawnerCgroup(base string, spawnerPID int) string {
	return filepath.Join(base, "exec-server-spawner-"+strconv.Itoa(spawnerPID))
}

// cgroups are one spawner's: callers serialize access.
type cgroups struct {
	dir   string         // the spawner's directory; "" without cgroups
	off   bool           // starting into a cgroup failed once: no more
	next  int            // name of the next child's directory
	byPID map[int]string // live child → its cgroup
	stale map[string]bool
}

// newCgroups creates the spawner's directory, or returns a set that
// provides no cgroup.
func newCgroups() *cgroups {
	c := &cgroups{byPID: map[int]string{}, stale: map[string]bool{}}
	base := cgroupBase()
	if base == "" || os.Getenv(noCgroupsEnv) != "" {
		return c
	}
	dir := spawnerCgroup(base, os.Getpid())
	if err := unix.Mkdir(dir, 0o755); err != nil && err != unix.EEXIST {
		return c
	}
	if err := unix.Access(filepath.Join(dir, "cgroup.kill"), unix.W_OK); err != nil {
		_ = unix.Rmdir(dir)
		return c
	}
	c.dir = dir
	return c
}

// prepare makes the cgroup of the next child: its directory and a
// descriptor for CLONE_INTO_CGROUP, or "" and -1 without cgroups.
func (c *cgroups) prepare() (string, int) {
	if c.dir == "" || c.off {
		return "", -1
	}
	c.next++
	d := filepath.Join(c.dir, strconv.Itoa(c.next))
	if err := unix.Mkdir(d, 0o755); err != nil {
		return "", -1
	}
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(d)
		return "", -1
	}
	return d, fd
}

// started records that child pid runs in d; failed gives up d after a
// start that failed.
func (c *cgroups) started(pid int, d string) {
	if d != "" {
		c.byPID[pid] = d
	}
}

func (c *cgroups) failed(d string) {
	if d != "" {
		_ = unix.Rmdir(d)
	}
}

// reaped notes that child pid is gone: its cgroup is removed once empty
// (descendants it left behind may still run there).
func (c *cgroups) reaped(pid int) {
	if d, ok := c.byPID[pid]; ok {
		delete(c.byPID, pid)
		c.stale[d] = true
	}
	c.sweep()
}

// sweep removes the empty cgroups of reaped children.
func (c *cgroups) sweep() {
	for d := range c.stale {
		if err := unix.Rmdir(d); err == nil || err == unix.ENOENT {
			delete(c.stale, d)
		}
	}
}

// kill SIGKILLs everything in child pid's cgroup; false when the child has
// none (or the kill failed), so the caller must fall back.
func (c *cgroups) kill(pid int) bool {
	d, ok := c.byPID[pid]
	return ok && cgroupKill(d) == nil
}

// killAll SIGKILLs everything in every child's cgroup.
func (c *cgroups) killAll() bool {
	return c.dir != "" && cgroupKill(c.dir) == nil
}

// populated reports whether a process still runs in one of the cgroups.
func (c *cgroups) populated() bool {
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	return err != nil || !strings.Contains(string(data), "populated 0")
}

// remove removes every cgroup once their processes are gone, waiting up
// to wait for the last ones to exit; it fails while one still holds a
// process.
func (c *cgroups) remove(wait time.Duration) error {
	if c.dir == "" {
		return nil
	}
	for pid, d := range c.byPID {
		c.stale[d] = true
		delete(c.byPID, pid)
	}
	deadline := time.Now().Add(wait)
	for {
		c.sweep()
		err := removeCgroupTree(c.dir)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sweepStaleCgroups removes the empty cgroups of spawners that are gone
// (killed, so that they could not remove their own) from an earlier server
// or this one. It only removes: a populated cgroup stays, and so do its
// processes, since a dead pid here might be a live one in another PID
// namespace sharing this cgroup hierarchy.
func sweepStaleCgroups() {
	base := cgroupBaseOnce()
	if base == "" {
		return
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "exec-server-spawner-")
		if !ok || !e.IsDir() {
			continue
		}
		if _, err := strconv.Atoi(rest); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + rest); !os.IsNotExist(err) {
			continue // alive, or not known to be dead
		}
		_ = removeCgroupTree(filepath.Join(base, e.Name()))
	}
}

func cgroupKill(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.kill"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("1")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeCgroupTree removes dir and the cgroups directly below it; it fails
// (EBUSY) while a process still runs in one of them.
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = unix.Rmdir(filepath.Join(dir, e.Name()))
		}
	}
	err = unix.Rmdir(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}
