//go:build !unix

package testbin

import "os"

// The server and its tests run on Linux; elsewhere the tests that need the
// binary only have to compile, so builds are not serialized.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) {}
