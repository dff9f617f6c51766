package procmark

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A marked child and its marked grandchild are found; once killed and
// reaped they are not, and an unmarked process never is.
func TestPIDs(t *testing.T) {
	mark := New("procmark-")
	if !strings.HasPrefix(mark, "procmark-") || mark == New("procmark-") {
		t.Fatalf("marks %q are not fresh", mark)
	}
	cmd := exec.Command("sh", "-c", "sleep 100 & wait")
	cmd.Env = append(os.Environ(), "PROCMARK_TEST="+mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "100")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	var pids []int
	for range 500 {
		if pids = PIDs("PROCMARK_TEST", mark); len(pids) == 2 {
			break
		}
		exec.Command("sleep", "0.01").Run()
	}
	if len(pids) != 2 || !slices.Contains(pids, cmd.Process.Pid) || slices.Contains(pids, other.Process.Pid) {
		t.Fatalf("PIDs = %v, want the shell %d and its sleep, not %d", pids, cmd.Process.Pid, other.Process.Pid)
	}
	if s := State(cmd.Process.Pid); s != 'S' && s != 'R' {
		t.Errorf("State of the waiting shell = %q", s)
	}
	for _, p := range pids {
		_ = exec.Command("kill", "-9", strconv.Itoa(p)).Run()
	}
	_ = cmd.Wait()
	for range 500 {
		if len(PIDs("PROCMARK_TEST", mark)) == 0 {
			return
		}
		exec.Command("sleep", "0.01").Run()
	}
	t.Errorf("killed processes still found: %v", PIDs("PROCMARK_TEST", mark))
}
