package main

// The machine's own limit for each workload: the same work done directly
// with os/exec, pipes, a raw PTY and plain file I/O, no server and no
// JSON-RPC. Each returns the median in the workload's unit.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/creack/pty"
)

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return quantile(xs, 0.5)
}

func limitSpawn(cfg *config) (float64, error) {
	var xs []float64
	for range min(cfg.spawnN, 200) {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			return 0, err
		}
		xs = append(xs, ms(time.Since(t0)))
	}
	return median(xs), nil
}

func limitConcurrent(cfg *config) (float64, error) {
	n := cfg.concConns * cfg.concProcs
	var wg sync.WaitGroup
	errs := make(chan error, n)
	t0 := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := exec.Command("/bin/true").Run(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(n) / el.Seconds(), nil
}

func limitStream(cfg *config) (float64, error) {
	cmd := exec.Command("head", "-c", fmt.Sprint(cfg.streamBytes), "/dev/zero")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	buf := make([]byte, 64<<10)
	var total int64
	for {
		n, err := out.Read(buf)
		total += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, err
	}
	if total != cfg.streamBytes {
		return 0, fmt.Errorf("read %d bytes, want %d", total, cfg.streamBytes)
	}
	return float64(total) / time.Since(t0).Seconds() / 1e6, nil
}

func limitTTY(cfg *config) (float64, error) {
	cmd := exec.Command("sh", "-c", "stty raw -echo; echo ready; exec cat")
	f, err := pty.Start(cmd)
	if err != nil {
		return 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
	}()
	var seen []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(seen, []byte("ready\n")) {
		n, err := f.Read(buf)
		if err != nil {
			return 0, err
		}
		seen = append(seen, buf[:n]...)
	}
	var xs []float64
	for range cfg.ttyN {
		t0 := time.Now()
		if _, err := f.Write([]byte("x")); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(f, buf[:1]); err != nil {
			return 0, err
		}
		xs = append(xs, ms(time.Since(t0)))
	}
	return median(xs), nil
}

func limitReadFile(cfg *config) (float64, error) {
	path := filepath.Join(cfg.dir, "limit-read.bin")
	data := make([]byte, cfg.fsFileBytes)
	_, _ = rand.Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return 0, err
	}
	defer os.Remove(path)
	var xs []float64
	for range cfg.fsRuns {
		t0 := time.Now()
		b, err := os.ReadFile(path)
		if err != nil || len(b) != len(data) {
			return 0, fmt.Errorf("read %d bytes: %v", len(b), err)
		}
		xs = append(xs, float64(len(b))/time.Since(t0).Seconds()/1e6)
	}
	return median(xs), nil
}

func limitWriteFile(cfg *config) (float64, error) {
	path := filepath.Join(cfg.dir, "limit-write.bin")
	data := make([]byte, cfg.fsWriteBytes)
	_, _ = rand.Read(data)
	defer os.Remove(path)
	var xs []float64
	for range cfg.fsRuns {
		_ = os.Remove(path)
		t0 := time.Now()
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return 0, err
		}
		xs = append(xs, float64(len(data))/time.Since(t0).Seconds()/1e6)
	}
	return median(xs), nil
}

func limitReadBlocks(cfg *config) (float64, error) {
	path := filepath.Join(cfg.dir, "limit-blocks.bin")
	if err := writeZeros(path, cfg.blockBytes); err != nil {
		return 0, err
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, blockLen)
	t0 := time.Now()
	var total int64
	for off := int64(0); off < cfg.blockBytes; off += blockLen {
		n, err := f.ReadAt(buf, off)
		total += int64(n)
		if err != nil && err != io.EOF {
			return 0, err
		}
	}
	return float64(total) / time.Since(t0).Seconds() / 1e6, nil
}

func limitWriteBlocks(cfg *config) (float64, error) {
	path := filepath.Join(cfg.dir, "limit-blocks-w.bin")
	defer os.Remove(path)
	buf := make([]byte, blockLen)
	_, _ = rand.Read(buf)
	t0 := time.Now()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	for off := int64(0); off < cfg.blockBytes; off += blockLen {
		if _, err := f.WriteAt(buf, off); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return float64(cfg.blockBytes) / time.Since(t0).Seconds() / 1e6, nil
}
