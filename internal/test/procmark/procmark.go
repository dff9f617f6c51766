// Package procmark finds a test's processes, descendants included, by a
// mark in their environment: a child inherits it through any number of
// forks, so /proc tells which processes a test started. Test-only.
package procmark

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
)

// New returns a fresh random mark beginning with prefix.
func New(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// PIDs lists the live (non-zombie) processes whose environment holds
// name=mark.
func PIDs(name, mark string) []int {
	needle := []byte(name + "=" + mark + "\x00")
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append(env, 0), needle) {
			continue
		}
		if State(pid) == 'Z' {
			continue // dead, waiting for a reaper: not a survivor
		}
		out = append(out, pid)
	}
	return out
}

// State returns the process state letter from /proc/PID/stat, or 0.
func State(pid int) byte {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}
