package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execgo/exec-server/sandbox/policy"
)

// The view is built in the helper's fresh mount namespace with the new
// mount API: every source is cloned from the live host tree (host symlink
// semantics), every target is resolved inside the view with
// RESOLVE_IN_ROOT (so a symlink in the view cannot send a mount outside
// it), then the process pivots into the view and detaches the host.

// platformMinimum is what an empty root still shows (as the reference's
// "minimal" defaults).
var platformMinimum = []string{"/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc"}

// Device nodes of the fresh /dev, bound from the host's.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// viewOpts is what the view needs besides the plan.
type viewOpts struct {
	command bool     // a process/start init: /dev/pts and /dev/shm too
	ptys    []string // host paths of PTY slaves on fds 0-2 (/dev/pts/N)
}

// stepError names the step of the view or lockdown that failed.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func stepErr(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step, err}
}

type viewBuilder struct {
	p       *policy.Plan
	opts    viewOpts
	view    int // the view's root mount, attached on top of /
	masks   int // a read-only tmpfs holding the mask sources
	rules   []landlockRule
	mounted map[string]bool // paths of the view that are mount points
}

// buildView builds p's view and pivots into it; it returns the Landlock
// rules that mirror it (paths of the view).
func buildView(p *policy.Plan, opts viewOpts) ([]landlockRule, error) {
	b := &viewBuilder{p: p, opts: opts, view: -1, masks: -1, mounted: map[string]bool{"/": true}}
	defer func() {
		for _, fd := range []int{b.view, b.masks} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, stepErr("make / private", err)
	}
	if err := b.root(); err != nil {
		return nil, err
	}
	if err := b.makeMasks(); err != nil {
		return nil, stepErr("masks", err)
	}
	for _, m := range p.Mounts {
		if m.Missing && !m.Protected {
			continue // not mounted (see mount)
		}
		if err := b.pinParents(m.Path); err != nil {
			return nil, stepErr("pin the parents of "+m.Path, err)
		}
		if err := b.mount(m); err != nil {
			return nil, stepErr("mount "+m.Path, err)
		}
	}
	if err := b.dev(); err != nil {
		return nil, stepErr("/dev", err)
	}
	if err := b.proc(); err != nil {
		return nil, stepErr("/proc", err)
	}
	if p.Root == policy.AccessNone {
		if err := unix.MountSetattr(b.view, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return nil, stepErr("read-only root", err)
		}
	}
	// chroot into the view, which is stacked on the host's root: unlike
	// pivot_root, which visits every thread of the system (chroot_fs_refs:
	// about 2 ms on a busy host), it costs nothing. Without capabilities
	// (gone before anything foreign runs) there is no way back under it.
	if err := unix.Fchdir(b.view); err != nil {
		return nil, stepErr("chroot", err)
	}
	if err := unix.Chroot("."); err != nil {
		return nil, stepErr("chroot", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return nil, stepErr("chdir /", err)
	}
	return b.rules, nil
}

// root makes the view's root mount and attaches it on top of /.
func (b *viewBuilder) root() error {
	var err error
	switch b.p.Root {
	case policy.AccessRead, policy.AccessWrite:
		b.view, err = unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return stepErr("clone /", err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		access := uint64(llRW)
		if b.p.Root == policy.AccessRead {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
			access = llRO
		}
		if err := unix.MountSetattr(b.view, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return stepErr("root attributes", err)
		}
		b.rules = append(b.rules, landlockRule{"/", access})
	default:
		b.view, err = newTmpfs("tmpfs", map[string]string{"mode": "0755"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
		if err != nil {
			return stepErr("empty root", err)
		}
		for _, d := range []string{"dev", "proc"} {
			if err := unix.Mkdirat(b.view, d, 0o755); err != nil {
				return stepErr("empty root", err)
			}
		}
		for _, d := range platformMinimum {
			var st unix.Stat_t
			if unix.Lstat(d, &st) != nil {
				continue
			}
			name := d[1:]
			if st.Mode&unix.S_IFMT == unix.S_IFLNK { // merged /usr: bin -> usr/bin
				t, err := os.Readlink(d)
				if err != nil {
					return stepErr("minimum "+d, err)
				}
				if err := unix.Symlinkat(t, b.view, name); err != nil {
					return stepErr("minimum "+d, err)
				}
				continue
			}
			if err := unix.Mkdirat(b.view, name, 0o755); err != nil {
				return stepErr("minimum "+d, err)
			}
		}
	}
	if err := unix.MoveMount(b.view, "", unix.AT_FDCWD, "/", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return stepErr("attach the view", err)
	}
	if b.p.Root != policy.AccessNone {
		return nil
	}
	// Binds go onto an attached tree.
	for _, d := range platformMinimum {
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		if err := b.bind(d, policy.Mount{Path: d, Access: policy.AccessRead, Dir: true}); err != nil {
			return stepErr("minimum "+d, err)
		}
	}
	return nil
}

// newTmpfs makes a detached mount of a fresh filesystem.
func newTmpfs(fstype string, opts map[string]string, attrs int) (int, error) {
	fs, err := unix.Fsopen(fstype, unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	for k, v := range opts {
		if v == "" {
			err = unix.FsconfigSetFlag(fs, k)
		} else {
			err = unix.FsconfigSetString(fs, k, v)
		}
		if err != nil {
			return -1, fmt.Errorf("%s option %s: %w", fstype, k, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, attrs)
}

// makeMasks makes the mask sources: f (an empty mode-000 file), d (an
// empty mode-000 directory), p (an empty mode-555 directory), read-only.
func (b *viewBuilder) makeMasks() error {
	var err error
	if b.masks, err = newTmpfs("tmpfs", map[string]string{"mode": "0755", "size": "4k"}, 0); err != nil {
		return err
	}
	fd, err := unix.Openat(b.masks, "f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if err := unix.Fchmodat(b.masks, "f", 0, 0); err != nil {
		return err
	}
	for name, mode := range map[string]uint32{"d": 0, "p": 0o555} {
		if err := unix.Mkdirat(b.masks, name, 0); err != nil {
			return err
		}
		if err := unix.Fchmodat(b.masks, name, mode, 0); err != nil {
			return err
		}
	}
	if err := unix.MountSetattr(b.masks, "", unix.AT_EMPTY_PATH,
		&unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return err
	}
	// Kernels before 6.15 clone only mounts of the caller's namespace, not
	// detached ones: the masks are attached on the view's /dev, which the
	// fresh /dev covers later.
	t, err := b.target("/dev", true)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer unix.Close(t)
	return unix.MoveMount(b.masks, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}

// target opens path (absolute, of the view) as an O_PATH descriptor,
// resolved inside the view.
func (b *viewBuilder) target(path string, follow bool) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT}
	if !follow {
		how.Flags |= unix.O_NOFOLLOW
	}
	rel := strings.TrimPrefix(path, "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(b.view, rel, &how)
}

// makeTarget creates a missing mount point (only possible on the empty
// root's tmpfs) and opens it.
func (b *viewBuilder) makeTarget(path string, dir bool) (int, error) {
	parent := filepath.Dir(path)
	pfd, err := b.target(parent, true)
	if errors.Is(err, unix.ENOENT) && parent != "/" {
		if pfd, err = b.makeTarget(parent, true); err == nil {
			unix.Close(pfd)
			pfd, err = b.target(parent, true)
		}
	}
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	name := filepath.Base(path)
	if dir {
		err = unix.Mkdirat(pfd, name, 0o755)
	} else {
		var fd int
		if fd, err = unix.Openat(pfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644); err == nil {
			unix.Close(fd)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return b.target(path, false)
}

// attach moves the detached mount src onto the view's path.
func (b *viewBuilder) attach(src int, path string, follow, create, dir bool) error {
	defer unix.Close(src)
	t, err := b.target(path, follow)
	if errors.Is(err, unix.ENOENT) && create {
		t, err = b.makeTarget(path, dir)
	}
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	defer unix.Close(t)
	if err := unix.MoveMount(src, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return err
	}
	b.mounted[path] = true
	return nil
}

// pinParents binds every writable directory between path and the mount
// that encloses it onto itself, shallowest first, before path's own mount
// is made. A directory that holds a mount cannot be renamed only if it is
// a mount point itself: otherwise `mv W/a W/c` moves the read-only W/a/b
// or the mask on W/d/secret along, off the path the policy names, and the
// command makes a new W/a/b/x or W/d/secret on the host. Mounts come
// shallowest first, so a directory pinned here holds no mount yet (a
// deeper one pinned its parents already).
func (b *viewBuilder) pinParents(path string) error {
	var dirs []string
	for dir := filepath.Dir(path); !b.mounted[dir] && accessOf(b.p, dir) == policy.AccessWrite; dir = filepath.Dir(dir) {
		dirs = append(dirs, dir)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		t, err := b.target(dirs[i], false)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil // nothing below to move along
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(t, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(t)
			return err // a symlink or a file: no mount below it can be moved along
		}
		fd, err := unix.OpenTree(t, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		unix.Close(t)
		if err != nil {
			return fmt.Errorf("clone %s: %w", dirs[i], err)
		}
		if err := b.attach(fd, dirs[i], false, false, true); err != nil {
			return fmt.Errorf("%s: %w", dirs[i], err)
		}
	}
	return nil
}

// bind mounts the host's src at m.Path with m.Access (read or write).
func (b *viewBuilder) bind(src string, m policy.Mount) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone: %w", err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	access := uint64(llRW)
	if m.Access != policy.AccessWrite {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		access = llRO
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return fmt.Errorf("attributes: %w", err)
	}
	var st unix.Stat_t
	dir := unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := b.attach(fd, m.Path, true, b.p.Root == policy.AccessNone, dir); err != nil {
		return err
	}
	if !m.Protected {
		b.rules = append(b.rules, landlockRule{m.Path, access})
	}
	return nil
}

// mask puts the mask source name (f, d or p) on the view's path, without
// following a symlink there (the link itself is masked).
func (b *viewBuilder) mask(name, path string) error {
	fd, err := unix.OpenTree(b.masks, name, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone mask: %w", err)
	}
	return b.attach(fd, path, false, b.p.Root == policy.AccessNone, name != "f")
}

func (b *viewBuilder) mount(m policy.Mount) error {
	if !filepath.IsAbs(m.Path) || m.Path == "/" || filepath.Clean(m.Path) != m.Path {
		return fmt.Errorf("not an absolute clean path below /")
	}
	var st unix.Stat_t
	err := unix.Lstat(m.Path, &st)
	exists := err == nil
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	isLink := exists && st.Mode&unix.S_IFMT == unix.S_IFLNK
	isDir := exists && st.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case m.Protected && (m.Missing || !exists || isDir && isMountPoint(m.Path)):
		// The server made the mount point on the host (acquireProtected)
		// and holds it; the empty mask hides its marker. If it could not
		// and the parent is writable here, the path could be created from
		// inside: fail closed.
		t, err := b.target(m.Path, false)
		if err == nil {
			unix.Close(t)
			return b.mask("p", m.Path)
		}
		if accessOf(b.p, filepath.Dir(m.Path)) == policy.AccessWrite {
			return fmt.Errorf("protected path missing and its mount point could not be made: %w", err)
		}
		return nil
	case m.Protected && isLink:
		// The link itself, bound read-only over itself: it cannot be
		// removed or replaced (a mount point) and still leads where it
		// did (its target, when protected too, is read-only there).
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return fmt.Errorf("clone the link: %w", err)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("attributes: %w", err)
		}
		return b.attach(fd, m.Path, false, false, false)
	case m.Protected:
		return b.bind(m.Path, policy.Mount{Path: m.Path, Access: policy.AccessRead, Protected: true})
	case !exists:
		return nil // nothing to show or hide
	case m.Access == policy.AccessNone:
		if isDir {
			return b.mask("d", m.Path)
		}
		return b.mask("f", m.Path)
	default:
		return b.bind(m.Path, m)
	}
}

// dev mounts a fresh minimal /dev.
func (b *viewBuilder) dev() error {
	dev, err := newTmpfs("tmpfs", map[string]string{"mode": "0755", "size": "64k", "nr_inodes": "64"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	for _, n := range devNodes {
		fd, err := unix.Openat(dev, n, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	if b.opts.command {
		if err := unix.Mkdirat(dev, "pts", 0o755); err != nil {
			return err
		}
		if err := unix.Mkdirat(dev, "shm", 0o777); err != nil {
			return err
		}
		if err := unix.Fchmodat(dev, "shm", 0o1777, 0); err != nil {
			return err
		}
		if len(b.opts.ptys) == 0 {
			links["ptmx"] = "pts/ptmx"
		}
	}
	for name, t := range links {
		if err := unix.Symlinkat(t, dev, name); err != nil {
			return err
		}
	}
	// Attach /dev first: binds go onto an attached tree.
	t, err := b.target("/dev", true)
	if err != nil {
		return fmt.Errorf("mount point: %w", err)
	}
	err = unix.MoveMount(dev, "", t, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	unix.Close(t)
	if err != nil {
		return err
	}
	bindNode := func(host, in string) error {
		src, err := unix.OpenTree(unix.AT_FDCWD, host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("%s: %w", host, err)
		}
		if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
			unix.Close(src)
			return fmt.Errorf("%s: %w", host, err)
		}
		if err := b.attach(src, in, false, false, false); err != nil {
			return fmt.Errorf("%s: %w", in, err)
		}
		b.rules = append(b.rules, landlockRule{in, llDev})
		return nil
	}
	for _, n := range devNodes {
		if err := bindNode("/dev/"+n, "/dev/"+n); err != nil {
			return err
		}
	}
	if !b.opts.command {
		return nil
	}
	b.rules = append(b.rules, landlockRule{"/dev/shm", llRW})
	if len(b.opts.ptys) > 0 {
		// The server's PTY: only its own slave, under its own name, so
		// that tty(1) and stty work and no other terminal is reachable.
		ptsDir, err := b.target("/dev/pts", false)
		if err != nil {
			return err
		}
		for _, pty := range b.opts.ptys {
			fd, err := unix.Openat(ptsDir, filepath.Base(pty), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err != nil {
				unix.Close(ptsDir)
				return err
			}
			unix.Close(fd)
			if err := bindNode(pty, "/dev/pts/"+filepath.Base(pty)); err != nil {
				unix.Close(ptsDir)
				return err
			}
		}
		unix.Close(ptsDir)
		return nil
	}
	pts, err := newTmpfs("devpts", map[string]string{"newinstance": "", "ptmxmode": "0666", "mode": "0620"}, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := b.attach(pts, "/dev/pts", false, false, true); err != nil {
		return err
	}
	b.rules = append(b.rules, landlockRule{"/dev/pts", llDev | llReadDir})
	return nil
}

// Paths of /proc a process with no capabilities but uid 0 could still
// write or read to the host's harm (sysctls, sysrq, kernel memory).
var (
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	procMasked   = []string{"kcore", "keys", "timer_list"}
)

// proc mounts a fresh procfs (the PID namespace's) with the dangerous
// parts read-only or masked.
func (b *viewBuilder) proc() error {
	proc, err := newTmpfs("proc", nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return err
	}
	if err := b.attach(proc, "/proc", true, false, true); err != nil {
		return err
	}
	for _, n := range procReadOnly {
		src, err := unix.OpenTree(b.view, "proc/"+n, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if err := unix.MountSetattr(src, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
			unix.Close(src)
			return fmt.Errorf("%s: %w", n, err)
		}
		if err := b.attach(src, "/proc/"+n, false, false, false); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	for _, n := range procMasked {
		var st unix.Stat_t
		if unix.Fstatat(b.view, "proc/"+n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if err := b.mask("f", "/proc/"+n); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	b.rules = append(b.rules, landlockRule{"/proc", llRO | llWriteFile | llTruncate})
	return nil
}
