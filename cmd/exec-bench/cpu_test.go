package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProcessCPUClock: the clock id built for a pid is the one the kernel
// gives the calling process (CLOCK_PROCESS_CPUTIME_ID): read between two
// readings of it, it lies between them.
func TestProcessCPUClock(t *testing.T) {
	read := func(id int32) time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			t.Fatalf("clock %d: %v", id, err)
		}
		return time.Duration(ts.Nano())
	}
	for range 1000 { // some CPU time, so that the readings are not all zero
		_ = os.Getpid()
	}
	a := read(unix.CLOCK_PROCESS_CPUTIME_ID)
	b := read(processCPUClock(os.Getpid()))
	c := read(unix.CLOCK_PROCESS_CPUTIME_ID)
	if b < a || b > c || a == 0 {
		t.Fatalf("process clock %v not within %v..%v", b, a, c)
	}
}

// TestCPUSecondsChild: another process's CPU time is read with the precise
// clock and agrees with /proc/PID/stat's ticks.
func TestCPUSecondsChild(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	for statCPUSeconds(pid) < 0.05 {
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Signal(unix.SIGSTOP) // CPU time stands still now
	time.Sleep(50 * time.Millisecond)
	var ts unix.Timespec
	if err := unix.ClockGettime(processCPUClock(pid), &ts); err != nil {
		t.Fatalf("the child's CPU clock: %v", err)
	}
	got, ticks := cpuSeconds(pid), statCPUSeconds(pid)
	// stat scales its ticks to the same total; they differ by rounding.
	if got < 0.05 || got < ticks-0.02 || got > ticks+0.02 {
		t.Fatalf("cpuSeconds = %.4f s, /proc/%d/stat says %.2f s", got, pid, ticks)
	}
	if cpuSeconds(0) != 0 {
		t.Fatal("cpuSeconds(0) (a stdio server not started yet) is not 0")
	}
}
