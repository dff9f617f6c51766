package main

import (
	"os"
	"os/exec"
	"testing"
)

// selfCmd is an exec.Cmd whose Process is this test process.
func selfCmd() *exec.Cmd {
	p, _ := os.FindProcess(os.Getpid())
	return &exec.Cmd{Process: p}
}

// The counters read this process's own /proc files: they must move.
func TestProcCountsAndMachineBusy(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io")
	}
	p := &fleetProc{cmd: selfCmd()}
	c0 := procCounts([]*fleetProc{p})
	for range 100 {
		os.ReadFile("/proc/self/stat")
	}
	c1 := procCounts([]*fleetProc{p})
	if c1[0] <= c0[0] {
		t.Fatalf("read syscalls %d -> %d: not counted", c0[0], c1[0])
	}
	if machineBusy() <= 0 {
		t.Fatal("machineBusy is 0")
	}
}
