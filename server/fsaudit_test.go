package server

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/execgo/exec-server/internal/test/syncbuf"
)

// The audit line of an fs/writeFile names the path the request wrote,
// whatever the payload holds. The payload is decoded over the request's
// own bytes; the audit once walked the params after that, through the
// decoded data, which could end the payload's string early and read a
// path written inside the data (a forged audit line) or none.
func TestAuditWriteFileNamesTheWrittenPath(t *testing.T) {
	for _, tr := range dpTransports {
		t.Run(tr, func(t *testing.T) {
			var logs syncbuf.Buffer
			c := dpServerWith(t, tr, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			dir := t.TempDir()
			path := filepath.Join(dir, "real.bin")
			// The decoded data reads as the end of the payload's string
			// followed by another path member.
			data := []byte(`","path":"file:///forged/by/the/data","x":"`)
			data = append(data, bytes.Repeat([]byte{'A'}, 1<<16)...)
			msg := fmt.Appendf(nil, `{"id":2,"method":"fs/writeFile","params":{"dataBase64":"%s","path":%q}}`,
				base64.StdEncoding.EncodeToString(data), "file://"+path)
			c.roundTrip(t, msg)
			c.call(t, `{"id":3,"method":"fs/getMetadata","params":{"path":"file:///"}}`) // the audit line is written by now
			want := regexp.MustCompile(`msg=audit .*method=fs/writeFile path=` + regexp.QuoteMeta(path) + ` code=0`)
			if !want.MatchString(logs.String()) {
				t.Fatalf("no audit line naming %s:\n%s", path, logs.String())
			}
			if bytes.Contains([]byte(logs.String()), []byte("forged")) {
				t.Fatalf("the audit line took a path from the data:\n%s", logs.String())
			}
		})
	}
}
