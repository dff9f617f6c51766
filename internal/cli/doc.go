// Package cli implements the client subcommands of the exec-server binary:
// exec, cp, ls, cat and ps. They talk to a running exec-server over a websocket
// with the client package.
//
// # Connecting
//
// Every subcommand takes the same connection flags:
//
//	--url ws://HOST:PORT      the server (or wss://...); default $EXEC_SERVER_URL
//	--token TOKEN             sent as "Authorization: Bearer TOKEN" on the upgrade;
//	                          default $EXEC_SERVER_TOKEN
//	--token-file PATH         read the token from PATH (surrounding space trimmed)
//	--ca-file PATH            also trust the PEM certificates in PATH (wss://)
//	--connect-timeout D       how long to try to connect (default 10s)
//
// # exec
//
//	exec-server exec [flags] [--] CMD [ARG...]
//
// runs CMD on the server with this terminal's stdout and stderr, and exits
// with CMD's exit code (128+N when a signal N killed it). Flags:
//
//	-i                 forward stdin (end of input closes the remote stdin
//	                   where the server supports it)
//	-t                 run CMD on a pseudo-terminal; with a local terminal,
//	                   its window size is forwarded and follows resizes
//	-it, -ti           both: an interactive terminal session; the local
//	                   terminal is put in raw mode, so Ctrl-C, Ctrl-D and
//	                   Ctrl-Z reach the remote program as keystrokes
//	-e K=V             set an environment variable (repeatable)
//	--env-inherit M    start from the server's environment: all (default),
//	                   core or none; variables named like *KEY*, *SECRET*,
//	                   *TOKEN* are never inherited
//	--cwd DIR          working directory on the server (absolute)
//	--timeout D        the server kills CMD's whole tree after D (a Go
//	                   duration: 90s, 5m; at most 7 days); exec then says so
//	                   on stderr and exits with 124, as timeout(1). A server
//	                   without the processTimeout capability refuses it
//	                   (exit 1) rather than run CMD without a limit
//
// Without -t, Ctrl-C (SIGINT) is forwarded to the remote process as an
// interrupt. SIGTERM and SIGHUP are forwarded as themselves (a server that
// cannot deliver them kills the remote process instead). When exec's own stdout
// closes (exec ... | head -1), the remote process is terminated and exec
// exits with 141, as a pipeline member killed by SIGPIPE would. Exit codes
// of exec itself: 2 for a usage error, 126 when CMD is not executable, 127
// when it (or --cwd) is not found, 255 when the server cannot be reached,
// the connection is lost for good, or part of the output was lost (stderr
// says which; a non-zero code is never hidden behind lost output).
//
// Over a websocket a dropped connection is resumed transparently: the
// output continues where it stopped, nothing lost or repeated.
//
// # Remote paths: cp, ls, cat
//
// A remote path is an absolute path on the server written with a leading
// colon, ":/abs/path"; the server is the one named by --url. Any other
// argument of cp is a local path ("-" is stdin or stdout); a local file
// whose name starts with a colon can be written "./:name". ls and cat take
// only remote paths, so for them the colon is optional.
//
//	exec-server cp [-r] [-q] SRC... DST
//
// copies local to remote, remote to local, or remote to remote (on the
// server). With several sources, or when DST is an existing directory or
// ends in "/", each source is copied into DST under its base name. -r
// copies directories. Large transfers stream in 1 MiB blocks, a few in
// flight, never whole in memory; on a terminal a progress bar shows on
// stderr for files over 1 MiB (-q hides it).
//
//	exec-server ls [-l] [-a] [:/DIR...]
//
// lists directories (default: the server's working directory), sorted;
// directories end in "/". -a includes names starting with a dot; -l shows
// size and modification time (UTC).
//
//	exec-server cat :/FILE...
//
// writes remote files to stdout in blocks.
//
// # ps
//
//	exec-server ps --session ID
//
// lists the processes of a session (process/list, this server's
// extension) as a table: id, pid, state (starting, running, exited,
// closed), whether it has a terminal, start time (UTC), exit code and
// command. Processes belong to the session that started them, so ps
// resumes that session: it must be detached (its websocket connection
// gone, within the server's session TTL), and ps leaves it detached again.
// --session defaults to $EXEC_SERVER_SESSION.
//
// Errors are one line on stderr, "exec-server SUBCOMMAND: ...", with exit
// code 1 (2 for usage errors).
package cli
