package protocol

// http/request: the executor makes an HTTP call for the client and answers
// with the status, the headers as received and the body, whole or streamed
// as http/request/bodyDelta notifications after the result. Shapes as the
// reference's (codex-rs/exec-server; docs/protocol.md).

// HTTPHeader is a response header as received (lower-case name).
type HTTPHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPRequestHeader is a request header: value, or value followed by the
// executor's environment variable valueEnvVar (a credential that stays on
// the executor; capability httpHeaderEnvVars).
type HTTPRequestHeader struct {
	Name        string  `json:"name"`
	Value       *string `json:"value"`
	ValueEnvVar *string `json:"valueEnvVar"`
}

// HTTPRequestParams are http/request's params.
type HTTPRequestParams struct {
	Method         string              `json:"method"`
	URL            string              `json:"url"`
	Headers        []HTTPRequestHeader `json:"headers"`
	BodyBase64     *Base64             `json:"bodyBase64"`
	TimeoutMs      *uint64             `json:"timeoutMs"`
	RedirectPolicy *string             `json:"redirectPolicy"`
	RequestID      string              `json:"requestId"`
	StreamResponse bool                `json:"streamResponse"`
}

// HTTPRequestResult is http/request's result.
type HTTPRequestResult struct {
	Status     int          `json:"status"`
	Headers    []HTTPHeader `json:"headers"`
	BodyBase64 string       `json:"bodyBase64"`
}
