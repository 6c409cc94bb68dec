#!/usr/bin/env bash
# Load benchmark of the front doors over real sockets: HTTP forward-auth
# (GET /v1/check) with wrk, next to Envoy's two gRPC front doors
# (ext_authz Authorization/Check and ratelimit ShouldRateLimit) with ghz,
# all deciding the same rule, and GET /healthz on the same HTTP server as
# the HTTP floor. Each case runs on one hot key and on 100k keys. tokengate
# is pinned to CPU 0 and the load generator to CPU 1. Prints a Markdown
# table: requests/s, p50/p99 and server CPU per request.
#
#   bash test/frontdoor/bench.sh                 # 10 s per case
#   DURATION=5 bash test/frontdoor/bench.sh
#
# Needs wrk (apt-get install -y wrk); installs the pinned ghz
# (test/load/lib.sh). Only 127.0.0.1 is used; every run lasts DURATION.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-64}
CONNECTIONS=${CONNECTIONS:-4}
GRPC_PORT=${GRPC_PORT:-18191}
HTTP_PORT=${HTTP_PORT:-18190}

. test/load/lib.sh
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
install_ghz
go build -o "$work/tokengate" ./cmd/tokengate


taskset -c 0 "$work/tokengate" --policy test/load/policy.yaml --log-level warn \
	--grpc-addr "127.0.0.1:$GRPC_PORT" --http-addr "127.0.0.1:$HTTP_PORT" 2>"$work/tokengate.log" &
tg=$!
pids+=("$tg")
wait_ports "$GRPC_PORT" "$HTTP_PORT"

# The headers Traefik sends, with the user id fixed (hot) or one of 100k.
cat >"$work/hot.lua" <<'EOF'
wrk.headers["X-Forwarded-For"] = "198.51.100.7"
wrk.headers["X-Forwarded-Method"] = "GET"
wrk.headers["X-Forwarded-Proto"] = "https"
wrk.headers["X-Forwarded-Host"] = "app.example.com"
wrk.headers["X-Forwarded-Uri"] = "/api/items?page=2"
wrk.headers["X-User-Id"] = "hot"
EOF
cat "$work/hot.lua" >"$work/many.lua"
cat >>"$work/many.lua" <<'EOF'
request = function()
	wrk.headers["X-User-Id"] = "u" .. math.random(0, 99999)
	return wrk.format("GET", "/v1/check")
end
EOF
: >"$work/healthz.lua"

# wrk_run NAME PATH SCRIPT: one bounded run; appends
# "name rps p50_ms p99_ms cpu_us_per_req non2xx" to $work/results.
wrk_run() {
	local t0 t1
	t0=$(ticks "$tg")
	taskset -c 1 wrk -t1 -c"$CONCURRENCY" -d"${DURATION}s" --latency -s "$3" "http://127.0.0.1:$HTTP_PORT$2" >"$work/out.txt"
	t1=$(ticks "$tg")
	python3 - "$work/out.txt" "$1" "$((t1 - t0))" "$hz" >>"$work/results" <<'PY'
import re, sys
out, name, ticks, hz = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
unit = {"us": 1e-3, "ms": 1.0, "s": 1e3}
def pct(p):
    m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    return float(m.group(1)) * unit[m.group(2)]
total = int(re.search(r"(\d+) requests in", out).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{name} {rps:.0f} {pct(50):.3f} {pct(99):.3f} {ticks / hz / max(total, 1) * 1e6:.2f} {bad.group(1) if bad else 0}")
PY
}

# ghz_run NAME METHOD DATA: the same for a gRPC method.
ghz_run() {
	local t0 t1
	t0=$(ticks "$tg")
	taskset -c 1 "$ghz" --insecure --call "$2" -c "$CONCURRENCY" --connections "$CONNECTIONS" \
		-z "${DURATION}s" -d "$3" -O json "127.0.0.1:$GRPC_PORT" >"$work/out.json"
	t1=$(ticks "$tg")
	python3 - "$work/out.json" "$1" "$((t1 - t0))" "$hz" >>"$work/results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name, ticks, hz = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lat = {d["percentage"]: d["latency"] / 1e6 for d in r.get("latencyDistribution") or []}
errs = r.get("errorDistribution") or {}
errors = sum(n for e, n in errs.items() if "use of closed network connection" not in e)
print(f'{name} {r["rps"]:.0f} {lat.get(50, 0):.3f} {lat.get(99, 0):.3f} {ticks / hz / max(r["count"], 1) * 1e6:.2f} {errors}')
PY
}

check() {
	echo '{"attributes":{"source":{"address":{"socket_address":{"address":"198.51.100.7","port_value":40000}}},"request":{"http":{"method":"GET","path":"/api/items?page=2","host":"app.example.com","scheme":"https","headers":{"x-user-id":"'"$1"'"}}}}}'
}
rls() { echo '{"domain":"load","descriptors":[{"entries":[{"key":"user_id","value":"'"$1"'"}]}]}'; }
many='u{{randomInt 0 100000}}'

wrk_run "http-floor:/healthz" /healthz "$work/healthz.lua"
wrk_run "forward_auth-hot" /v1/check "$work/hot.lua"
wrk_run "forward_auth-100k" /v1/check "$work/many.lua"
ghz_run "ext_authz-hot" envoy.service.auth.v3.Authorization.Check "$(check hot)"
ghz_run "ext_authz-100k" envoy.service.auth.v3.Authorization.Check "$(check "$many")"
ghz_run "ratelimit-hot" envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit "$(rls hot)"
ghz_run "ratelimit-100k" envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit "$(rls "$many")"

echo "| case | requests/s | p50 ms | p99 ms | server CPU µs/req | errors or non-2xx |"
echo "| --- | --- | --- | --- | --- | --- |"
awk '{printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6}' "$work/results"
decided=$(curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | grep '^tokengate_front_door_requests_total' | grep -v ' 0$' || true)
echo
echo "$decided"
