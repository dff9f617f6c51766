package secretenv

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// scrubBlock overwrites, in this process's initial environment block (the
// memory between env_start and env_end of /proc/self/stat, which
// /proc/PID/environ reads), every "NAME=value" entry of names with NUL
// bytes. It writes through /proc/self/mem, which a process may always do to
// itself, so it needs no privilege (prctl(PR_SET_MM_ENV_*) would need
// CAP_SYS_RESOURCE). Entries keep their place: other variables' strings,
// which the Go runtime still points into, do not move.
func scrubBlock(names []string) error {
	start, end, err := envBounds()
	if err != nil {
		return err
	}
	if end <= start || end-start > 64<<20 {
		return fmt.Errorf("secretenv: implausible environment block %#x-%#x", start, end)
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("secretenv: %w", err)
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if _, err := mem.ReadAt(block, int64(start)); err != nil {
		return fmt.Errorf("secretenv: reading the environment block: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for off := 0; off < len(block); {
		n := bytes.IndexByte(block[off:], 0)
		if n < 0 {
			n = len(block) - off
		}
		entry := block[off : off+n]
		if name, _, ok := bytes.Cut(entry, []byte("=")); ok && want[string(name)] {
			if _, err := mem.WriteAt(make([]byte, n), int64(start)+int64(off)); err != nil {
				return fmt.Errorf("secretenv: overwriting %s: %w", name, err)
			}
		}
		off += n + 1
	}
	return nil
}

// envBounds reads env_start and env_end (fields 50 and 51) of
// /proc/self/stat.
func envBounds() (start, end uint64, err error) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after its last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("secretenv: unreadable /proc/self/stat")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3.
	if len(f) < 51-2 {
		return 0, 0, fmt.Errorf("secretenv: /proc/self/stat has no env_start/env_end (kernel older than 3.5)")
	}
	if start, err = strconv.ParseUint(f[50-3], 10, 64); err == nil {
		end, err = strconv.ParseUint(f[51-3], 10, 64)
	}
	return start, end, err
}
