package server

import (
	"testing"
)

// FuzzParityParams: the params decoders of environmentConfig/read and
// capabilities/discoverV2 never panic, and what they accept is what the
// methods rely on (http/request's: httpcall.FuzzDecode).
func FuzzParityParams(f *testing.F) {
	for _, s := range []string{
		`{"cwd":"file:///w","configPaths":[["mcp_servers"]],"requirementsPaths":[]}`,
		`{"cwd":"file:///w","configPaths":[[]],"requirementsPaths":[]}`,
		`{"requestId":"r","method":"GET","url":"http://127.0.0.1:1/x","headers":[{"name":"a","value":"b","valueEnvVar":"HOME"}],"bodyBase64":"aGk=","timeoutMs":5,"redirectPolicy":"stop","streamResponse":true}`,
		`{"requestId":"r","method":"GET","url":"HTTP://[::1]:80"}`,
		`null`, `[]`, `{"cwd":1}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if v, err := decodeEnvConfig([]byte(raw)); err == nil {
			p := v.(*envConfigParams)
			if p.dir == "" || len(p.ConfigPaths)+len(p.RequirementsPaths) == 0 {
				t.Fatalf("accepted %q without a cwd or a path", raw)
			}
		}
		_, _ = decodeDiscover([]byte(raw))
	})
}
