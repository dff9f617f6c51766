package sandbox

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A server killed while a sandbox used the mount point of a missing
// protected path (W/.codex) never removes it: the empty directory stays on
// the host. Each mount point a server makes is therefore recorded in a
// registry, one small file per path naming the path and the server's pid,
// dropped when the mount point is removed. CleanStale, run when a server
// starts, removes what a dead server left: only directories an exec-server
// made (the marker), holding nothing else, that no server holds (the
// flock), whose recording server is gone and that no process has as a
// mount point (a sandbox still running would lose its mask: rmdir lazily
// unmounts it in other namespaces).

// registryDir is where the records go: $EXEC_SERVER_SANDBOX_STATE_DIR, or
// the user's cache directory; "" when there is none.
func registryDir() string {
	if d := os.Getenv(StateDirEnv); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "exec-server", "mount-points")
}

func recordName(dir, path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(dir, hex.EncodeToString(sum[:16]))
}

// recordMountPoint notes that this server made path. Best effort: a
// registry that cannot be written only loses the clean-up after a crash.
func recordMountPoint(path string) {
	dir := registryDir()
	if dir == "" || os.MkdirAll(dir, 0o700) != nil {
		return
	}
	name := recordName(dir, path)
	tmp := name + ".tmp" + strconv.Itoa(os.Getpid())
	if os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"+path+"\n"), 0o600) == nil {
		if os.Rename(tmp, name) != nil {
			os.Remove(tmp)
		}
	}
}

// forgetMountPoint drops path's record.
func forgetMountPoint(path string) {
	if dir := registryDir(); dir != "" {
		os.Remove(recordName(dir, path))
	}
}

// parseRecord reads a record: the recording server's pid and the path.
func parseRecord(b []byte) (pid int, path string, ok bool) {
	line, rest, found := bytes.Cut(b, []byte("\n"))
	if !found {
		return 0, "", false
	}
	pid, err := strconv.Atoi(string(line))
	path = strings.TrimSuffix(string(rest), "\n")
	if err != nil || pid <= 0 || !filepath.IsAbs(path) || filepath.Clean(path) != path || !isProtectedName(path) {
		return 0, "", false
	}
	return pid, path, true
}

// alive reports whether a process with pid exists (it may be another
// process by now: then the record waits for it to end).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// CleanStale removes the mount points of missing protected paths that
// servers which did not exit cleanly left on the host (see above), and
// returns them. Records of live servers, of held or non-empty mount
// points, and of mount points still mounted somewhere are kept.
func CleanStale() []string {
	dir := registryDir()
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var mounted map[string]bool
	var removed []string
	for _, e := range entries {
		name := filepath.Join(dir, e.Name())
		if strings.Contains(e.Name(), ".tmp") {
			// A record being written, or one a crash cut short.
			if pid, err := strconv.Atoi(e.Name()[strings.LastIndex(e.Name(), ".tmp")+4:]); err == nil && !alive(pid) {
				os.Remove(name)
			}
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		pid, path, ok := parseRecord(b)
		if !ok {
			os.Remove(name) // not a record of ours
			continue
		}
		if pid == os.Getpid() || alive(pid) {
			continue
		}
		if !exists(path) {
			os.Remove(name)
			continue
		}
		if mounted == nil {
			mounted = mountPoints()
		}
		if mounted[path] {
			continue // a sandbox of the dead server still runs
		}
		protMu.Lock()
		if protReg[path] == nil && isMountPoint(path) && removeMountPoint(path) {
			if !exists(path) {
				removed = append(removed, path)
			}
			os.Remove(name)
		} else if !isMountPoint(path) {
			os.Remove(name) // a real directory now (the user's): not ours to touch
		}
		protMu.Unlock()
	}
	return removed
}

// mountPoints returns every mount point of every process this server can
// see, as paths in that process's view (a sandbox's view keeps host paths).
func mountPoints() map[string]bool {
	out := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			// ID parent major:minor root mount-point ...
			fields := strings.SplitN(sc.Text(), " ", 6)
			if len(fields) >= 5 {
				out[unescapeMountinfo(fields[4])] = true
			}
		}
		f.Close()
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
