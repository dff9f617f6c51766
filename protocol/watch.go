package protocol

// fs/watch and fs/unwatch (this server's extension; the reference answers
// -32601) with their fs/changed notification, and fs/watchMissing's result.

// FsWatchParams are fs/watch's params (Path a file: URI on the wire; the
// decoder in fswatch replaces it with the parsed path).
type FsWatchParams struct {
	WatchID   string `json:"watchId"`
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

// FsUnwatchParams are fs/unwatch's params.
type FsUnwatchParams struct {
	WatchID string `json:"watchId"`
}

// FsWatchMissingResult is fs/watchMissing's result.
type FsWatchMissingResult struct {
	Watching bool `json:"watching"`
}

// FsChangedNotification is fs/changed's params. The server writes it by
// hand (server/watch.go appends the bytes); this type is the shape clients
// decode.
type FsChangedNotification struct {
	WatchID  string     `json:"watchId"`
	Changes  []FsChange `json:"changes"`
	Overflow bool       `json:"overflow,omitempty"`
}

// FsChange is one change in an fs/changed notification.
type FsChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}
