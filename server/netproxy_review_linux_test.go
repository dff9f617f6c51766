package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestNetworkReviewDomains: networkProxy.proxy.reviewDomains (the wire
// field of codex's admin review_domains, networkProxyReviewDomains) sends
// an allowlisted host to the client all the same: allowed by the client it
// connects, denied it gets the 403 with the client's reason; a denied
// host is refused without asking; without policyDecisionTimeoutMs a review
// domain is refused (not_allowed), as the reference 0.171 does (measured).
func TestNetworkReviewDomains(t *testing.T) {
	needProxyTools(t)
	port := helloServer(t)
	p := stdioPeer(t, New(Config{}))
	p.init()
	launch := func(extra string) json.RawMessage {
		l := string(proxyLaunch(`{"127.0.0.1":"allow","127.0.0.2":"allow","127.0.0.3":"deny"}`, extra))
		return json.RawMessage(strings.Replace(l, `"allowLocalBinding":false`,
			`"allowLocalBinding":false,"reviewDomains":["127.0.0.1","127.0.0.2","127.0.0.3"]`, 1))
	}
	script := fmt.Sprintf(`for h in 1 2 3; do echo "$h=$(curl -s -w ' %%{http_code}' http://127.0.0.$h:%d/)"; done`, port)
	start := func(id string, l json.RawMessage) {
		dir := t.TempDir()
		sp := startParams(t, id, false, "/bin/sh", "-c", script)
		sp["cwd"] = "file://" + dir
		sp["sandbox"] = proxySandbox(dir)
		sp["enforceManagedNetwork"] = true
		sp["networkProxy"] = l
		p.call("process/start", sp)
	}

	start("rv", launch(`,"policyDecisionTimeoutMs":30000`))
	for i, a := range []string{`{"decision":{"type":"allow"}}`, `{"decision":{"type":"deny","reason":"reviewer says no"}}`} {
		w := p.wait("policyRequest", func(w wire) bool { return w.Method == "network/policyRequest" })
		want := fmt.Sprintf(`{"processId":"rv","request":{"protocol":"http","host":"127.0.0.%d","port":%d}}`, i+1, port)
		if string(w.Params) != want {
			t.Errorf("params %s, want %s", w.Params, want)
		}
		p.raw(`{"id":` + string(w.ID) + `,"result":` + a + `}`)
	}
	out, _ := output(p, "rv")
	t.Logf("with a decider:\n%s", out)
	for _, want := range []string{
		"1=hello 200\n",
		`2={"status":"blocked","host":"127.0.0.2","reason":"reviewer says no","decision":"deny","source":"decider"`,
		`3={"status":"blocked","host":"127.0.0.3","reason":"denied","decision":"deny","source":"baseline_policy"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	start("rn", launch(""))
	out, _ = output(p, "rn")
	t.Logf("without a decider:\n%s", out)
	if !strings.Contains(out, `1={"status":"blocked","host":"127.0.0.1","reason":"not_allowed","decision":"deny","source":"baseline_policy"`) {
		t.Errorf("an allowlisted review domain without a decider: output\n%s", out)
	}
	// No other request was put to the client: not the denied host, not
	// the review domain without a decider (unconsumed messages are kept).
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.seen {
		if w.Method == "network/policyRequest" {
			t.Errorf("unexpected request to the client: %s", w.Params)
		}
	}
}
