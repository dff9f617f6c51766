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

var messageSamples = []string{
	`{"id":1,"result":{"chunk":"aGkK","eof":true}}`,
	`{"error":{"code":-32600,"message":"bad"},"id":-1}`,
	`{"method":"process/output","params":{"processId":"p"}}`,
	`{"id":"x","method":"network/policyRequest","params":{}}`,
	`{"id":2,"result":null,"error":null}`,
	`{"ID":3,"Result":{}}`,
	`{"method":"m\u0065thod"}`,
	`{"error":{"code":"nope"},"id":1}`,
}

func TestSplitMessageMatchesJSON(t *testing.T) {
	for _, s := range messageSamples {
		checkMessage(t, []byte(s))
	}
}

func checkMessage(t *testing.T, raw []byte) {
	t.Helper()
	var want message
	if json.Unmarshal(raw, &want) != nil {
		return
	}
	var got message
	if err := splitMessage(raw, &got); err != nil {
		t.Fatalf("%s: splitMessage: %v, json accepted it", raw, err)
	}
	if !reflect.DeepEqual(compact(got), compact(want)) {
		t.Fatalf("%s: splitMessage = %+v, json = %+v", raw, got, want)
	}
}

// compact drops insignificant space from raw fields: json.RawMessage keeps
// the bytes as they were, and so does splitMessage, but both may differ in
// surrounding space.
func compact(m message) message {
	for _, p := range []*json.RawMessage{&m.ID, &m.Params, &m.Result} {
		if *p != nil {
			var v any
			if json.Unmarshal(*p, &v) == nil {
				*p, _ = json.Marshal(v)
			}
		}
	}
	return m
}

func FuzzSplitMessage(f *testing.F) {
	for _, s := range messageSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkMessage(t, raw) })
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
