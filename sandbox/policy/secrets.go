package policy

import (
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"syscall"
)

// Server secrets: the files and directories of the server itself (its token
// and JWT secret files, its TLS key, its state directory, every file an
// EXEC_SERVER_*_FILE setting names) that no sandbox may read, whatever its
// policy says. Under codex's full-disk read a sandboxed command could
// otherwise read the token file and drive the server itself. Resolve masks
// them in every plan (an empty mode-000 file or directory in the view);
// code that reads in the server itself (fs methods under full-disk read, or
// with no policy) checks what it opened against Secret, by identity, so no
// symlink or hard link to one escapes.

// secretSet is one SetServerSecrets call's result.
type secretSet struct {
	paths []string          // canonical, existing, sorted
	ids   map[fileID]string // identity -> path, regular files only
}

type fileID struct{ dev, ino uint64 }

var serverSecrets atomic.Pointer[secretSet]

// SetServerSecrets records the server's secret paths (replacing any earlier
// set): each is made absolute and canonical; a path that does not exist is
// left out (it has nothing to hide; a file made there later is not
// covered). Call it once the files are read, and again when they change
// (a token reload).
func SetServerSecrets(paths ...string) {
	s := &secretSet{ids: map[fileID]string{}}
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		for _, c := range []string{abs, canonicalOr(abs)} {
			var st syscall.Stat_t
			if seen[c] || syscall.Lstat(c, &st) != nil || st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
				continue
			}
			seen[c] = true
			s.paths = append(s.paths, c)
			if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				s.ids[fileID{uint64(st.Dev), st.Ino}] = c
			}
		}
	}
	sort.Strings(s.paths)
	serverSecrets.Store(s)
}

func canonicalOr(p string) string {
	if c, err := filepath.EvalSymlinks(p); err == nil {
		return c
	}
	return p
}

// ServerSecrets returns the recorded secret paths.
func ServerSecrets() []string {
	if s := serverSecrets.Load(); s != nil {
		return append([]string(nil), s.paths...)
	}
	return nil
}

// Secret reports the secret path of the regular file st describes (by
// device and inode), or "" when it is none of the server's secrets.
func Secret(st *syscall.Stat_t) string {
	s := serverSecrets.Load()
	if s == nil || len(s.ids) == 0 {
		return ""
	}
	return s.ids[fileID{uint64(st.Dev), st.Ino}]
}

// maskSecrets adds to plan a deny mount on every secret path the view would
// show: a path already invisible (an empty root, a deny entry) needs no
// mask, and a mask there would need a mount point the view lacks.
func maskSecrets(plan *Plan, secrets []string) {
	added := false
	for _, p := range secrets {
		if !visible(plan, p) {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		plan.Mounts = append(plan.Mounts, Mount{Path: p, Access: AccessNone, Dir: fi.IsDir()})
		added = true
	}
	if added {
		SortMounts(plan.Mounts)
	}
}

// visible reports whether host path p shows in plan's view: as AccessAt,
// with the platform minimum an empty root still shows.
func visible(plan *Plan, p string) bool {
	if plan.DeniedByGlob(p) {
		return false
	}
	acc, best := plan.Root, -1
	if acc == AccessNone {
		for _, d := range minimalPaths {
			if p == d || Within(p, d) {
				acc = AccessRead
			}
		}
	}
	for _, m := range plan.Mounts {
		if m.Missing && !m.Protected {
			continue
		}
		if (p == m.Path || Within(p, m.Path)) && depth(m.Path) > best {
			acc, best = m.Access, depth(m.Path)
			if m.Protected {
				acc = AccessRead
			}
		}
	}
	return acc != AccessNone
}
