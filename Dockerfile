# exec-server: a static binary on a small base.
#
#   docker build -t exec-server .
#   docker run --rm -p 8765:8765 -v /path/to/token:/run/secrets/exec-server-token:ro exec-server
#
# The base is Alpine, not scratch: the server runs commands for its client,
# and those need a shell and the usual tools; put the binary into your
# workload's own image instead (COPY --from=build /out/exec-server ...) when
# that is what the agent should work in.
#
# It runs as root. The kernel sandbox (sandboxPolicy on process/start and
# fs/*: mount namespaces, Landlock, seccomp) needs root, and in a container
# also --cap-add SYS_ADMIN (or --privileged) and an unconfined seccomp
# profile; without them requests that ask for a restrictive sandbox are
# refused (-32603, naming what is missing) and everything else works. If no
# client will ask for a sandbox, add `USER 65532:65532` below.

FROM golang:1.26-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# -buildvcs=false: the build context usually has no .git; --version then
# shows the module version only.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/exec-server ./cmd/exec-server

FROM alpine:3.20
COPY --from=build /out/exec-server /usr/local/bin/exec-server
EXPOSE 8765
# Flags may also come from EXEC_SERVER_* variables (docker run -e).
ENV EXEC_SERVER_LOG_FORMAT=json
HEALTHCHECK --interval=30s --timeout=3s CMD wget -q -O /dev/null http://127.0.0.1:8765/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/exec-server"]
# A non-loopback listener needs authentication (or --insecure-no-auth).
CMD ["--listen", "ws://0.0.0.0:8765", "--ws-auth", "capability-token", "--ws-token-file", "/run/secrets/exec-server-token"]
