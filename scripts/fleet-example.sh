#!/usr/bin/env bash
# Runs docs/remote.md's three-node example ("Scaling out") on loopback and
# prints a transcript: a three-server NATS cluster (JetStream, replicas 3),
# three exec-relay nodes with peer links, HAProxy hashing on the environment
# id with health checks, one executor and the CLI as harness; then SIGKILL of
# the executor's relay node and of one NATS server, each followed by a new
# command through the balancer.
#
#   bash scripts/fleet-example.sh            # builds exec-server and exec-relay
#
# Needs haproxy and nats-server on PATH (or NATS_SERVER=path); the Go module
# cache has nats-server: `go build -o /tmp/nats-server
# github.com/nats-io/nats-server/v2`. Everything lives in one temporary
# directory, removed at the end; ports: 14221-3 (NATS clients), 16221-3
# (NATS routes), 8711-3 (relays), 8721-3 (peer links), 8700 (HAProxy), all on
# 127.0.0.1.
set -uo pipefail

cd "$(dirname "$0")/.."
R=$(mktemp -d "${TMPDIR:-/tmp}/fleet-example.XXXXXX")
NS=${NATS_SERVER:-$(command -v nats-server)}
command -v haproxy >/dev/null || { echo "fleet-example: haproxy not found" >&2; exit 2; }
[ -x "$NS" ] || { echo "fleet-example: nats-server not found (NATS_SERVER=path)" >&2; exit 2; }
go build -o "$R/exec-server" ./cmd/exec-server && go build -o "$R/exec-relay" ./cmd/exec-relay || exit 1
ES=$R/exec-server ER=$R/exec-relay

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; [ -n "${KEEP:-}" ] && echo "kept $R" >&2 || rm -rf "$R"; }
trap cleanup EXIT
metric() { curl -s --max-time 1 "127.0.0.1:871$1/metrics" | awk -v m="$2" '$1==m{print $2}'; }
envsocks() { metric "$1" 'exec_relay_sockets{role="environment"}'; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
harness() { CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=harness-tok-1 "$ES" exec --remote http://127.0.0.1:8700 \
  --environment-id build-1 -- sh -c "$1"; }

for i in 1 2 3; do
  mkdir -p "$R/nats-$i"
  cat > "$R/nats-$i.conf" <<C
server_name: nats-$i
listen: 127.0.0.1:1422$i
jetstream { store_dir: "$R/nats-$i" }
cluster { name: relay, listen: 127.0.0.1:1622$i,
          routes: [nats://127.0.0.1:16221, nats://127.0.0.1:16222, nats://127.0.0.1:16223] }
C
  "$NS" -c "$R/nats-$i.conf" > "$R/nats-$i.log" 2>&1 & pids+=($!); nats[$i]=$!
done
# A node exits at start when no NATS server answers: wait for all three.
for i in 1 2 3; do
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/1422$i) 2>/dev/null && break; sleep 0.1; done
done
head -c 48 /dev/urandom | base64 > "$R/url-secret"
echo exec-tok-1 > "$R/executors"; echo harness-tok-1 > "$R/harnesses"
chmod 600 "$R/url-secret" "$R/executors" "$R/harnesses"
for i in 1 2 3; do
  "$ER" --listen 127.0.0.1:871$i --public-url http://127.0.0.1:8700 \
    --nats-url nats://127.0.0.1:14221,nats://127.0.0.1:14222,nats://127.0.0.1:14223 --nats-replicas 3 \
    --node-name relay_$i --url-secret-file "$R/url-secret" --peer-listen 127.0.0.1:872$i \
    --executor-token-file "$R/executors" --harness-token-file "$R/harnesses" \
    > "$R/relay-$i.out" 2> "$R/relay-$i.log" & pids+=($!); relay[$i]=$!
done
cat > "$R/haproxy.cfg" <<C
defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 1h
frontend relay
    bind 127.0.0.1:8700
    default_backend relay_nodes
backend relay_nodes
    http-request set-var(txn.env) path,field(4,/) if { path_beg /cloud/environment/ }
    http-request set-var(txn.env) path,field(4,/) if { path_beg /rendezvous/ }
    balance hash var(txn.env)
    hash-type consistent
    option httpchk GET /readyz
    option redispatch 1
    retries 2
    timeout tunnel 1h
    server relay_1 127.0.0.1:8711 check inter 500 fall 2 rise 2
    server relay_2 127.0.0.1:8712 check inter 500 fall 2 rise 2
    server relay_3 127.0.0.1:8713 check inter 500 fall 2 rise 2
C
haproxy -f "$R/haproxy.cfg" > "$R/haproxy.log" 2>&1 & pids+=($!)

# The cluster elects its JetStream leaders before the nodes can bind their buckets.
for _ in $(seq 1200); do
  ok=0; for i in 1 2 3; do [ "$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:871$i/readyz)" = 200 ] && ok=$((ok+1)); done
  [ $ok = 3 ] && break; sleep 0.1
done
[ $ok = 3 ] || { echo "fleet-example: relay nodes not ready in 120 s" >&2; tail -n 3 "$R"/relay-*.log "$R"/nats-1.log >&2; exit 1; }
sleep 1.5 # HAProxy's "rise 2" at 0.5 s
echo '$ curl -s 127.0.0.1:871{1,2,3}/readyz'
for i in 1 2 3; do echo "relay_$i: $(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:871$i/readyz)"; done

echo '$ CODEX_API_KEY=exec-tok-1 exec-server --remote http://127.0.0.1:8700 --environment-id build-1 &'
CODEX_API_KEY=exec-tok-1 "$ES" --remote http://127.0.0.1:8700 --environment-id build-1 \
  > "$R/executor.out" 2> "$R/executor.log" & pids+=($!)
home=
for _ in $(seq 300); do
  for i in 1 2 3; do [ "$(envsocks $i)" = 1 ] && home=$i; done
  [ -n "$home" ] && break; sleep 0.1
done
[ -n "$home" ] || { echo "fleet-example: the executor did not attach"; tail "$R/executor.log"; exit 1; }
for i in 1 2 3; do echo "relay_$i: executor sockets $(envsocks $i)"; done

echo "\$ CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=harness-tok-1 exec-server exec --remote http://127.0.0.1:8700 \\"
echo "      --environment-id build-1 -- sh -c 'echo hello through the fleet; uname -s'"
harness 'echo hello through the fleet; uname -s'; echo "exit $?"

echo "\$ kill -9 <relay_$home>                   # the executor's node"
t0=$(now); { kill -9 "${relay[$home]}"; wait "${relay[$home]}"; } 2>/dev/null
moved=
while [ -z "$moved" ] && [ "$(echo "$(since "$t0") < 30" | bc)" = 1 ]; do
  for i in 1 2 3; do [ "$i" != "$home" ] && [ "$(envsocks $i)" = 1 ] && moved=$i; done
  [ -n "$moved" ] || sleep 0.05
done
if [ -n "$moved" ]; then printf 'executor re-attached to relay_%s %.3f s after the kill\n' "$moved" "$(since "$t0")"
else echo "executor not re-attached within 30 s"; fi

echo "\$ CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN=harness-tok-1 exec-server exec --remote http://127.0.0.1:8700 \\"
echo "      --environment-id build-1 -- sh -c 'echo still here after the node loss'"
harness 'echo still here after the node loss'; echo "exit $?"
for i in 1 2 3; do [ "$i" = "$home" ] && continue
  echo "relay_$i: $(curl -s 127.0.0.1:871$i/metrics | grep -E '^exec_relay_(sockets\{role="environment"\}|fleet_takeovers_total|nats_connected) ' | tr '\n' ' ')"
done

echo '$ kill -9 <nats-1>                    # one of the three NATS servers'
t0=$(now); { kill -9 "${nats[1]}"; wait "${nats[1]}"; } 2>/dev/null
for k in $(seq 40); do
  if out=$(harness 'echo still here after losing a NATS server' 2>&1); then
    echo "$out"; printf 'exit 0 (admitted %.3f s after the kill, attempt %d)\n' "$(since "$t0")" "$k"; break
  fi
  echo "$out"; sleep 0.25
done
for i in 1 2 3; do [ "$i" = "$home" ] && continue
  echo "relay_$i: $(curl -s 127.0.0.1:871$i/metrics | grep -E '^exec_relay_(nats_connected|nats_disconnects_total) ' | tr '\n' ' ')"
done
