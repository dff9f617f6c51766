// Package envreg is the HTTP side of the environment registry shared by
// the executor (register, validate), the harness (connect) and the relay
// that answers them (remote/relay): the request and answer bodies of
// /cloud/environment/{id}/{verb}, the error body and its codes, and the
// client's request. What an answer means stays with each caller.
package envreg

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
)

// Post sends body as JSON to base/cloud/environment/{env}/{verb} with the
// bearer token and the headers in hdr, and returns the answer's status
// and at most limit bytes of its body.
func Post(ctx context.Context, client *http.Client, base, env, verb, token string, hdr http.Header, body any, limit int64) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	u := base + "/cloud/environment/" + url.PathEscape(env) + "/" + verb
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "*/*")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, data, nil
}

// ParseError returns the code and message of an error answer (ErrorBody),
// empty when data is not one.
func ParseError(data []byte) (code, message string) {
	var eb ErrorBody
	if json.Unmarshal(data, &eb) != nil {
		return "", ""
	}
	return eb.Error.Code, eb.Error.Message
}
