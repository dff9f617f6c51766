package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/execgo/exec-server/auth"
)

// tokenCmd is `exec-server token mint`: a signed bearer token (HS256 JWT)
// for --ws-auth signed-bearer-token, printed on stdout.
func tokenCmd(args []string, stdout, stderr io.Writer) int {
	const usage = `usage: exec-server token mint --secret-file FILE --sub NAME [--ttl D] [--iss ISSUER] [--aud AUDIENCE]...

Prints an HS256 JWT signed with the server's --ws-shared-secret-file, for
--ws-auth signed-bearer-token: sub names the caller in the server's audit
log, exp is now+ttl, iss and aud what --ws-issuer and --ws-audience expect.

flags:
`
	if len(args) == 0 || args[0] != "mint" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "exec-server token: want the mint subcommand (exec-server token mint -h)\n")
		return 2
	}
	fs := flag.NewFlagSet("exec-server token mint", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	secretFile := fs.String("secret-file", "", "`FILE` holding the HS256 secret (the server's --ws-shared-secret-file)")
	sub := fs.String("sub", "", "the caller's `NAME` (sub claim), logged by the server")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid (`D`, a Go duration)")
	iss := fs.String("iss", "", "`ISSUER` (iss claim), when the server checks --ws-issuer")
	var aud audienceFlag
	fs.Var(&aud, "aud", "`AUDIENCE` (aud claim), repeatable, when the server checks --ws-audience")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "exec-server token mint: %v\n", err)
		return 2
	}
	switch {
	case *secretFile == "":
		fmt.Fprintln(stderr, "exec-server token mint: --secret-file is required")
		return 2
	case *sub == "":
		fmt.Fprintln(stderr, "exec-server token mint: --sub is required (it names the caller)")
		return 2
	case *ttl <= 0:
		fmt.Fprintf(stderr, "exec-server token mint: --ttl %v: want a positive duration\n", *ttl)
		return 2
	}
	raw, err := os.ReadFile(*secretFile)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server token mint: %v\n", err)
		return 1
	}
	key := bytes.TrimSpace(raw) // trimmed as the server reads it
	if len(key) < auth.MinSharedSecretBytes {
		fmt.Fprintf(stderr, "exec-server token mint: the secret in %s must be at least %d bytes\n", *secretFile, auth.MinSharedSecretBytes)
		return 1
	}
	now := time.Now()
	claims := jwt.MapClaims{"sub": *sub, "iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
	if *iss != "" {
		claims["iss"] = *iss
	}
	switch len(aud) {
	case 0:
	case 1:
		claims["aud"] = aud[0]
	default:
		claims["aud"] = []string(aud)
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
	clear(raw)
	if err != nil {
		fmt.Fprintf(stderr, "exec-server token mint: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, signed)
	return 0
}
