package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

// Under -race, concurrent writes and reads are the test.
func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { fmt.Fprintf(&b, "%d", i); _ = b.String() })
	}
	wg.Wait()
	if n := len(b.String()); n != 8 {
		t.Fatalf("%d bytes, want 8", n)
	}
}
