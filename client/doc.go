// Package client is the Go SDK of the exec-server: it runs processes and
// touches files on the machine where a server runs, as os/exec and os do
// locally.
//
// Connect with Dial (websocket, "ws://" or "wss://"), DialStdio (a server
// started as a child process speaking on its stdin and stdout) or
// NewClient, whose Dialer returns any jsonrpc.Stream (the streams of
// package transport, or another carrier) and is called again to
// reconnect. The initialize handshake happens inside. The connection is a
// jsonrpc.Conn, the same as the server's.
//
//	c, err := client.Dial(ctx, "ws://127.0.0.1:8765", client.Options{Token: token})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	p, err := c.Start(ctx, client.Cmd{Argv: []string{"make", "test"}, Cwd: "/src/app", Stdout: os.Stdout, Stderr: os.Stderr})
//	if err != nil {
//		return err
//	}
//	code, err := p.Wait(ctx)
//
// # Processes
//
// Start returns a *Process: its output is read from Stdout and Stderr (one
// stream, Output, for a TTY) or copied to Cmd.Stdout and Cmd.Stderr; its
// input is copied from Cmd.Stdin (an io.Reader, as with os/exec; its end
// closes the process's stdin) or, with Cmd.StdinPipe, written as it comes
// with Write or Stdin; Signal, Terminate, Resize and Wait control it;
// Exited is closed as soon as the exit status is known. As with
// exec.CommandContext, the end of the context given to Start (not only
// Wait's) terminates the process. Output arrives from the events the
// server pushes, ordered by their sequence numbers; when they are complete and in order nothing else
// is asked (no process/read at all). A gap in the sequence, a reader that
// fell behind, or a server that omits sandboxDenied is repaired with
// process/read, fetching exactly what is missing. See Process for how
// memory stays bounded when a reader stops reading.
//
// # Reconnecting
//
// When a websocket connection (or one made by NewClient's Dialer) drops,
// the Client redials with back-off,
// resumes its session (initialize with resumeSessionId) and fetches what
// each process produced meanwhile; readers and Wait do not notice.
// Idempotent requests in flight are repeated on the new connection; stdin
// writes carry a writeId, so a repeat never writes twice. Requests that are
// not safe to repeat (Signal) fail with ErrConnectionLost instead. If the
// server cannot be reached within Options.ReconnectTimeout, or no longer
// knows the session, everything fails with ErrConnectionLost or
// ErrSessionLost. Over stdio there is nothing to redial: a lost connection
// is final. Options.OnStateChange reports each of these transitions.
//
// # Sessions
//
// A websocket session outlives its connection for the server's session
// TTL. Client.Detach closes the connection and leaves the session's
// processes running (Close terminates them); Options.ResumeSession, set to
// a SessionID, attaches a new Client to that session (ListProcesses and
// ReadProcess then reach its processes by id).
//
// # Files
//
// Paths are absolute paths on the server. ReadFile, WriteFile, Stat,
// ReadDir, Walk, Remove, RemoveAll, Mkdir, MkdirAll, Copy and Canonicalize
// map to the fs/* methods. Open and Create return a *File, an io.ReaderAt
// or io.WriterAt over fs/readBlock and fs/writeBlock; Upload and Download
// stream whole files through blocks with a few in flight, never holding a
// file in memory.
//
// # Errors
//
// Errors the server returns are *Error (an alias of protocol.Error) with the
// wire code and message: use errors.As.
package client
