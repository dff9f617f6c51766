package childinit

import (
	"os"
	"syscall"
	"testing"
)

// BenchmarkStartDirect is the baseline for BenchmarkSpawnerStart: starting
// and waiting for /bin/true directly (the price of the no-orphan guarantee
// per process is the difference).
func BenchmarkStartDirect(b *testing.B) {
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for b.Loop() {
		p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{Files: []*os.File{null, null, null}, Sys: &syscall.SysProcAttr{Setsid: true}})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = p.Wait()
	}
}
