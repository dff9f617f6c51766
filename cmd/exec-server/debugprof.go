package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// startDebugProfile starts a CPU profile of the server into
// DIR/cpu.pprof and returns the function that stops it and writes the
// allocation profile (every allocation since start) to DIR/allocs.pprof.
// It is for performance work (cmd/exec-bench --server-pprof sets
// EXEC_SERVER_DEBUG_PROFILE per server it starts), not for production:
// nothing else reads the files.
func startDebugProfile(dir string) (stop func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		a, err := os.Create(filepath.Join(dir, "allocs.pprof"))
		if err != nil {
			return
		}
		defer a.Close()
		runtime.GC()
		if err := pprof.Lookup("allocs").WriteTo(a, 0); err != nil {
			fmt.Fprintf(os.Stderr, "exec-server: allocation profile: %v\n", err)
		}
	}, nil
}
