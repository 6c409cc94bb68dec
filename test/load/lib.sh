# Shared by the load benchmarks (test/load/run.sh, test/frontdoor/bench.sh);
# sourced from the repository's root, not run. It makes a work directory
# that is removed, with every process listed in pids, when the script exits.

GHZ_VERSION=v0.120.0

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# install_ghz installs the pinned ghz into the work directory and sets $ghz
# (test/frontdoor/bench.sh; test/load/run.sh uses test/load/loadclient).
install_ghz() {
	GOBIN="$work/bin" GOFLAGS=-mod=mod go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION"
	ghz="$work/bin/ghz"
}

# wait_ports PORT...: wait until each loopback port accepts connections,
# 10 s at most each.
wait_ports() {
	local port
	for port in "$@"; do
		for _ in $(seq 100); do
			(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
			sleep 0.1
		done
	done
}

# ticks PID: the process's user + system CPU time so far, in clock ticks
# ($hz a second).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
