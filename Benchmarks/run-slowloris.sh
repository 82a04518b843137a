#!/usr/bin/env bash
# Slow-client benchmark: how long a well-behaved request waits while a slowloris holds thousands of
# connections to dcverify (the release build as scripts/install makes it, built in its own scratch
# path, .build-release, so the debug build the tests use is left alone), against nginx under the
# same slowloris.
#
# The slowloris is Benchmarks/slowloris.py (Python sockets, independent of the Swift code):
# CONNECTIONS connections from the loopback addresses in SOURCES (127.0.0.2 and up; never another
# host), each sending a request head that never ends, a byte every 250 ms. During it, from
# 127.0.0.1, a well-behaved GET /health (GET / for nginx; the service's HTTP handling is what is
# measured, not verification) every 200 ms for DURATION seconds, each on a fresh connection, timed
# from connect() to the whole answer (at most 10 s). Every well-behaved request must be answered
# 200. (The verifier's files come from Benchmarks/mint-tokens.py.)
#
# Servers, each started afresh for its run:
#   dcverify           the defaults: 1024 connections, 256 per address, a 2 s head timeout
#   dcverify-no-limit  --max-connections-per-address 1024 (no per-address limit): only the head
#                      timeout frees connections; what the per-address limit buys
#   nginx              worker_connections 1024, client_header_timeout 2s: the peer (nginx has no
#                      per-address limit unless limit_conn is configured)
#
# Goal (docs/BENCHMARKS.md): with the defaults, every well-behaved request answered within 1 s
# during a slowloris of 5,000 connections.
#
# Environment: CONNECTIONS (5000), SOURCES (127.0.0.2,127.0.0.3,127.0.0.4), DURATION (10),
# SCRATCH_PATH (.build-release). Needs python3 with python3-cryptography, curl, and nginx for the
# peer (skipped, and said so, when it is not installed). The descriptor limit is raised to fit
# (ulimit -n; the slowloris raises its own). Takes about a minute after the build.
# SMOKE=1: the debug build, 200 connections, 2 s each; the same checks (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then
  CONNECTIONS=${CONNECTIONS:-200} SECONDS_EACH=${DURATION:-2}
else
  CONNECTIONS=${CONNECTIONS:-5000} SECONDS_EACH=${DURATION:-10}
  build_flags+=(--scratch-path "${SCRATCH_PATH:-.build-release}")
fi
SOURCES=${SOURCES:-127.0.0.2,127.0.0.3,127.0.0.4}
PYTHON=/usr/bin/python3
case ",$SOURCES," in *,127.0.0.1,*) echo "SOURCES must not hold 127.0.0.1 (the well-behaved client's)" >&2; exit 1 ;; esac
for source in ${SOURCES//,/ }; do
  case $source in 127.*) ;; *) echo "SOURCES are loopback addresses only: $source" >&2; exit 1 ;; esac
done
"$PYTHON" -c 'import cryptography' 2>/dev/null || { echo "missing: python3-cryptography" >&2; exit 1; }
command -v curl >/dev/null || { echo "missing: curl" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
machine

work=$(mktemp -d)
server_pid=''
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 0700 "$work/keys" "$work/nginx"
sandbox "$work"
build_products dcverify

# The verifier's files (no token is needed: the well-behaved request is GET /health).
"$PYTHON" Benchmarks/mint-tokens.py "$work/keys" --tokens 1 --delegations 1 > /dev/null

# start_dcverify ARG...: dcverify with the defaults and ARGs; sets server_pid and port.
start_dcverify() {
  rm -f "$work/port"
  "$bin/dcverify" serve --issuers "$work/keys/issuers.jwks" --revocations "$work/keys/revocations.json" \
    --listen 127.0.0.1:0 --port-file "$work/port" "$@" 2> "$work/dcverify.log" &
  server_pid=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || { echo "dcverify did not start: $(cat "$work/dcverify.log")" >&2; exit 1; }
  port=$(cat "$work/port")
  curl -sf -o /dev/null "http://127.0.0.1:$port/health" || { echo "dcverify does not answer" >&2; exit 1; }
}

start_nginx() {
  port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat > "$work/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log crit;
events { worker_connections 1024; }
http {
    access_log off;
    client_header_timeout 2s;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    server {
        listen 127.0.0.1:$port;
        location / { return 200; }
    }
}
EOF
  nginx -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
  server_pid=$!
  for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
  curl -sf -o /dev/null "http://127.0.0.1:$port/" || { echo "nginx did not start" >&2; exit 1; }
}

stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=''
}

# attack NAME PATH [HEADER_FILE]: the slowloris against the server on $port; its JSON line, named, into results.
attack() {
  "$PYTHON" Benchmarks/slowloris.py "$port" --connections "$CONNECTIONS" --sources "$SOURCES" \
    --seconds "$SECONDS_EACH" --path "$2" ${3:+--header-file "$3"} |
    "$PYTHON" -c 'import json, sys; r = json.loads(sys.stdin.read()); r["name"] = sys.argv[1]; print(json.dumps(r))' \
      "$1" >> "$work/results.jsonl"
}

echo "== slowloris: $CONNECTIONS connections from $SOURCES; a request from 127.0.0.1 every 200 ms for ${SECONDS_EACH}s"
start_dcverify
attack dcverify /health
stop_server
start_dcverify --max-connections-per-address 1024
attack dcverify-no-limit /health
stop_server
if command -v nginx >/dev/null; then
  start_nginx
  attack nginx /
  stop_server
else
  echo "  nginx is not installed (apt-get install nginx): no peer run" >&2
fi

"$PYTHON" - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
records = {r["name"]: r for r in map(json.loads, open(f"{work}/results.jsonl"))}
print(f"{'server':18} {'requests':>8} {'p50 ms':>8} {'max ms':>8} {'not 200':>7}  slow connections at the end")
for name, r in records.items():
    lat = r["latencies"]
    bad = sum(1 for s in r["statuses"] if s != 200)
    print(f"{name:18} {len(lat):8} {statistics.median(lat) * 1000:8.1f} {max(lat) * 1000:8.1f} {bad:7}  "
          f"{r['open']} open, {r['connecting']} connecting, {r['closed']} closed")
d = records["dcverify"]
if "nginx" in records:
    n = records["nginx"]
    print(f"dcverify max ÷ nginx max: {max(d['latencies']) / max(n['latencies']):.2f}")
open(f"{work}/goal", "w").write(f"{max(d['latencies'])} {sum(1 for s in d['statuses'] if s != 200)}\n")
PY
read -r slowest failed < "$work/goal"
[ "$failed" = 0 ] || { echo "FAILED: $failed well-behaved requests to dcverify were not answered 200" >&2; exit 1; }
goal "dcverify defaults, $CONNECTIONS slow connections: the slowest well-behaved request, s" "$slowest" "<" 1
