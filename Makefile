# The commands README.md documents. `make test` is what CI runs.
GO ?= go

.PHONY: test deps run bench
test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Cardinality' ./pkg/store/memory/
	cd tools && $(GO) vet ./... && $(GO) test -count=1 ./...

# The Redis store's tests start real redis-server processes (and a cluster
# with redis-cli), and build a clock shim with cc. Install them when missing
# and we may; say so otherwise.
deps:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq redis-server; } || \
	{ echo "make test needs redis-server and redis-cli: apt-get install redis-server"; exit 1; }
	@command -v cc >/dev/null || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && apt-get install -y -qq gcc libc6-dev; } || \
	{ echo "make test needs a C compiler for the clock-step tests: apt-get install gcc"; exit 1; }

run:
	$(GO) run ./cmd/tokengate

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
