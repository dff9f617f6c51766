// Package hostile holds no code, only the hostile-client test suite: it
// builds cmd/exec-server, runs it as a separate process, and attacks it the
// way a broken or malicious client would (request floods, half-open and
// slowloris connections, thousands of abandoned processes, a client that
// never reads, SIGKILL of the server itself) while a well-behaved client
// measures that the server stays responsive, bounded in memory, and leaves
// no process behind.
//
// The default run takes 1-1.5 minutes under -race on 2 shared cores; the
// tests that mostly wait run in parallel. HOSTILE_FULL=1 runs the heavier
// variants (more connections, more processes, longer holds).
package hostile
