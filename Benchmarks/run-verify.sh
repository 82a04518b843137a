#!/usr/bin/env bash
# Verification service benchmark: dcverify (the release build as scripts/install makes it: the Swift
# runtime linked in, --static-swift-stdlib) answering GET /verifyGDAuthToken on one
# pinned core, against nginx answering a static 200 on the same core and `openssl speed -seconds 5
# ecdsap256` (its one-core ECDSA P-256 verify rate), all in the same run.
#
# Cores: whatever is measured (dcverify with --threads 1, nginx with worker_processes 1, openssl
# speed) runs on core 1 (`taskset -c 1`); wrk runs on core 0 (`wrk -t1`). The machine has two
# cores and is shared with other jobs, so the measurements are interleaved: each of ROUNDS rounds
# runs openssl speed once and every server below for DURATION seconds at CONNECTIONS connections,
# and the summary takes medians over the rounds; a ratio to openssl uses the openssl rate of the
# same round. dcverify is started afresh for every wrk run. The server's CPU time (user+system,
# from /proc/PID/stat) is read around every run, so the CPU cost of a request is known even when
# another job takes part of the core.
#
# Servers, with the tokens minted by Benchmarks/mint-tokens.py (a Python implementation of the
# token format, independent of the Swift code) under one issuing key:
#   nginx            `return 200`, sent the same request as `same`
#   health           dcverify's GET /health, sent the same request: HTTP serving without verifying
#   same             one token in every request: its delegation is cached after the first, so a
#                    request costs one ECDSA verification
#   rotating         10 000 tokens under 10 delegations, taken in turn: one verification a request
#   distinct         20 000 tokens with a delegation each, taken in turn: more delegations than the
#                    verifier's cache keeps (10 000), so every request verifies two signatures
#   rotating-notice  `rotating` with --log-level notice: without the log line per verification
# Every answer must be HTTP 200 with X-Good-GD-AuthResponseCode: 100 OK (HTTP 200 for nginx and
# /health; Benchmarks/verify.lua counts the others); the script fails if one is not. Before and
# after every dcverify run, the first and last token of its mix must get 100 OK with the headers
# the minter's claims call for (challenge, server, user, app, container, version, creation time),
# and a forged copy of the last (one character of its signature changed) 101 Invalid Token. Tokens
# live at most 10 minutes, so they are minted again for every round, the sweep and the soak.
#
# After the rounds: a sweep over wrk's connection counts (SWEEP, SWEEP_DURATION seconds each, for
# nginx, same, rotating and distinct), for the load at which dcverify's p99 latency stays under
# 10 ms. wrk is a closed loop (each connection waits for its answer before sending again), so
# fewer connections means less load. Then a soak: SOAK seconds of the distinct mix (the delegation
# cache full and evicting) at CONNECTIONS connections, dcverify's resident memory (VmRSS in
# /proc/PID/status) sampled every 10 s.
#
# Then every core: the distinct mix against dcverify as it runs by default (an event-loop thread on
# each core, verifying on it), over EVERY_CORE_SWEEP connection counts; wrk shares the cores (the
# machine has no third), so part of what is measured is the client's cost.
#
# Goals (docs/BENCHMARKS.md): the rotating mix at least half of openssl's one-core verify rate,
# its p99 under 10 ms at that load, resident memory flat (within 10 %) over the soak, and the
# distinct mix (a delegation not seen before in every request) at half of openssl's one-core verify
# rate with p99 under 10 ms on every core.
#
# Environment: ROUNDS (3), DURATION (30), CONNECTIONS (8), SWEEP ("1 2 4 8 16 32 64"),
# EVERY_CORE_SWEEP ("2 4 8 16 32"),
# SWEEP_DURATION (10), SOAK (300, at most 540), LOG_LEVEL (info, dcverify's default: one log line
# per verification, sent to /dev/null here).
# Needs wrk, nginx, openssl, taskset, curl and Debian's python3 with python3-cryptography
# (apt-get install wrk nginx python3-cryptography); takes about 25 minutes with the defaults.
# SMOKE=1: the debug build, one round of 1 s, a sweep of one connection count, a 3 s soak sampled
# every second, 100 tokens per mix, openssl speed for 1 s; the same checks (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then
  ROUNDS=${ROUNDS:-1} DURATION=${DURATION:-1} SWEEP=${SWEEP:-2} SWEEP_DURATION=${SWEEP_DURATION:-1}
  EVERY_CORE_SWEEP=${EVERY_CORE_SWEEP:-2}
  SOAK=${SOAK:-3} SAMPLE_EVERY=1 SPEED_SECONDS=1 ROTATING_TOKENS=100 DISTINCT_TOKENS=100
else
  ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-30} SWEEP=${SWEEP:-1 2 4 8 16 32 64} SWEEP_DURATION=${SWEEP_DURATION:-10}
  EVERY_CORE_SWEEP=${EVERY_CORE_SWEEP:-2 4 8 16 32}
  SOAK=${SOAK:-300} SAMPLE_EVERY=10 SPEED_SECONDS=5 ROTATING_TOKENS=10000 DISTINCT_TOKENS=20000
fi
CONNECTIONS=${CONNECTIONS:-8}
LOG_LEVEL=${LOG_LEVEL:-info}
SERVER_CORE=1 CLIENT_CORE=0
PYTHON=/usr/bin/python3
[ "$SOAK" -le 540 ] || { echo "SOAK is at most 540 s: the tokens live 600 s" >&2; exit 1; }

missing=()
for tool in wrk nginx openssl taskset curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
"$PYTHON" -c 'import cryptography' 2>/dev/null || missing+=(python3-cryptography)
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing: ${missing[*]} (apt-get install wrk nginx openssl util-linux curl python3-cryptography)" >&2
  exit 1
fi
machine

work=$(mktemp -d)
dcverify_pid='' nginx_pid=''
cleanup() {
  for pid in $dcverify_pid $nginx_pid; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 0700 "$work/keys" "$work/nginx"
sandbox "$work"
results=$work/results.jsonl
touch "$results"
ticks_per_second=$(getconf CLK_TCK)

build_products dcverify

# The machine, for the record.
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
  echo "kernel: $(uname -r)"
  echo "openssl: $(openssl version)"
  echo "swift: $(swift --version 2>&1 | head -1)"
  echo "wrk: $(wrk -v 2>&1 | head -1)"
  echo "nginx: $(nginx -v 2>&1)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$work/machine.txt"

# mint MIX: fresh tokens for a mix into $work/MIX.tokens (the issuing key is made once and kept).
mint() {
  case $1 in
    same) "$PYTHON" Benchmarks/mint-tokens.py "$work/keys" --tokens 1 --delegations 1 ;;
    rotating) "$PYTHON" Benchmarks/mint-tokens.py "$work/keys" --tokens "$ROTATING_TOKENS" --delegations 10 ;;
    distinct) "$PYTHON" Benchmarks/mint-tokens.py "$work/keys" --tokens "$DISTINCT_TOKENS" --delegations "$DISTINCT_TOKENS" ;;
  esac > "$work/$1.tokens"
}
mint_all() { for mix in same rotating distinct; do mint "$mix"; done; }

# cpu_ticks PID: user+system clock ticks of PID and its children (nginx's worker is one).
cpu_ticks() {
  local total=0 pid
  for pid in "$1" $(pgrep -P "$1" || true); do
    # The fields after "PID (comm) ": utime and stime are the 12th and 13th.
    total=$((total + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')))
  done
  echo "$total"
}

# answers_100 PORT TOKENS WHEN: the first and last token of the file get 100 OK from dcverify, with
# the headers their claims (decoded here, as minted) call for, and a forged copy of the last (one
# character of its signature changed) gets 101 Invalid Token; else one line on standard error
# ("dcverify, WHEN: what differed") and a failure.
answers_100() {
  "$PYTHON" - "$@" <<'PY'
import base64, http.client, json, sys
port, path, when = int(sys.argv[1]), sys.argv[2], sys.argv[3]
tokens = [line for line in open(path).read().split("\n") if line]
def claims(jws):
    payload = jws.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
def ask(token):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/verifyGDAuthToken", headers={"X-Good-GD-AuthToken": token})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders() if k.lower().startswith("x-good-gd-")}
def expect(token, want, what):
    got = ask(token)
    if got != (200, {k.lower(): v for k, v in want.items()}):
        sys.exit(f"dcverify, {when}: {what}: answered {got}, expected HTTP 200 with {want}")
for token in (tokens[0], tokens[-1]):
    delegation, claim = (claims(jws) for jws in token.split("~"))
    expect(token, {"X-Good-GD-AuthResponseCode": "100 OK", "X-Good-GD-AuthChallenge": claim["ch"],
                   "X-Good-GD-Server": claim["srv"], "X-Good-GD-UserID": delegation["sub"],
                   "X-Good-GD-AppID": delegation["app"], "X-Good-GD-ContainerID": delegation["ctr"],
                   "X-Good-GD-AuthTokenVersion": str(claim["v"]), "X-Good-GD-AuthTokenCreationTime": str(claim["iat"])},
           "a minted token")
at = len(tokens[-1]) - 10
forged = tokens[-1][:at] + ("B" if tokens[-1][at] == "A" else "A") + tokens[-1][at + 1:]
expect(forged, {"X-Good-GD-AuthResponseCode": "101 Invalid Token"}, "a forged token")
PY
}

# start_dcverify LOG_LEVEL [every-core]: dcverify on the server core, one event-loop thread (with
# every-core: on every core, an event-loop thread each, the service's default); sets dcverify_pid
# and port.
start_dcverify() {
  rm -f "$work/port"
  local cores=$SERVER_CORE threads=1
  if [ "${2:-}" = every-core ]; then cores=0-$(($(nproc) - 1)) threads=$(nproc); fi
  taskset -c "$cores" "$bin/dcverify" serve --issuers "$work/keys/issuers.jwks" \
    --revocations "$work/keys/revocations.json" --listen 127.0.0.1:0 --port-file "$work/port" \
    --threads "$threads" --log-level "$1" 2>/dev/null &
  dcverify_pid=$!
  for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
  [ -s "$work/port" ] || { echo "dcverify did not start" >&2; exit 1; }
  port=$(cat "$work/port")
}

stop_dcverify() {
  kill -TERM "$dcverify_pid"
  wait "$dcverify_pid" || { echo "dcverify exited with status $?" >&2; exit 1; }
  dcverify_pid=''
}

# run_wrk NAME PHASE CONNECTIONS SECONDS PORT TOKENS EXPECT PATH SERVER_PID: one wrk run; its
# result (verify.lua's JSON line, with the server's CPU seconds and the load average) goes into
# the results, and a line about it to standard error.
run_wrk() {
  local name=$1 phase=$2 connections=$3 seconds=$4 port=$5 tokens=$6 expect=$7 path=$8 pid=$9
  local before after out=$work/wrk-$phase-$name-$connections.txt
  before=$(cpu_ticks "$pid")
  taskset -c "${client_cores:-$CLIENT_CORE}" wrk -t1 -c "$connections" -d "${seconds}s" --latency -s Benchmarks/verify.lua \
    "http://127.0.0.1:$port$path" -- "$tokens" "$expect" "$path" > "$out"
  after=$(cpu_ticks "$pid")
  "$PYTHON" - "$name" "$phase" "$connections" "$((after - before))" "$ticks_per_second" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$(tail -1 "$out")" >> "$results" <<'PY'
import json, sys
name, phase, connections, ticks, hz, load, line = sys.argv[1:]
r = json.loads(line)
r.update(name=name, phase=phase, connections=int(connections), cpu_s=int(ticks) / int(hz), load=float(load))
r["rate"] = r["requests"] / (r["duration_us"] / 1e6)
print(json.dumps(r))
print(f"  {phase:7} {name:15} c={connections:<3} {r['rate']:6.0f} req/s  p50 {r['p50_us'] / 1000:6.2f} ms  "
      f"p99 {r['p99_us'] / 1000:6.2f} ms  CPU {r['cpu_s'] / r['requests'] * 1e6:4.0f} us/req  bad {r['bad']}  "
      f"socket errors {r['socket_errors'] + r['timeouts']}  load {load}", file=sys.stderr)
PY
}

# measure SERVER PHASE CONNECTIONS SECONDS: one wrk run against nginx, or against a fresh dcverify
# that is checked before and after.
measure() {
  local server=$1 phase=$2 connections=$3 seconds=$4 tokens path=/verifyGDAuthToken expect=100 level=$LOG_LEVEL
  case $server in
    nginx)
      run_wrk nginx "$phase" "$connections" "$seconds" "$nginx_port" "$work/same.tokens" 200 "$path" "$nginx_pid"
      return ;;
    health) tokens=$work/same.tokens path=/health expect=200 ;;
    rotating-notice) tokens=$work/rotating.tokens level=notice ;;
    distinct-every-core) tokens=$work/distinct.tokens ;;
    *) tokens=$work/$server.tokens ;;
  esac
  local client_cores=$CLIENT_CORE
  if [ "$server" = distinct-every-core ]; then
    start_dcverify "$level" every-core
    client_cores=0-$(($(nproc) - 1))
  else
    start_dcverify "$level"
  fi
  answers_100 "$port" "$tokens" "before the $server run" || exit 1
  run_wrk "$server" "$phase" "$connections" "$seconds" "$port" "$tokens" "$expect" "$path" "$dcverify_pid"
  answers_100 "$port" "$tokens" "after the $server run" || exit 1
  stop_dcverify
}

# nginx: its own configuration and prefix in the work directory, one worker, on the server core.
nginx_port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    server {
        listen 127.0.0.1:$nginx_port;
        location / { return 200; }
    }
}
EOF
taskset -c "$SERVER_CORE" nginx -e "$work/nginx/error.log" -p "$work/nginx" -c "$work/nginx/nginx.conf" &
nginx_pid=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$nginx_port/" && break; sleep 0.1; done
curl -sf -o /dev/null "http://127.0.0.1:$nginx_port/" || { echo "nginx did not start" >&2; exit 1; }

echo "== $ROUNDS rounds, interleaved, c=$CONNECTIONS, ${DURATION}s each"
for round in $(seq "$ROUNDS"); do
  mint_all
  rate=$(taskset -c "$SERVER_CORE" openssl speed -seconds "$SPEED_SECONDS" ecdsap256 2>/dev/null |
    awk '/bits ecdsa \(nistp256\)/ {print $NF}')
  echo "{\"name\": \"openssl\", \"phase\": \"round$round\", \"rate\": $rate}" >> "$results"
  echo "  round$round  openssl speed ecdsap256: $rate verify/s on one core" >&2
  for server in nginx health same rotating distinct rotating-notice; do
    measure "$server" "round$round" "$CONNECTIONS" "$DURATION"
  done
done

echo "== sweep over connections: ${SWEEP_DURATION}s each"
mint_all
for connections in $SWEEP; do
  for server in nginx same rotating distinct; do
    measure "$server" sweep "$connections" "$SWEEP_DURATION"
  done
done

echo "== every core: the distinct mix, dcverify with an event loop on each of the $(nproc) cores and wrk sharing them"
mint distinct
for connections in $EVERY_CORE_SWEEP; do
  measure distinct-every-core every-core "$connections" "$SWEEP_DURATION"
done

echo "== soak: ${SOAK}s of the distinct mix at c=$CONNECTIONS, VmRSS every $SAMPLE_EVERY s"
mint distinct
start_dcverify "$LOG_LEVEL"
answers_100 "$port" "$work/distinct.tokens" "before the soak" || exit 1
echo "idle $(awk '/^VmRSS/ {print $2}' "/proc/$dcverify_pid/status")" > "$work/soak.txt"
run_wrk distinct soak "$CONNECTIONS" "$SOAK" "$port" "$work/distinct.tokens" 100 /verifyGDAuthToken \
  "$dcverify_pid" &
wrk_job=$!
started=$SECONDS
while sleep "$SAMPLE_EVERY" && kill -0 "$wrk_job" 2>/dev/null; do
  echo "$((SECONDS - started)) $(awk '/^VmRSS/ {print $2}' "/proc/$dcverify_pid/status")" >> "$work/soak.txt"
done
wait "$wrk_job"
answers_100 "$port" "$work/distinct.tokens" "after the soak" || exit 1
stop_dcverify
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$work/machine.txt"

"$PYTHON" - "$work" <<'PY'
import json, math, statistics, sys
work = sys.argv[1]
records = [json.loads(line) for line in open(f"{work}/results.jsonl")]
print()
print(open(f"{work}/machine.txt").read().rstrip())
mixes = ["same", "rotating", "distinct"]
label = lambda name: name if name == "nginx" else f"dcverify {name}"
rounds = [r for r in records if r["phase"].startswith("round")]
openssl = {r["phase"]: r["rate"] for r in rounds if r["name"] == "openssl"}
openssl_median = statistics.median(openssl.values())

openssl_rounds = ", ".join(f"{v:.0f}" for v in openssl.values())
print(f"\nRounds: medians of {len(openssl)}. openssl speed ecdsap256, verify on one core: {openssl_median:.0f}/s "
      f"({openssl_rounds}), {1e6 / openssl_median:.0f} us each")
print(f"{'server':25} {'conns':>5} {'req/s':>7} {'÷ openssl':>9} {'p50 ms':>7} {'p99 ms':>7} {'CPU us/req':>10} "
      f"{'req/CPU-s':>9}  req/s by round")
for name in ["nginx", "health"] + mixes + ["rotating-notice"]:
    runs = [r for r in rounds if r["name"] == name]
    cpu = statistics.median([r["cpu_s"] / r["requests"] * 1e6 for r in runs])
    by_round = ", ".join(f"{r['rate']:.0f}" for r in runs)
    print(f"{label(name):25} {runs[0]['connections']:5} {statistics.median([r['rate'] for r in runs]):7.0f} "
          f"{statistics.median([r['rate'] / openssl[r['phase']] for r in runs]):9.2f} "
          f"{statistics.median([r['p50_us'] for r in runs]) / 1000:7.2f} "
          f"{statistics.median([r['p99_us'] for r in runs]) / 1000:7.2f} {cpu:10.0f} {1e6 / cpu:9.0f}  {by_round}")

sweep = [r for r in records if r["phase"] == "sweep"]
connections = sorted({r["connections"] for r in sweep})
print("\nSweep over connections: req/s / p99 ms")
print(f"{'server':18} " + " ".join(f"c={c}".rjust(15) for c in connections))
best = {}
for name in ["nginx"] + mixes:
    cells = []
    for c in connections:
        r = next(r for r in sweep if r["name"] == name and r["connections"] == c)
        cells.append(f"{r['rate']:6.0f} / {r['p99_us'] / 1000:5.2f}")
        if r["p99_us"] < 10_000 and r["rate"] > best.get(name, {"rate": 0})["rate"]:
            best[name] = r
    print(f"{label(name):18} " + " ".join(cell.rjust(15) for cell in cells))

every = sorted((r for r in records if r["phase"] == "every-core"), key=lambda r: r["connections"])
print(f"\nEvery core ({len(every) and 'distinct mix'}): req/s / p99 ms / CPU us per request, and ÷ openssl's one-core rate")
for r in every:
    print(f"  c={r['connections']:<3} {r['rate']:6.0f} / {r['p99_us'] / 1000:6.2f} / {r['cpu_s'] / r['requests'] * 1e6:4.0f}"
          f"  {r['rate'] / openssl_median:.2f}")
under = [r for r in every if r["p99_us"] < 10_000]
every_best = max(under, key=lambda r: r["rate"]) if under else None

soak = open(f"{work}/soak.txt").read().split("\n")
idle = int(soak[0].split()[1])
samples = [tuple(map(int, line.split())) for line in soak[1:] if line.strip()]
soak_run = next(r for r in records if r["phase"] == "soak")
after_minute = next((kib for second, kib in samples if second >= 60), samples[-1][1])
last, peak = samples[-1][1], max(kib for _, kib in samples)
print(f"\nSoak: {soak_run['rate']:.0f} req/s for {soak_run['duration_us'] / 1e6:.0f} s (p99 "
      f"{soak_run['p99_us'] / 1000:.2f} ms); VmRSS idle {idle / 1024:.1f} MiB, first sample {samples[0][1] / 1024:.1f}, "
      f"after 60 s {after_minute / 1024:.1f}, last {last / 1024:.1f}, max {peak / 1024:.1f} MiB")
print("  samples (s: MiB): " + ", ".join(f"{second}: {kib / 1024:.1f}" for second, kib in samples))

bad = sum(r.get("bad", 0) for r in records)
errors = sum(r.get("socket_errors", 0) + r.get("timeouts", 0) for r in records)
requests = sum(r.get("requests", 0) for r in records)
print(f"\nAnswers that were not 100 OK (200 for nginx and /health): {bad} of {requests}; "
      f"socket errors and timeouts: {errors}")
print("\nGoals:")
headline = [r for r in rounds if r["name"] == "rotating"]
rate = statistics.median([r["rate"] for r in headline])
p99 = statistics.median([r["p99_us"] for r in headline]) / 1000
ratio = statistics.median([r["rate"] / openssl[r["phase"]] for r in headline])
print(f"  rotating mix at c={headline[0]['connections']}: {rate:.0f} tokens/s = {ratio:.2f} of openssl's one-core "
      f"verify rate, p99 {p99:.2f} ms")
for name in mixes:
    if name in best:
        r = best[name]
        print(f"  {name}: the highest rate with p99 < 10 ms in the sweep: {r['rate']:.0f} tokens/s at "
              f"c={r['connections']} ({r['rate'] / openssl_median:.2f} of openssl); one-core instances for "
              f"10 000/s: {math.ceil(10_000 / r['rate'])}, for 50 000/s: {math.ceil(50_000 / r['rate'])}")
    else:
        print(f"  {name}: p99 was over 10 ms at every load in the sweep")
if every_best:
    print(f"  distinct on every core: the highest rate with p99 < 10 ms: {every_best['rate']:.0f} tokens/s at "
          f"c={every_best['connections']} (p99 {every_best['p99_us'] / 1000:.2f} ms), "
          f"{every_best['rate'] / openssl_median:.2f} of openssl's one-core verify rate")
else:
    print("  distinct on every core: p99 was over 10 ms at every load")
print(f"  resident memory over {soak_run['duration_us'] / 1e6:.0f} s: last {last / 1024:.1f} MiB against "
      f"{after_minute / 1024:.1f} MiB after the first minute")
every_ratio = every_best["rate"] / openssl_median if every_best else 0
open(f"{work}/goals", "w").write(
    f"{ratio:.2f} {p99:.2f} {abs(last - after_minute) / after_minute * 100:.1f} {every_ratio:.2f}\n")
if bad:
    sys.exit("FAILED: some answers were not 100 OK")
PY
read -r ratio p99 drift every_ratio < "$work/goals"
goal "rotating mix: dcverify's rate / openssl speed's one-core verify rate" "$ratio" ">=" 0.5
goal "rotating mix: p99 at that load, ms" "$p99" "<" 10
goal "resident memory over the soak: change from the first minute, %" "$drift" "<=" 10
goal "distinct mix on every core: the highest rate with p99 < 10 ms / openssl's one-core verify rate" \
  "$every_ratio" ">=" 0.5
