package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// healthcheck is `exec-server healthcheck`: GET /readyz on the listener
// that the same flags or EXEC_SERVER_* variables configure the server
// with (--listen, --tls-cert), so a container's HEALTHCHECK follows
// whatever the server was told. Exit 0 when ready, 1 otherwise.
func healthcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec-server healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "ws://127.0.0.1:0", "the server's `URL` (as its --listen)")
	cert := fs.String("tls-cert", "", "the server's certificate `FILE` (as its --tls-cert): check over https")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprintln(stdout, "usage: exec-server healthcheck [--listen URL] [--tls-cert FILE] [--timeout D]\n\nGET /readyz on the server that --listen (or EXEC_SERVER_LISTEN) and --tls-cert\n(EXEC_SERVER_TLS_CERT) describe; exit 0 when it answers 200.\n\nflags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "exec-server healthcheck: %v\n", err)
		return 2
	}
	if err := flagsFromEnv(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "exec-server healthcheck: %v\n", err)
		return 2
	}
	target, err := readyzURL(*listen, *cert != "")
	if err != nil {
		fmt.Fprintf(stderr, "exec-server healthcheck: %v\n", err)
		return 2
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The check runs beside the server (same host or container) and sends
	// no credential; the certificate may not name the loopback address.
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec
	hc := &http.Client{Transport: tr, Timeout: *timeout}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server healthcheck: %s: %v\n", target, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "exec-server healthcheck: %s: %s\n", target, resp.Status)
		return 1
	}
	fmt.Fprintf(stdout, "ok %s\n", target)
	return 0
}

// readyzURL is the /readyz address of a --listen URL: a wildcard host is
// checked on loopback, localhost as 127.0.0.1 (as the server binds it).
func readyzURL(listen string, tlsOn bool) (string, error) {
	u, err := url.Parse(listen)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") {
		return "", fmt.Errorf("--listen %q: want ws://HOST:PORT (stdio has no health endpoint)", listen)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" || port == "0" {
		return "", fmt.Errorf("--listen %q: the port must be fixed to be checked", listen)
	}
	switch host {
	case "", "0.0.0.0", "localhost":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if tlsOn || u.Scheme == "wss" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/readyz", nil
}
