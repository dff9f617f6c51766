package childinit

import (
	"os"
	"syscall"
	"testing"
)

// BenchmarkStartDirect and BenchmarkStartInit compare the cost of starting
// and waiting for /bin/true directly and under an init (the price of the
// no-orphan guarantee per process).
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

func BenchmarkStartInit(b *testing.B) {
	for b.Loop() {
		p, ctl, err := start("/bin/true", []string{"true"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = ctl.Wait()
		_, _ = p.Wait()
		ctl.Close()
	}
}
