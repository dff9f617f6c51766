package netproxy

import "strconv"

// httpVars and socksVars are the variables the reference sets to its HTTP
// and SOCKS listeners (measured on 0.171); noProxyVars are emptied.
var (
	httpVars = []string{
		"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
		"WS_PROXY", "WSS_PROXY", "ws_proxy", "wss_proxy",
		"NPM_CONFIG_PROXY", "NPM_CONFIG_HTTP_PROXY", "NPM_CONFIG_HTTPS_PROXY",
		"npm_config_proxy", "npm_config_http_proxy", "npm_config_https_proxy",
		"YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "PIP_PROXY", "BUNDLE_HTTP_PROXY", "BUNDLE_HTTPS_PROXY",
		"DOCKER_HTTP_PROXY", "DOCKER_HTTPS_PROXY",
	}
	socksVars   = []string{"ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"}
	noProxyVars = []string{"NO_PROXY", "no_proxy", "NPM_CONFIG_NOPROXY", "npm_config_noproxy", "BUNDLE_NO_PROXY"}
)

// Env returns the variables that point a command at the proxy: the HTTP
// listener on httpPort, the SOCKS5 one on socksPort (0: none, and the
// SOCKS variables point at the HTTP listener, which curl and most
// clients take for ALL_PROXY), both on 127.0.0.1 of the command's
// network namespace.
func Env(httpPort, socksPort uint16, allowLocalBinding bool) map[string]string {
	httpURL := "http://127.0.0.1:" + strconv.Itoa(int(httpPort))
	allURL := httpURL
	if socksPort != 0 {
		allURL = "socks5h://127.0.0.1:" + strconv.Itoa(int(socksPort))
	}
	env := map[string]string{
		"NODE_USE_ENV_PROXY":                "1",
		"ELECTRON_GET_USE_PROXY":            "true",
		"CODEX_NETWORK_PROXY_ACTIVE":        "1",
		"CODEX_NETWORK_ALLOW_LOCAL_BINDING": "0",
	}
	if allowLocalBinding {
		env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] = "1"
	}
	for _, k := range httpVars {
		env[k] = httpURL
	}
	for _, k := range socksVars {
		env[k] = allURL
	}
	for _, k := range noProxyVars {
		env[k] = ""
	}
	return env
}
