package fswatch

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkWatchLatency measures the time from a file write to its fs/changed
// batch reaching the send callback (ns/op). The window is the floor: a
// change waits for it to close so that a burst coalesces.
func BenchmarkWatchLatency(b *testing.B) {
	for _, window := range []time.Duration{DefaultWindow, time.Millisecond} {
		b.Run("window="+window.String(), func(b *testing.B) {
			dir := b.TempDir()
			ch := make(chan Batch, 16)
			tr := NewTree(Options{Window: window}, func(x Batch) { ch <- x })
			defer tr.Close()
			if err := tr.Watch("w", dir, false); err != nil {
				b.Fatal(err)
			}
			p := filepath.Join(dir, "f")
			b.ResetTimer()
			for i := range b.N {
				if err := os.WriteFile(p, []byte(strconv.Itoa(i)), 0o644); err != nil {
					b.Fatal(err)
				}
				<-ch
			}
		})
	}
}

// vmRSS reads this process's resident set size in bytes.
func vmRSS(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	tb.Skip("no VmRSS")
	return 0
}

// BenchmarkWatch10kDirs watches a tree of 10 000 directories recursively and
// reports the server's memory for it: rss-MB is the growth of this process's
// RSS, heap-B/dir the Go heap per watched directory. The kernel's own
// inotify memory (about 1 KiB per watch) is not in either.
func BenchmarkWatch10kDirs(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	for i := range n {
		if err := os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%03d/e%02d", i/100, i%100)), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		rss := vmRSS(b)
		tr := NewTree(Options{}, func(Batch) {})
		if err := tr.Watch("w", dir, true); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		grown := vmRSS(b) - rss
		if _, dirs := tr.Len(); dirs != n+n/100+1 {
			b.Fatalf("watching %d directories, want %d", dirs, n+n/100+1)
		}
		b.ReportMetric(float64(grown)/(1<<20), "rss-MB")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n+n/100+1), "heap-B/dir")
		tr.Close()
	}
}
