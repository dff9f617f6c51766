package fsys

import (
	"strings"
	"testing"

	"github.com/execgo/exec-server/internal/jsonscan"
	"github.com/execgo/exec-server/protocol"
)

var readBlockParamsSeeds = []string{
	`{"handleId":"h-1","offset":0,"len":1048576}`,
	`{"len":5,"offset":18446744073709551615,"handleId":"x"}`,
	` { "handleId" : "a b" , "offset" : 3 , "len" : 4 } `,
	`{"handleId":"h","offset":18446744073709551616,"len":1}`,
	`{"handleId":"h","offset":01,"len":1}`,
	`{"handleId":"h","offset":1.0,"len":1}`,
	`{"handleId":"h","offset":1e3,"len":1}`,
	`{"handleId":"h","offset":-1,"len":1}`,
	`{"handleId":"h\u0041","offset":1,"len":1}`,
	`{"handleId":"é","offset":1,"len":1}`,
	`{"handleId":"h","offset":1,"len":1,"x":2}`,
	`{"handleId":"h","offset":1,"len":1,"len":2}`,
	`{"handleId":"` + strings.Repeat("h", 257) + `","offset":1,"len":1}`,
	`{"handleId":"` + strings.Repeat("h", 256) + `","offset":1,"len":1}`,
	`{"handleId":"h","offset":1}`,
	`{"HandleId":"h","offset":1,"len":1}`,
	`{"handleId":null,"offset":1,"len":1}`,
	`{"handleId":"h","offset":1,"len":1}x`,
	`null`, `[]`, `{}`, ``,
}

// The flat scan agrees with jsonscan wherever it answers, and answers for
// the shape clients send.
func TestReadBlockParamsFast(t *testing.T) {
	for _, s := range readBlockParamsSeeds[:3] {
		var p protocol.FsReadBlockParams
		if !readBlockParamsFast([]byte(s), &p) {
			t.Errorf("%s: not taken by the flat scan", s)
		}
	}
	for _, s := range readBlockParamsSeeds {
		checkReadBlockParams(t, []byte(s))
	}
}

func FuzzReadBlockParams(f *testing.F) {
	for _, s := range readBlockParamsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkReadBlockParams(t, raw) })
}

func checkReadBlockParams(t *testing.T, raw []byte) {
	t.Helper()
	var fast protocol.FsReadBlockParams
	if !readBlockParamsFast(raw, &fast) {
		return
	}
	var slow protocol.FsReadBlockParams
	if err := jsonscan.DecodeParams(raw, &slow, "FsReadBlockParams", "handleId", "offset", "len"); err != nil {
		t.Fatalf("%q: flat scan took it as %+v, jsonscan refuses it: %v", raw, fast, err)
	}
	if fast != slow {
		t.Fatalf("%q: flat scan %+v, jsonscan %+v", raw, fast, slow)
	}
}

// The usual params cost one allocation (the handle id's string); through
// jsonscan and encoding/json they cost 7 or more.
func TestReadBlockParamsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	raw := []byte(`{"handleId":"h-1","offset":1048576,"len":1048576}`)
	var p protocol.FsReadBlockParams
	if n := testing.AllocsPerRun(100, func() {
		if err := decodeReadBlockParams(raw, &p); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("%.0f allocations to decode fs/readBlock params, want at most 1", n)
	}
}
