package jsonscan

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgo/exec-server/protocol"
)

// TestDecodeCut: Spec.Cut members come back as found; a string is decoded
// as "" into its field, another kind stays for encoding/json to refuse.
func TestDecodeCut(t *testing.T) {
	type params struct {
		Path string `json:"path"`
		Data string `json:"dataBase64"`
	}
	tests := []struct {
		raw, cut, err string
	}{
		{`{"path":"p","dataBase64":"QUJD"}`, `"QUJD"`, ""},
		{`{"dataBase64":"x\"y","path":"p"}`, `"x\"y"`, ""},
		{`{"path":"p","data\u0042ase64":"QUJD"}`, `"QUJD"`, ""},
		{`{"path":"p"}`, ``, ""},
		{`{"path":"p","DataBase64":"QUJD"}`, ``, ""},
		{`{"path":"p","dataBase64":null}`, `null`, ""},
		{`{"path":"p","dataBase64":5}`, `5`, "invalid type: number, expected a string for field `dataBase64`"},
		{`{"dataBase64":"QUJD"}`, ``, "missing field `path`"},
	}
	for _, tt := range tests {
		var p params
		cut, err := Decode(json.RawMessage(tt.raw), &p, Spec{Type: "P", Required: []string{"path"}, Cut: []string{"dataBase64"}})
		if tt.err != "" {
			wantError(t, err, protocol.CodeInvalidParams, tt.err)
			continue
		}
		if err != nil || string(cut[0]) != tt.cut || p.Path != "p" || p.Data != "" {
			t.Errorf("%s: %q %+v %v; want cut %s", tt.raw, cut, p, err, tt.cut)
		}
	}
}

// TestDecodeBulk: a large Base64 member is decoded apart from the rest
// with the same result and the same errors as through encoding/json.
func TestDecodeBulk(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 512)
	enc := base64.StdEncoding.EncodeToString(data)
	var p protocol.WriteParams
	if err := DecodeParams(json.RawMessage(`{"processId":"p","chunk":"`+enc+`","writeId":"w"}`), &p, "WriteParams", "processId", "chunk"); err != nil {
		t.Fatal(err)
	}
	if p.ProcessID != "p" || !bytes.Equal(p.Chunk, data) || p.WriteID == nil || *p.WriteID != "w" {
		t.Fatalf("got %q %d bytes %v", p.ProcessID, len(p.Chunk), p.WriteID)
	}
	bad := enc[:100] + "!" + enc[101:]
	for raw, want := range map[string]string{
		`{"processId":"p","chunk":"` + bad + `"}`:                       "Invalid symbol 33, offset 100.",
		`{"processId":5,"chunk":"` + bad + `"}`:                         "Invalid symbol 33, offset 100.",
		`{"processId":5,"chunk":"` + enc + `"}`:                         "invalid type: number, expected a string for field `processId`",
		`{"processId":"p","chunk":"` + enc + `","writeId":7}`:           "for field `writeId`",
		`{"processId":"p","chunk":"` + strings.Repeat("A", 1025) + `"}`: "Invalid input length: 1025",
	} {
		var p protocol.WriteParams
		err := DecodeParams(json.RawMessage(raw), &p, "WriteParams", "processId", "chunk")
		wantError(t, err, protocol.CodeInvalidParams, want)
	}
}

// TestDecodeKnown: a Known string is passed over without being read (here
// it holds a quote, which a read would take for its end), and only where
// it is: the same bytes elsewhere are walked as usual.
func TestDecodeKnown(t *testing.T) {
	type params struct {
		Path string `json:"path"`
	}
	spec := func(known []byte) Spec {
		return Spec{Type: "P", Required: []string{"path"}, Cut: []string{"dataBase64"}, Known: known}
	}
	raw := []byte(`{"path":"p","dataBase64":"AAAA"BBBB"}`)
	i := bytes.Index(raw, []byte(`AAAA`))
	known := raw[i : i+len(`AAAA"BBBB`)]
	var p params
	cut, err := Decode(raw, &p, spec(known))
	if err != nil || string(cut[0]) != `"AAAA"BBBB"` || p.Path != "p" {
		t.Fatalf("with Known: %q %+v %v", cut, p, err)
	}
	if _, err := Decode(raw, &p, spec(nil)); err == nil {
		t.Fatal("without Known the quote inside was not read")
	}
	// The same bytes, not at Known's place: walked.
	other := append([]byte(nil), raw...)
	if _, err := Decode(other, &p, spec(known)); err == nil {
		t.Fatal("Known was applied to other bytes")
	}
}
