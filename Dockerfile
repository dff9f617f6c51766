# exec-server: a static binary on a small base.
#
#   docker build -t exec-server .
#   docker run --rm -p 8765:8765 \
#     -v /path/to/token:/run/secrets/exec-server-token:ro \
#     -v /path/to/cert.pem:/run/secrets/exec-server-cert.pem:ro \
#     -v /path/to/key.pem:/run/secrets/exec-server-key.pem:ro exec-server
#
# As shipped it serves wss:// (TLS) with a capability token: a client gets a
# shell on this container, so neither the token nor the traffic travels in
# clear text. The configuration is in EXEC_SERVER_* variables (below), so
# that the HEALTHCHECK (exec-server healthcheck) follows whatever you set:
# e.g. -e EXEC_SERVER_LISTEN=ws://127.0.0.1:8765 -e EXEC_SERVER_TLS_CERT=
# -e EXEC_SERVER_TLS_KEY= for a loopback-only server without TLS (reach it
# with docker exec or a sidecar). A command-line flag wins over a variable.
#
# The base is Alpine, not scratch: the server runs commands for its client,
# and those need a shell and the usual tools; put the binary into your
# workload's own image instead (COPY --from=build /out/exec-server ...) when
# that is what the agent should work in.
#
# It runs as root. The kernel sandbox (the sandbox policy on process/start
# and fs/*: mount namespaces, Landlock, seccomp) needs root, and in a
# container also --cap-add SYS_ADMIN (or --privileged) and an unconfined
# seccomp profile; without them requests that ask for a restrictive sandbox
# are refused (-32603, naming what is missing) and everything else works.
# If no client will ask for a sandbox, add `USER 65532:65532` below.

FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -buildvcs=false: the build context usually has no .git; --version then
# shows the module version only.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/exec-server ./cmd/exec-server

# A supported Alpine release (3.22: security fixes until 2027-05), pinned to
# its patch release; bump it with the release notes, or pin a digest.
FROM alpine:3.22.2
COPY --from=build /out/exec-server /usr/local/bin/exec-server
EXPOSE 8765
ENV EXEC_SERVER_LOG_FORMAT=json \
    EXEC_SERVER_LISTEN=ws://0.0.0.0:8765 \
    EXEC_SERVER_TLS_CERT=/run/secrets/exec-server-cert.pem \
    EXEC_SERVER_TLS_KEY=/run/secrets/exec-server-key.pem \
    EXEC_SERVER_WS_AUTH=capability-token \
    EXEC_SERVER_WS_TOKEN_FILE=/run/secrets/exec-server-token
# GET /readyz on the listener the variables above describe (https with TLS).
HEALTHCHECK --interval=30s --timeout=5s --start-period=5s CMD ["/usr/local/bin/exec-server", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/exec-server"]
