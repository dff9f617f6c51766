package client

import (
	"encoding/json"
	"reflect"
	"testing"
)

var eventSamples = []string{
	`{"processId":"p1","seq":1,"stream":"stdout","chunk":"aGkK"}`,
	`{"processId":"p1","seq":3,"exitCode":0,"sandboxDenied":false}`,
	`{"processId":"p1","seq":3,"exitCode":-1,"sandboxDenied":true}`,
	`{"processId":"p1","seq":3,"exitCode":137}`,
	`{"processId":"p1","seq":3,"exitCode":137,"sandboxDenied":false,"timedOut":true}`,
	`{"processId":"p1","seq":3,"exitCode":0,"timedOut":false,"TimedOut":true}`,
	`{"processId":"p1","seq":3,"exitCode":0,"timedOut":null}`,
	`{"processId":"p1","seq":4}`,
	`{ "processId" : "p\u00e9" , "seq" : 2 , "stream":"pty", "chunk" : "" }`,
	`{"processId":"p1","seq":1,"chunk":null,"sandboxDenied":null,"extra":{"a":[1,2,{"b":"\""}]}}`,
	`{"ProcessID":"upper","SEQ":9}`,
	`{"proc\u0065ssId":"escaped-key","seq":1}`,
	`{"processId":"p1","seq":1,"processId":"dup"}`,
	`{"processId":"p1","seq":1.5}`,
	`{"processId":"p1","seq":-1}`,
	`{"processId":"p1","chunk":"not base64!"}`,
	`{"processId":"p1","chunk":"aGk\/"}`,
	`{"processId":"p1","chunk":"aG\r\nkK"}`,
	`{"processId":1}`,
	`{"processId":"p1"`,
	`[]`,
	`null`,
}

// The fast event decoding agrees with encoding/json on everything
// encoding/json accepts.
func TestDecodeEventMatchesJSON(t *testing.T) {
	for _, s := range eventSamples {
		checkEvent(t, []byte(s))
	}
}

func checkEvent(t *testing.T, raw []byte) {
	t.Helper()
	var want event
	if json.Unmarshal(raw, &want) != nil {
		return // the fast path may accept what encoding/json refuses
	}
	var got event
	if err := decodeEvent(raw, &got); err != nil {
		t.Fatalf("%s: decodeEvent: %v, json accepted it", raw, err)
	}
	if !reflect.DeepEqual(normEvent(got), normEvent(want)) {
		t.Fatalf("%s: decodeEvent = %+v, json = %+v", raw, got, want)
	}
}

// normEvent makes an empty chunk and a nil one compare equal only where
// json does the same (it decodes "" to an empty, non-nil slice).
func normEvent(e event) event { return e }

func FuzzDecodeEvent(f *testing.F) {
	for _, s := range eventSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkEvent(t, raw) })
}

func TestReadBlockResultMatchesJSON(t *testing.T) {
	for _, s := range []string{
		`{"chunk":"aGkK","eof":true}`,
		`{"chunk":"","eof":false}`,
		`{"eof":true,"chunk":null}`,
		`{"CHUNK":"aGkK"}`,
		`{"chunk":"a\u0047kK"}`,
	} {
		var want, got readBlockResult
		type plain readBlockResult
		if json.Unmarshal([]byte(s), (*plain)(&want)) != nil {
			continue
		}
		if err := got.decodeRaw([]byte(s)); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decodeRaw = %+v, %v; json = %+v", s, got, err, want)
		}
	}
}
