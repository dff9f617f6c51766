package childinit

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgo/exec-server/internal/reexec"
	"github.com/execgo/exec-server/internal/test/procmark"
	"github.com/execgo/exec-server/internal/test/testbin"
)

// The test binary is also the init (StartSpawner re-executes
// os.Executable) and, with CHILDINIT_FAKE_SERVER and CHILDINIT_FAKE_SPAWNER
// set, a stand-in server that starts the given shell commands under a
// spawner and then waits to be killed.
func TestMain(m *testing.M) {
	reexec.Main()
	if cmds := os.Getenv("CHILDINIT_FAKE_SERVER"); cmds != "" {
		fakeServer(strings.Split(cmds, "\n"))
		return
	}
	testbin.Run(m)
}

func fakeServer(cmds []string) {
	if os.Getenv("CHILDINIT_FAKE_SPAWNER") != "" {
		s, err := StartSpawner()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		null, _ := os.Open(os.DevNull)
		for _, c := range cmds {
			if _, _, err := s.Start(SpawnAttr{Path: "/bin/sh", Argv: []string{"sh", "-c", c}, Env: os.Environ(), Setsid: true, Pdeathsig: true}, [3]*os.File{null, null, null}); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return
	}
	fmt.Println("error: CHILDINIT_FAKE_SERVER needs CHILDINIT_FAKE_SPAWNER")
	os.Exit(1)
}

func marker() string { return procmark.New("childinit-") }

// marked lists live, non-zombie processes whose environment holds
// CHILDINIT_MARK=mark.
func marked(mark string) []int { return procmark.PIDs("CHILDINIT_MARK", mark) }

func waitCount(mark string, cond func(int) bool, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		pids := marked(mark)
		if cond(len(pids)) || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killAll(mark string) {
	for _, p := range marked(mark) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// trees: a plain child, a background grandchild, a grandchild in its own
// session, a double-forked daemon. 7 processes in all.
const trees = "exec sleep 1000\nsleep 1000 & wait\nsetsid sleep 1000 & wait\n(sleep 1000 &); exec sleep 1000"
const treeProcs = 7
