// Package cli implements the client subcommands of the exec-server binary:
// exec, cp, ls, cat, ps, watch, rm, mkdir, mv, attach, kill, context,
// completion and man. They talk to a running exec-server over a websocket
// with the client package.
//
// # Flags
//
// Flags are GNU-style, as kubectl's and docker's: short flags combine
// (-it, -la), long ones take their value after a space or "=" (--env K=V,
// --env=K=V), and the single-dash long spellings of earlier versions
// (-url, -cwd) still work. For exec, flags end at the command (or at --):
// everything after it is the command's, as with docker exec.
//
// # Connecting
//
// Every subcommand takes the same connection flags:
//
//	--url ws://HOST:PORT      the server (or wss://...); default $EXEC_SERVER_URL
//	--token TOKEN             sent as "Authorization: Bearer TOKEN" on the upgrade;
//	                          default $EXEC_SERVER_TOKEN (never shown by -h)
//	--token-file PATH         read the token from PATH (surrounding space trimmed)
//	--ca-file PATH            also trust the PEM certificates in PATH (wss://)
//	--connect-timeout D       how long to try to connect (default 10s)
//	--reconnect-timeout D     how long to try to resume the session after the
//	                          connection drops (default 60s)
//
// Or, instead of --url, an executor in remote mode (`exec-server --remote`,
// or codex's) through its environment registry, end-to-end encrypted:
//
//	--remote URL              the registry (exec-relay, or codex's service)
//	--environment-id ID       default $CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID
//
// with the registry token from --token, --token-file or
// $CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN ($EXEC_SERVER_TOKEN is not used).
//
// A dropped websocket connection is resumed transparently: the output
// continues where it stopped, nothing lost or repeated. stderr says
// "connection lost (WHY); reconnecting…" and then "reconnected". When the
// server that answers no longer knows the session (it restarted, or the
// session expired) exec stops at once, saying so, with 255.
//
// # exec
//
//	exec-server exec [flags] CMD [ARG...]
//
// runs CMD on the server with this terminal's stdout and stderr, and exits
// with CMD's exit code (128+N when a signal N killed it). Flags:
//
//	-i, --interactive     forward stdin (end of input closes the remote stdin
//	                      where the server supports it)
//	-t, --tty             run CMD on a pseudo-terminal; with a local terminal,
//	                      its window size is forwarded and follows resizes.
//	                      A warning says when stdin is not a terminal
//	-it                   both: an interactive terminal session (below)
//	-e, --env K=V         set an environment variable (repeatable); a bare K
//	                      passes this side's value of K, if set
//	--env-file FILE       K=V lines, as docker's: # comments, blank lines,
//	                      values verbatim, a bare K as for -e; -e wins
//	--env-inherit M       start from the server's environment: all (default),
//	                      core or none; variables named like *KEY*, *SECRET*,
//	                      *TOKEN* are never inherited
//	-w, --workdir DIR     working directory on the server (absolute; --cwd
//	                      is the old spelling)
//	--timeout D           the server kills CMD's whole tree after D (a Go
//	                      duration: 90s, 5m; at most 7 days); exec then says
//	                      so on stderr and exits with 124, as timeout(1). A
//	                      server without the processTimeout capability
//	                      refuses it (exit 1) rather than run CMD unlimited
//	--detach-keys KEYS    the -it detach sequence, docker's notation
//	                      (default ctrl-p,ctrl-q; "" for none)
//	--sandbox MODE        confine CMD with the server's kernel sandbox:
//	                      read-only or workspace-write, the policies codex
//	                      sends; a denial is named on stderr
//	--writable DIR        with workspace-write, DIR is writable too
//	--network             with --sandbox, allow network access
//
// Without -t, the first Ctrl-C (Ctrl-\) is forwarded and a second one ends
// exec with 130 (131) even when a background job holds the output open;
// SIGTERM and SIGHUP are forwarded and end exec with 143 and 129. A server
// that restarted (it no longer knows the session) ends exec at once; one
// that refuses connections for 5 s ends it too, unless --reconnect-timeout
// is given.
//
// With -it on a local terminal, the terminal is in raw mode while CMD
// runs: Ctrl-C, Ctrl-D, Ctrl-Z and Ctrl-\ are keystrokes for the remote
// program. The terminal is read until the remote side is done, so nothing
// typed is left over for the local shell. When CMD has exited but
// something it left behind (a background job) keeps its terminal open,
// exec says so after a second; Ctrl-C then stops waiting (exit: CMD's
// code). The detach keys leave CMD running in its session, which the
// server keeps for its session TTL (exec-server ps lists its processes:
// the session is remembered), and exit 0. The terminal's settings are restored on every
// way out.
//
// Without -t, Ctrl-C (SIGINT) is forwarded to the remote process as an
// interrupt and Ctrl-\ (SIGQUIT) as a quit. SIGTERM and SIGHUP are
// forwarded as themselves (a server that cannot deliver them kills the
// remote process instead). When exec's own stdout closes (exec ... | head
// -1), the remote process is terminated and exec exits with 141, as a
// pipeline member killed by SIGPIPE would.
//
// Exit codes of exec itself: 2 for a usage error; 127 when the program is
// not found or the --workdir directory is missing (stderr names which); 126
// when the program cannot be run (a directory, not executable); 255 when
// the server cannot be reached, the connection or session is lost for
// good, or part of the output was lost (stderr says which; a non-zero code
// is never hidden behind lost output). What is at fault is found out by
// asking the server (fs/getMetadata on the directory or program, a PATH
// lookup with the command's environment), not from the error's text.
//
// # Remote paths: cp, ls, cat
//
// A remote path is an absolute path on the server written with a leading
// colon, ":/abs/path"; the server is the one named by --url. Any other
// argument of cp is a local path ("-" is stdin or stdout); a local file
// whose name starts with a colon can be written "./:name". ls and cat take
// only remote paths, so for them the colon is optional.
//
//	exec-server cp [-a] [-r] [-L] [-q] SRC... DST
//
// copies local to remote, remote to local, or remote to remote (on the
// server). With several sources, or when DST is an existing directory or
// ends in "/", each source is copied into DST under its base name. -r
// copies directories. Large transfers stream in 1 MiB blocks, a few in
// flight, never whole in memory; on a terminal a progress bar shows on
// stderr for files over 1 MiB (-q hides it).
//
// As docker cp, cp keeps each file's and directory's permission bits and
// copies symlinks as symlinks (dangling ones too); -L follows a symlink
// named as SRC. -a (archive, implies -r) also keeps modification times (to
// the second) and the setuid, setgid and sticky bits. An entry that cannot
// be copied (a FIFO, a device, an unreadable directory) is named on stderr
// and cp exits 1 once the rest is copied.
//
// A file is written under a temporary name beside its target
// (".NAME.part-*") and put in place when complete, so an interrupted copy
// (Ctrl-C, SIGTERM, a lost connection, a failing source) leaves the target
// as it was and removes the temporary file. The protocol can neither read
// a mode or a link, nor set a time, nor rename, so cp runs POSIX sh, find,
// ls, readlink, chmod, touch, ln and mv on the server; the file is renamed
// into place there (mv, i.e. rename(2)). Remote to remote, cp is the
// server's fs/copy (modes and symlinks kept), with -a the server's
// cp -pPR (times and special bits too).
//
//	exec-server exec -d CMD...     (prints the process id)
//	exec-server ps [--session ID]
//	exec-server attach [--session ID] PROCESS
//	exec-server kill [-s SIGNAL] [--session ID] PROCESS...
//
// exec -d leaves CMD running in its session (for the server's session
// TTL) and remembers the session per server under $XDG_STATE_HOME (as the
// -it detach keys do); ps lists its processes, attach prints a process's
// retained and new output until it closes and exits with its code (Ctrl-C
// leaves it running), kill signals it (default kill, its whole tree).
//
//	exec-server rm [-r] [-f] :/PATH...
//	exec-server mkdir [-p] :/DIR...
//	exec-server mv :/SRC :/DST
//
// remove, make and rename remote paths (rm refuses /; mv runs mv(1) on the
// server: the protocol has no rename). Errors name the path; exit 1.
//
//	exec-server ls [-l] [-a] [:/DIR...]
//
// lists directories (default: the server's working directory), sorted;
// directories end in "/". -a (--all) includes names starting with a dot;
// -l (--long) is the server's own ls -l (mode, links, owner, group, size,
// time in UTC, symlink targets; a size and time listing if it has no ls);
// -la is both.
//
//	exec-server cat :/FILE...
//
// writes remote files to stdout in blocks.
//
// # ps
//
//	exec-server ps [--session ID]
//
// lists the processes of a session (process/list, this server's
// extension) as a table: id, pid, state (starting, running, exited,
// closed), whether it has a terminal, start time (UTC), exit code and
// command. Processes belong to the session that started them, so ps
// resumes that session: it must be detached (its websocket connection
// gone, within the server's session TTL), and ps leaves it detached again.
// --session defaults to $EXEC_SERVER_SESSION (not shown by -h: an id
// resumes the session), else the session exec -d or the detach keys left
// on that server.
//
// Errors are one line on stderr, "exec-server SUBCOMMAND: ...", with exit
// code 1 (2 for usage errors).
package cli
