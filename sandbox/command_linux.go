package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// Command: how to start a command under a plan (the init's argv, its
// namespaces and id maps), and the view's access at a path.

// cloneflags are the helper's namespaces: a user namespace when the
// server is not root (it maps the server's uid and gid to 0 inside, as the
// reference does: the view needs root in the namespace after exec).
func cloneflags(command bool, network policy.Network) uintptr {
	f := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID)
	if command {
		f |= unix.CLONE_NEWIPC | unix.CLONE_NEWUTS
		if network == policy.NetworkRestricted || network == policy.NetworkProxied {
			f |= unix.CLONE_NEWNET
		}
	}
	if os.Getuid() != 0 {
		f |= unix.CLONE_NEWUSER
	}
	return f
}

func idMaps() (uid, gid []IDMap) {
	if os.Getuid() == 0 {
		return nil, nil
	}
	return []IDMap{{0, os.Getuid(), 1}}, []IDMap{{0, os.Getgid(), 1}}
}

func sysMaps(m []IDMap) []syscall.SysProcIDMap {
	var out []syscall.SysProcIDMap
	for _, e := range m {
		out = append(out, syscall.SysProcIDMap{ContainerID: e.ContainerID, HostID: e.HostID, Size: e.Size})
	}
	return out
}

// accessOf is the access path has in p's view (ignoring symlinks).
func accessOf(p *policy.Plan, path string) policy.Access {
	acc := p.Root
	if acc == policy.AccessNone {
		for _, d := range platformMinimum {
			if path == d || strings.HasPrefix(path, d+"/") {
				acc = policy.AccessRead
			}
		}
	}
	for _, m := range p.Mounts {
		if m.Missing && !m.Protected {
			continue
		}
		if path == m.Path || strings.HasPrefix(path, m.Path+"/") {
			acc = m.Access
			if m.Protected {
				acc = policy.AccessRead
			}
		}
	}
	return acc
}

// visible fails with ENOENT when path does not exist or the view hides it.
func visibleIn(p *policy.Plan, path string) error {
	if !filepath.IsAbs(path) {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.EINVAL}
	}
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err != nil {
		return err
	}
	if accessOf(p, path) == policy.AccessNone {
		return &os.PathError{Op: "sandbox", Path: path, Err: syscall.ENOENT}
	}
	return nil
}

// planArgMax keeps each argv string under the kernel's MAX_ARG_STRLEN.
const planArgMax = 64 << 10

func command(p *policy.Plan, path string, argv, env []string, dir string) (*Spec, error) {
	if s := Probe(); !s.Available {
		return nil, unavailable(s)
	}
	if err := visibleIn(p, path); err != nil {
		return nil, err
	}
	if err := visibleIn(p, dir); err != nil {
		return nil, err
	}
	q := *p
	if q.Network != policy.NetworkRestricted {
		q.AllowUnixSockets = allowedUnixSockets()
	}
	if len(q.DenyGlobs) > 0 {
		q.CreationLock = creationLockPath()
	}
	q.PidsMax = pidsMax()
	removeCgroup := func() {}
	if q.PidsMax > 0 {
		q.PidsCgroup, removeCgroup = makePidsCgroup(q.PidsMax)
	}
	plan, err := json.Marshal(&q)
	if err != nil {
		return nil, err
	}
	var chunks []string
	for s := string(plan); len(s) > 0; {
		n := min(len(s), planArgMax)
		chunks, s = append(chunks, s[:n]), s[n:]
	}
	args := []string{"exec-server-sandbox", helperArg, "init", strconv.Itoa(len(chunks))}
	args = append(args, chunks...)
	args = append(args, path, filepath.Clean(dir))
	args = append(args, argv...)
	uid, gid := idMaps()
	releaseProtected, err := acquireProtected(p)
	if err != nil {
		removeCgroup()
		return nil, err
	}
	release := func() {
		releaseProtected()
		removeCgroup()
	}
	return &Spec{
		Path:        "/proc/self/exe",
		Argv:        args,
		Env:         wrapEnv(env),
		Cloneflags:  cloneflags(true, p.Network),
		UidMappings: uid,
		GidMappings: gid,
		Release:     release,
	}, nil
}

// AllowUnixSocketsEnv names the server setting that lets sandboxed
// commands with the network enabled connect to the listed pathname AF_UNIX
// sockets (a colon-separated list of absolute paths) outside their
// writable roots; by default such a connect fails with EACCES.
const AllowUnixSocketsEnv = "EXEC_SERVER_SANDBOX_ALLOW_UNIX_SOCKETS"

// allowedUnixSockets is AllowUnixSocketsEnv's list, canonical (the
// supervisor compares the socket's path in the view, which is the host's).
func allowedUnixSockets() []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(AllowUnixSocketsEnv), ":") {
		if !filepath.IsAbs(s) {
			continue
		}
		if real, err := filepath.EvalSymlinks(s); err == nil {
			s = real
		}
		out = append(out, filepath.Clean(s))
	}
	return out
}
