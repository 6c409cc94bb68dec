#!/usr/bin/env bash
# Load benchmark of tokengate over real gRPC, next to the gRPC floor.
#
# Runs test/load/loadclient (a closed-loop gRPC client) against tokengate on
# one hot key and on 100k keys, and against test/load/noop (a
# ShouldRateLimit server with grpc-go defaults that answers OK without
# deciding anything), interleaved round by round so that both see the same
# machine. Servers are pinned to CPU 0 and the client to CPU 1, so the load
# generator does not steal the server's core. Prints a Markdown table:
# requests/s, p50/p99, server CPU per request, the client's CPU (in cores:
# near 1.00 means the client, not the server, set the rate) and the ratio to
# the floor; then p50/p99 of both at half of tokengate's best rate, paced
# open loop (loadclient -rate).
#
#   bash test/load/run.sh                  # 2 rounds of 10 s per case
#   ROUNDS=1 DURATION=5s bash test/load/run.sh
#
# Only 127.0.0.1 is used (loadclient refuses anything else); every run
# lasts WARMUP + DURATION and loadclient stops it by itself.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
CONCURRENCY=${CONCURRENCY:-64}
CONNECTIONS=${CONNECTIONS:-4}
WARMUP=${WARMUP:-1s}
TG_PORT=${TG_PORT:-18181}
TG_HTTP_PORT=${TG_HTTP_PORT:-18180}
NOOP_PORT=${NOOP_PORT:-18281}

. test/load/lib.sh
go build -o "$work/tokengate" ./cmd/tokengate
go build -o "$work/noop" ./test/load/noop
go build -o "$work/loadclient" ./test/load/loadclient

taskset -c 0 "$work/tokengate" --policy test/load/policy.yaml --log-level warn \
	--grpc-addr "127.0.0.1:$TG_PORT" --http-addr "127.0.0.1:$TG_HTTP_PORT" 2>"$work/tokengate.log" &
tg_pid=$!
pids+=("$tg_pid")
taskset -c 0 "$work/noop" -addr "127.0.0.1:$NOOP_PORT" 2>"$work/noop.log" &
noop_pid=$!
pids+=("$noop_pid")
wait_ports "$TG_PORT" "$NOOP_PORT"

# load NAME PORT PID [extra loadclient flags...]: one bounded run; shows its
# RESULT line and appends "name rps p50_ms p99_ms cpu_us_per_req errors
# client_cores" to $work/results. Calls that the end of the run cut are not
# errors (loadclient counts them apart, as cut=).
load() {
	local name=$1 port=$2 pid=$3
	shift 3
	local line
	line=$(taskset -c 1 "$work/loadclient" -name "$name" -addr "127.0.0.1:$port" -pids "srv=$pid" \
		-c "$CONCURRENCY" -conns "$CONNECTIONS" -warmup "$WARMUP" -d "$DURATION" \
		-domain load -key user_id "$@")
	echo "$line" >&2
	awk '{for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
		print $2, f["rps"], f["p50"], f["p99"], f["srv_cpu_us_per_req"], f["errors"], f["client_cpu"]}' \
		<<<"$line" >>"$work/results"
}

for round in $(seq "$ROUNDS"); do
	load "noop-hot" "$NOOP_PORT" "$noop_pid" -hot
	load "tokengate-hot" "$TG_PORT" "$tg_pid" -hot
	load "noop-100k" "$NOOP_PORT" "$noop_pid" -keys 100000
	load "tokengate-100k" "$TG_PORT" "$tg_pid" -keys 100000
done

# Latency at half of tokengate's best rate, paced open loop: each of
# HALF_CONCURRENCY workers sends rate/HALF_CONCURRENCY calls a second on its
# own schedule (one call at a time, so they must cover rate x latency), and
# the floor runs at the same rate beside it. Go's timers wake about 1 ms
# late, so sends come in small bursts; latency is from the actual send.
half=$(awk '$1=="tokengate-100k"{if($2>m)m=$2}END{print int(m/2)}' "$work/results")
CONCURRENCY=${HALF_CONCURRENCY:-32}
load "noop-100k@half" "$NOOP_PORT" "$noop_pid" -keys 100000 -rate "$half"
before=$(curl -s "http://127.0.0.1:$TG_HTTP_PORT/metrics")
load "tokengate-100k@half" "$TG_PORT" "$tg_pid" -keys 100000 -rate "$half"
after=$(curl -s "http://127.0.0.1:$TG_HTTP_PORT/metrics")

python3 - "$work/results" "$CONCURRENCY" <<'PY'
import sys, collections
workers = sys.argv[2]
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, rps, p50, p99, cpu, errors, client = line.split()
    runs[name].append((float(rps), float(p50), float(p99), float(cpu), int(errors), float(client)))
def mean(name, i):
    v = [r[i] for r in runs[name]]
    return sum(v) / len(v)
print("| case | rounds | requests/s | p50 ms | p99 ms | server CPU µs/req | client cores | errors | vs floor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for case in ("hot", "100k"):
    for name in (f"noop-{case}", f"tokengate-{case}"):
        ratio = mean(name, 0) / mean(f"noop-{case}", 0)
        print(f"| {name} | {len(runs[name])} | {mean(name,0):.0f} | {mean(name,1):.3f} | {mean(name,2):.3f} | {mean(name,3):.2f} | {mean(name,5):.2f} | {sum(r[4] for r in runs[name])} | {ratio:.2f}x |")
for name in ("noop-100k@half", "tokengate-100k@half"):
    h = runs[name][0]
    print(f"| {name} (half of tokengate's best, {workers} workers) | 1 | {h[0]:.0f} | {h[1]:.3f} | {h[2]:.3f} | {h[3]:.2f} | {h[5]:.2f} | {h[4]} | |")
PY

# The server's own view of the half-rate run: tokengate_rpc_duration_seconds
# (handler time, without the network and the client), from the scrape before
# and after it.
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
