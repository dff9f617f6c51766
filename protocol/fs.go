package protocol

import "encoding/json"

// Filesystem wire types (fs/* methods). Every path is a file: URI string.
// Every params struct carries the optional sandbox policy as raw JSON: the
// server validates it with the sandbox package; clients usually leave it
// empty (omitted on the wire).
//
// Byte payloads that are base64 on the wire are []byte fields: encoding/json
// writes and reads standard, padded base64, as the reference does.

// FsReadFileParams are the params of fs/readFile.
type FsReadFileParams struct {
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// FsReadFileResult is the result of fs/readFile: the whole file.
type FsReadFileResult struct {
	DataBase64 []byte `json:"dataBase64"`
}

// FsWriteFileParams are the params of fs/writeFile. The file is created or
// truncated; symlinks are followed. The server decodes DataBase64 itself so
// that invalid base64 is reported as -32600, as the reference does.
type FsWriteFileParams struct {
	Path       string          `json:"path"`
	DataBase64 []byte          `json:"dataBase64"`
	Sandbox    json.RawMessage `json:"sandbox,omitempty"`
}

// FsCreateDirectoryParams are the params of fs/createDirectory. Recursive
// absent or null means true (mkdir -p).
type FsCreateDirectoryParams struct {
	Path      string          `json:"path"`
	Recursive *bool           `json:"recursive,omitempty"`
	Sandbox   json.RawMessage `json:"sandbox,omitempty"`
}

// FsGetMetadataParams are the params of fs/getMetadata.
type FsGetMetadataParams struct {
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// FsMetadata is the result of fs/getMetadata. Type and size follow
// symlinks; IsSymlink describes the path itself. Times are milliseconds since
// the Unix epoch; CreatedAtMs is 0 when the birth time is unavailable.
type FsMetadata struct {
	IsDirectory  bool  `json:"isDirectory"`
	IsFile       bool  `json:"isFile"`
	IsSymlink    bool  `json:"isSymlink"`
	Size         int64 `json:"size"`
	CreatedAtMs  int64 `json:"createdAtMs"`
	ModifiedAtMs int64 `json:"modifiedAtMs"`
}

// FsCanonicalizeParams are the params of fs/canonicalize.
type FsCanonicalizeParams struct {
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// FsCanonicalizeResult is the result of fs/canonicalize: the real path, as a
// file: URI.
type FsCanonicalizeResult struct {
	Path string `json:"path"`
}

// FsReadDirectoryParams are the params of fs/readDirectory.
type FsReadDirectoryParams struct {
	Path    string          `json:"path"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// FsDirEntry is one entry of fs/readDirectory. Symlinks are resolved
// (a link to a file has IsFile true); dangling links are omitted.
type FsDirEntry struct {
	FileName    string `json:"fileName"`
	IsDirectory bool   `json:"isDirectory"`
	IsFile      bool   `json:"isFile"`
}

// FsReadDirectoryResult is the result of fs/readDirectory, in the order the
// operating system lists the directory.
type FsReadDirectoryResult struct {
	Entries []FsDirEntry `json:"entries"`
}

// FsRemoveParams are the params of fs/remove. Recursive and Force absent or
// null mean true (rm -rf). This server refuses to remove / or a mount root.
type FsRemoveParams struct {
	Path      string          `json:"path"`
	Recursive *bool           `json:"recursive,omitempty"`
	Force     *bool           `json:"force,omitempty"`
	Sandbox   json.RawMessage `json:"sandbox,omitempty"`
}

// FsCopyParams are the params of fs/copy. Recursive is required on the wire
// and must be true to copy a directory. Symlinks are copied as links.
type FsCopyParams struct {
	SourcePath      string          `json:"sourcePath"`
	DestinationPath string          `json:"destinationPath"`
	Recursive       bool            `json:"recursive"`
	Sandbox         json.RawMessage `json:"sandbox,omitempty"`
}

// Walk limits: requests above these maxima are refused with -32600.
const (
	FsWalkMaxDepth       = 64
	FsWalkMaxDirectories = 10000
	FsWalkMaxEntries     = 50000
)

// FsWalkOptions bound an fs/walk; every field is required on the wire.
type FsWalkOptions struct {
	MaxDepth                uint64 `json:"maxDepth"`
	MaxDirectories          uint64 `json:"maxDirectories"`
	MaxEntries              uint64 `json:"maxEntries"`
	FollowDirectorySymlinks bool   `json:"followDirectorySymlinks"`
}

// FsWalkParams are the params of fs/walk.
type FsWalkParams struct {
	Path    string          `json:"path"`
	Options FsWalkOptions   `json:"options"`
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
}

// Walk entry kinds. The server, like the reference, lists only files and
// directories; the other two are reserved.
const (
	FsKindFile      = "file"
	FsKindDirectory = "directory"
	FsKindSymlink   = "symlink"
	FsKindOther     = "other"
)

// FsWalkEntry is one path found by fs/walk (the root itself is not listed).
// Symlinks to files, FIFOs, sockets and devices are not listed; a symlink to
// a directory is listed (as a directory) only with FollowDirectorySymlinks.
type FsWalkEntry struct {
	Path string `json:"path"` // file: URI
	Kind string `json:"kind"` // FsKindFile, FsKindDirectory, FsKindSymlink or FsKindOther
}

// FsWalkError is a path fs/walk could not read; the walk goes on without it.
type FsWalkError struct {
	Path    string `json:"path"` // file: URI
	Message string `json:"message"`
}

// FsWalkResult is the result of fs/walk. Truncated is true when a limit
// stopped the walk early.
type FsWalkResult struct {
	Entries   []FsWalkEntry `json:"entries"`
	Errors    []FsWalkError `json:"errors"`
	Truncated bool          `json:"truncated"`
}

// fs/open modes.
const (
	FsOpenRead    = "read"
	FsOpenReplace = "replace"
)

// Limits of the handle-based streaming methods.
const (
	FsMaxBlockLen = 1 << 20 // fs/readBlock len and fs/writeBlock chunk, in bytes
)

// FsOpenParams are the params of fs/open. Mode is FsOpenRead (the default)
// or FsOpenReplace (create or truncate). HandleID is chosen by the client and
// must not name a live handle of the same connection.
type FsOpenParams struct {
	HandleID string          `json:"handleId"`
	Path     string          `json:"path"`
	Mode     string          `json:"mode,omitempty"`
	Sandbox  json.RawMessage `json:"sandbox,omitempty"`
}

// FsOpenResult is the result of fs/open.
type FsOpenResult struct {
	HandleID string `json:"handleId"`
}

// FsReadBlockParams are the params of fs/readBlock: a positional read of at
// most Len bytes (1..FsMaxBlockLen) at Offset.
type FsReadBlockParams struct {
	HandleID string `json:"handleId"`
	Offset   uint64 `json:"offset"`
	Len      uint64 `json:"len"`
}

// FsReadBlockResult is the result of fs/readBlock. EOF is true when the
// read reached the end of the file.
type FsReadBlockResult struct {
	Chunk []byte `json:"chunk"`
	EOF   bool   `json:"eof"`
}

// FsWriteBlockParams are the params of fs/writeBlock: a positional write of
// Chunk (1..FsMaxBlockLen bytes) at Offset; a hole is zero-filled.
type FsWriteBlockParams struct {
	HandleID string `json:"handleId"`
	Offset   uint64 `json:"offset"`
	Chunk    []byte `json:"chunk"`
}

// FsCloseParams are the params of fs/close; closing an unknown handle
// succeeds.
type FsCloseParams struct {
	HandleID string `json:"handleId"`
}
