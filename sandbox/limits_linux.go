package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The process limit (a pids cgroup per sandbox) and core dumps.

// PidsMaxEnv names the server setting that bounds the processes (and
// threads) of each sandboxed command; DefaultPidsMax without it, 0 for no
// bound.
const PidsMaxEnv = "EXEC_SERVER_SANDBOX_PIDS_MAX"

// DefaultPidsMax is the default bound: far above a build's needs (a make
// -j on a large machine), far below what exhausts a host (a fork loop
// reached 378 processes in a second without it).
const DefaultPidsMax = 4096

func pidsMax() int {
	v := os.Getenv(PidsMaxEnv)
	if v == "" {
		return DefaultPidsMax
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return DefaultPidsMax
	}
	return n
}

var cgroupSeq struct {
	sync.Mutex
	n int
}

// makePidsCgroup makes a child pids cgroup of this server's own (cgroup
// v1), with pids.max = max, for one sandbox: it returns the child's
// cgroup.procs (the init moves itself there before anything forks) and a
// func that removes the child once the sandbox is gone. "" when there is
// no v1 pids hierarchy this server may write (a server that is not root
// usually may not).
func makePidsCgroup(max int) (string, func()) {
	none := func() {}
	dir := pidsCgroupDir()
	if dir == "" {
		return "", none
	}
	cgroupSeq.Lock()
	cgroupSeq.n++
	n := cgroupSeq.n
	cgroupSeq.Unlock()
	child := filepath.Join(dir, fmt.Sprintf("exec-server-sandbox-%d-%d", os.Getpid(), n))
	if err := os.Mkdir(child, 0o755); err != nil {
		return "", none
	}
	remove := func() {
		// The init exits after its command; the kernel ends the rest of
		// the PID namespace, which takes a moment: retry for a while.
		go func() {
			for delay := 10 * time.Millisecond; delay < 10*time.Second; delay *= 2 {
				if err := unix.Rmdir(child); err == nil || err == unix.ENOENT {
					return
				}
				time.Sleep(delay)
			}
		}()
	}
	if os.WriteFile(filepath.Join(child, "pids.max"), []byte(strconv.Itoa(max)), 0) != nil {
		_ = unix.Rmdir(child)
		return "", none
	}
	return filepath.Join(child, "cgroup.procs"), remove
}

// pidsCgroupDir is this process's own cgroup directory in cgroup v1's pids
// hierarchy, "" when there is none it may make children in. Never a cgroup
// v2 one: there the process package's spawner starts each child in a
// cgroup of its own, which it kills whole; the init must not leave it
// (limitProcesses sets pids.max on it instead).
func pidsCgroupDir() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || !slices.Contains(strings.Split(f[1], ","), "pids") {
			continue
		}
		d := filepath.Join("/sys/fs/cgroup/pids", f[2])
		if unix.Access(d, unix.W_OK) == nil {
			return d
		}
	}
	return ""
}

// spawnerCgroupPidsMax is the pids.max file of the cgroup v2 cgroup the
// init was started in when it is the spawner's cgroup of this child alone
// (exec-server-spawner-PID/N, docs/security.md) and has the pids
// controller; "" otherwise.
func spawnerCgroupPidsMax() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		path, ok := strings.CutPrefix(l, "0::")
		if !ok || !strings.HasPrefix(filepath.Base(filepath.Dir(path)), "exec-server-spawner-") {
			continue
		}
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			f := filepath.Join(root, path, "pids.max")
			if unix.Access(f, unix.W_OK) == nil {
				return f
			}
		}
	}
	return ""
}

// limitProcesses runs in the init before anything forks: no core file
// (RLIMIT_CORE 0, soft and hard: a core in a writable root is a file no
// deny glob stops, and may hold the command's secrets), and the process
// bound: the sandbox's own pids cgroup (cgroup v1: a child of the
// server's; cgroup v2: pids.max of the spawner's cgroup of this child,
// where pids is enabled), or where there is none and the server is not
// root, RLIMIT_NPROC, which the kernel counts per user and user namespace
// (each sandbox has its own); global root is exempt from RLIMIT_NPROC, so
// a root server without a pids controller has no bound (docs/sandbox.md).
//
// Moving a process into a cgroup waits for an RCU grace period (5 to 15 ms
// on a loaded machine): the move runs on another thread while the view is
// built, and joined says when it is done (the init waits for it before
// anything forks).
func limitProcesses(p *policy.Plan) (joined <-chan error, err error) {
	done := make(chan error, 1)
	done <- nil
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return nil, fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	if p.PidsMax <= 0 {
		return done, nil
	}
	if p.PidsCgroup != "" {
		// Opened now: the view (a chroot of the whole process) hides it.
		f, err := os.OpenFile(p.PidsCgroup, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("join %s: %w", p.PidsCgroup, err)
		}
		<-done
		go func() {
			defer f.Close()
			// "0" is the writer's whole thread group: the init.
			if _, err := f.Write([]byte("0")); err != nil {
				done <- fmt.Errorf("join %s: %w", p.PidsCgroup, err)
				return
			}
			done <- nil
		}()
		return done, nil
	}
	if f := spawnerCgroupPidsMax(); f != "" {
		if os.WriteFile(f, []byte(strconv.Itoa(p.PidsMax)), 0) == nil {
			return done, nil
		}
	}
	if os.Getuid() == 0 && !inUserNS() {
		return done, nil
	}
	lim := uint64(p.PidsMax)
	return done, unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: lim, Max: lim})
}

// inUserNS reports whether this process is in a user namespace other than
// the initial one (its uid map is not the identity of every uid).
func inUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295")
}
