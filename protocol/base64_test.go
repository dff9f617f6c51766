package protocol

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestBase64JSON(t *testing.T) {
	tests := []struct {
		raw, msg string
	}{
		{`"!!!!"`, "Invalid symbol 33, offset 0."},
		{`"YWJj\n"`, "Invalid symbol 10, offset 4."},
		{`"YR=="`, "Invalid last symbol 82, offset 1."},
		{`5`, "invalid type: number, expected a string"},
		{`[1]`, "invalid type: sequence, expected a string"},
		{`null`, "invalid type: null, expected a string"},
	}
	for _, tt := range tests {
		var b Base64
		err := json.Unmarshal([]byte(tt.raw), &b)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidParams || e.Message != tt.msg {
			t.Errorf("%s: %v, want -32602 %q", tt.raw, err, tt.msg)
		}
	}
	for raw, want := range map[string]string{
		`"aGVsbG8K"`:      "hello\n",
		`""`:              "",
		`"aGVsbG8\u004B"`: "hello\n",
	} {
		var b Base64
		if err := json.Unmarshal([]byte(raw), &b); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", raw, b, err, want)
		}
	}
	// It encodes as []byte does.
	out, err := json.Marshal(WriteParams{ProcessID: "p", Chunk: []byte("hi\n")})
	if err != nil || string(out) != `{"processId":"p","chunk":"aGkK"}` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
}
