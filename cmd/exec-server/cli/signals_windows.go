package cli

import "os"

// Windows has no SIGWINCH: the remote terminal keeps its first size.
var resizeSignals []os.Signal

func isResize(os.Signal) bool { return false }
