package httpcall

import (
	"net"
	"strings"
	"testing"
)

// FuzzDecode: the http/request params decoder never panics, and what it
// accepts is what Call relies on.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"requestId":"r","method":"GET","url":"http://127.0.0.1:1/x","headers":[{"name":"a","value":"b","valueEnvVar":"HOME"}],"bodyBase64":"aGk=","timeoutMs":5,"redirectPolicy":"stop","streamResponse":true}`,
		`{"requestId":"r","method":"GET","url":"HTTP://[::1]:80"}`,
		`null`, `[]`, `{"cwd":1}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if v, err := Decode([]byte(raw)); err == nil {
			p := v.(*Params)
			if p.url == nil || (p.url.Scheme != "http" && p.url.Scheme != "https") || !isToken(p.Method) {
				t.Fatalf("accepted %q", raw)
			}
			for _, h := range p.Headers {
				if h.Value == nil || h.ValueEnvVar != nil || !isToken(h.Name) {
					t.Fatalf("accepted header %+v of %q", h, raw)
				}
			}
		}
	})
}

// FuzzCapturedHeaders: whatever a server sends, the header capture never
// panics, keeps at most maxHTTPHeaderBytes, and parses only a complete
// block.
func FuzzCapturedHeaders(f *testing.F) {
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nA: 1\r\n folded\r\nb:2\r\n\r\nbody", 200, 7)
	f.Add("HTTP/1.1 204 No Content\r\n\r\n", 204, 1)
	f.Fuzz(func(t *testing.T, wire string, status, step int) {
		if step <= 0 {
			step = 1
		}
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := &captureConn{Conn: a}
		go func() {
			for i := 0; i < len(wire); i += step {
				if _, err := b.Write([]byte(wire[i:min(i+step, len(wire))])); err != nil {
					return
				}
			}
			b.Close()
		}()
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		if len(c.buf) > maxHTTPHeaderBytes+64 {
			t.Fatalf("kept %d bytes", len(c.buf))
		}
		hs := capturedHeaders(c, status)
		if hs != nil && !c.done {
			t.Fatal("headers from an incomplete block")
		}
		for _, h := range hs {
			if h.Name != strings.ToLower(h.Name) {
				t.Fatalf("name %q not lower-case", h.Name)
			}
		}
	})
}
