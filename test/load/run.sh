#!/usr/bin/env bash
# Load benchmark of tokengate over real gRPC, next to the gRPC floor.
#
# Runs ghz (pinned) against tokengate on one hot key and on 100k keys, and
# against test/load/noop (a ShouldRateLimit server with grpc-go defaults
# that answers OK without deciding anything), interleaved round by round so
# that both see the same machine. Servers are pinned to CPU 0 and ghz to
# CPU 1, so the load generator does not steal the server's core. Prints a
# Markdown table: requests/s, p50/p99, server CPU per request, and the ratio
# to the floor; then p50/p99 of both at half of tokengate's best rate.
#
#   bash test/load/run.sh                  # 2 rounds of 10 s per case
#   ROUNDS=1 DURATION=5s bash test/load/run.sh
#
# Only 127.0.0.1 is used; every ghz run is bounded by DURATION.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
CONCURRENCY=${CONCURRENCY:-64}
CONNECTIONS=${CONNECTIONS:-4}
TG_PORT=${TG_PORT:-18181}
TG_HTTP_PORT=${TG_HTTP_PORT:-18180}
NOOP_PORT=${NOOP_PORT:-18281}

. test/load/lib.sh
install_ghz
go build -o "$work/tokengate" ./cmd/tokengate
go build -o "$work/noop" ./test/load/noop

taskset -c 0 "$work/tokengate" --policy test/load/policy.yaml --log-level warn \
	--grpc-addr "127.0.0.1:$TG_PORT" --http-addr "127.0.0.1:$TG_HTTP_PORT" 2>"$work/tokengate.log" &
tg_pid=$!
pids+=("$tg_pid")
taskset -c 0 "$work/noop" -addr "127.0.0.1:$NOOP_PORT" 2>"$work/noop.log" &
noop_pid=$!
pids+=("$noop_pid")
wait_ports "$TG_PORT" "$NOOP_PORT"

# ghz_run NAME PORT PID DATA [extra ghz flags...]: one bounded run; appends
# "name rps p50_ms p99_ms cpu_us_per_req errors" to $work/results.
ghz_run() {
	local name=$1 port=$2 pid=$3 data=$4
	shift 4
	local t0 t1
	t0=$(ticks "$pid")
	taskset -c 1 "$ghz" --insecure \
		--call envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit \
		-c "$CONCURRENCY" --connections "$CONNECTIONS" -z "$DURATION" \
		-d "$data" -O json "$@" "127.0.0.1:$port" >"$work/out.json"
	t1=$(ticks "$pid")
	python3 - "$work/out.json" "$name" "$((t1 - t0))" "$hz" >>"$work/results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name, ticks, hz = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
# ghz closes its connections when DURATION ends, failing the calls still in
# flight on the client side ("use of closed network connection", "the client
# connection is closing"); those are not answers of the server and are not
# counted as errors.
errs = r.get("errorDistribution") or {}
cut = ("use of closed network connection", "the client connection is closing")
server = {e: n for e, n in errs.items() if not any(c in e for c in cut)}
errors = sum(server.values())
for e, n in server.items():
    print(f"{name}: {n} x {e}", file=sys.stderr)
cpu_us = ticks / hz / max(r["count"], 1) * 1e6
print(f'{name} {r["rps"]:.0f} {lat.get(50, 0):.3f} {lat.get(99, 0):.3f} {cpu_us:.2f} {errors}')
PY
}

hot='{"domain":"load","descriptors":[{"entries":[{"key":"user_id","value":"hot"}]}]}'
many='{"domain":"load","descriptors":[{"entries":[{"key":"user_id","value":"u{{randomInt 0 100000}}"}]}]}'

for round in $(seq "$ROUNDS"); do
	ghz_run "noop-hot" "$NOOP_PORT" "$noop_pid" "$hot"
	ghz_run "tokengate-hot" "$TG_PORT" "$tg_pid" "$hot"
	ghz_run "noop-100k" "$NOOP_PORT" "$noop_pid" "$many"
	ghz_run "tokengate-100k" "$TG_PORT" "$tg_pid" "$many"
done

# Latency at half of tokengate's best rate. A fixed rate needs only enough
# workers to cover rate x latency; with 64, ghz's own scheduling on its one
# core queues requests and its tail hides the server's, so this run uses
# HALF_CONCURRENCY workers, and the floor runs at the same rate beside it.
half=$(awk '$1=="tokengate-100k"{if($2>m)m=$2}END{print int(m/2)}' "$work/results")
CONCURRENCY=${HALF_CONCURRENCY:-8}
ghz_run "noop-100k@half" "$NOOP_PORT" "$noop_pid" "$many" --rps "$half"
before=$(curl -s "http://127.0.0.1:$TG_HTTP_PORT/metrics")
ghz_run "tokengate-100k@half" "$TG_PORT" "$tg_pid" "$many" --rps "$half"
after=$(curl -s "http://127.0.0.1:$TG_HTTP_PORT/metrics")

python3 - "$work/results" <<'PY'
import sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, rps, p50, p99, cpu, errors = line.split()
    runs[name].append((float(rps), float(p50), float(p99), float(cpu), int(errors)))
def mean(name, i):
    v = [r[i] for r in runs[name]]
    return sum(v) / len(v)
print("| case | rounds | requests/s | p50 ms | p99 ms | server CPU µs/req | errors | vs floor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for case in ("hot", "100k"):
    for name in (f"noop-{case}", f"tokengate-{case}"):
        ratio = mean(name, 0) / mean(f"noop-{case}", 0)
        print(f"| {name} | {len(runs[name])} | {mean(name,0):.0f} | {mean(name,1):.3f} | {mean(name,2):.3f} | {mean(name,3):.2f} | {sum(r[4] for r in runs[name])} | {ratio:.2f}x |")
for name in ("noop-100k@half", "tokengate-100k@half"):
    h = runs[name][0]
    print(f"| {name} ({h[0]:.0f} req/s, half of tokengate's best) | 1 | {h[0]:.0f} | {h[1]:.3f} | {h[2]:.3f} | {h[3]:.2f} | {h[4]} | |")
PY

# The server's own view of the half-rate run: tokengate_rpc_duration_seconds
# (handler time, without the network and ghz), from the scrape before and
# after it.
python3 - <(echo "$before") <(echo "$after") <<'PY'
import re, sys
def buckets(path):
    out = {}
    for line in open(path):
        m = re.match(r'tokengate_rpc_duration_seconds_bucket\{(.*)\} (\S+)$', line.strip())
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("code") == "OK" and labels.get("method", "").endswith("/ShouldRateLimit"):
            out[labels["le"]] = float(m.group(2))
    return out
b, a = buckets(sys.argv[1]), buckets(sys.argv[2])
delta = sorted(((float("inf") if le == "+Inf" else float(le), a[le] - b.get(le, 0)) for le in a), key=lambda x: x[0])
total = delta[-1][1]
for q in (0.5, 0.99):
    le = next(le for le, n in delta if n >= q * total)
    print(f"server-side p{int(q*100)} of the half-rate run: <= {le*1e3:g} ms ({total:.0f} RPCs)")
PY
