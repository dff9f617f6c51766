package jsonscan

import (
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// Every client-chosen id is bounded (issue 14, defect 2: a 4 MiB processId
// was repeated in every process/output).
func TestDecodeParamsBoundsIDs(t *testing.T) {
	type fsParams struct {
		HandleID string `json:"handleId"`
		Path     string `json:"path"`
	}
	long := strings.Repeat("x", MaxIDBytes+1)
	tests := []struct {
		name string
		v    any
		raw  string
		want string // "" = accepted
	}{
		{"processId at the limit", &protocol.ReadParams{}, `{"processId":"` + strings.Repeat("x", MaxIDBytes) + `"}`, ""},
		{"processId over", &protocol.ReadParams{}, `{"processId":"` + long + `"}`, "`processId` is too long: 257 bytes, the limit is 256"},
		{"4 MiB processId", &protocol.StartParams{}, `{"processId":"` + strings.Repeat("p", 4<<20) + `","argv":["true"],"cwd":"file:///","env":{},"tty":false}`, "`processId` is too long: 4194304 bytes, the limit is 256"},
		{"writeId over", &protocol.WriteParams{}, `{"processId":"p","chunk":"","writeId":"` + long + `"}`, "`writeId` is too long"},
		{"handleId over", &fsParams{}, `{"handleId":"` + long + `","path":"x"}`, "`handleId` is too long"},
		{"resumeSessionId over", &protocol.InitializeParams{}, `{"clientName":"c","resumeSessionId":"` + long + `"}`, "`resumeSessionId` is too long"},
		{"escapes shorten", &protocol.ReadParams{}, `{"processId":"` + strings.Repeat(`\u0041`, MaxIDBytes) + `"}`, ""},
		{"escapes counted decoded", &protocol.ReadParams{}, `{"processId":"` + strings.Repeat(`\u0041`, MaxIDBytes+1) + `"}`, "257 bytes"},
		{"invalid UTF-8 counted decoded", &protocol.ReadParams{}, `{"processId":"` + strings.Repeat("\xff", 100) + `"}`, "300 bytes"},
		{"escaped key", &protocol.ReadParams{}, `{"process\u0049d":"` + long + `"}`, "`processId` is too long"},
		{"other long strings are not ids", &fsParams{}, `{"handleId":"h","path":"` + long + `"}`, ""},
		{"nested Id members are data", &protocol.StartParams{}, `{"processId":"p","argv":["a"],"cwd":"c","env":{"fooId":"` + long + `"},"tty":false}`, ""},
		{"a non-string id is a type error", &protocol.ReadParams{}, `{"processId":5}`, "expected a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeParams([]byte(tc.raw), tc.v, "P")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			wantError(t, err, protocol.CodeInvalidParams, tc.want)
		})
	}
}
