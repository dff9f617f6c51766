// Package testbin builds cmd/exec-server once for all the test packages
// that run it as a separate process (interop, hostile, the SDK's tests...).
// `go test ./...` runs each package's tests in its own process, so the
// build is shared through a file: the binary is named after a hash of the
// module's non-test Go sources, go.mod and go.sum, and the first package to
// need it builds it under a lock while the others wait and reuse it.
package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

var (
	once sync.Once
	path string
	err  error
)

// ExecServer returns the path of an exec-server built from the module's
// current sources.
func ExecServer() (string, error) {
	once.Do(func() { path, err = build() })
	return path, err
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	sum, err := sourceHash(root)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "exec-server-testbin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Built as shipped (.ci/run, Dockerfile): without cgo, whose threads
	// the sandbox could not all strip of capabilities.
	bin := filepath.Join(dir, "exec-server-"+sum+"-nocgo")
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	// Held while building: the other packages' test processes wait here,
	// then find the binary.
	if err := lockFile(lock); err != nil {
		return "", err
	}
	defer unlockFile(lock)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp := bin + ".tmp"
	cmd := exec.Command("go", "build", "-o", tmp, "./cmd/exec-server")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/exec-server: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	removeStale(dir, bin)
	return bin, nil
}

// moduleRoot finds go.mod from the working directory (a package's dir
// under go test) upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testbin: no go.mod above the working directory")
		}
		dir = parent
	}
}

// sourceHash hashes what the binary is built from: every non-test .go
// file of the module (path and content), go.mod and go.sum.
func sourceHash(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) && name != "go.mod" && name != "go.sum" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "%s %s\n", runtime.Version(), os.Getenv("GOFLAGS"))
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// removeStale removes binaries of other sources not used for a day.
func removeStale(dir, keep string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == keep || p == keep+".lock" {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			_ = os.Remove(p)
		}
	}
}
