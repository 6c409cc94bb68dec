# The commands README.md documents. `make test` is what CI runs.
GO ?= go
# go-control-plane's vtprotobuf marshallers build only with this tag; the
# gRPC codec marshals ext_authz and RLQS responses with them when they are
# there (pkg/server/codec.go), 3x faster than proto.Marshal. The
# RateLimitService's messages are pkg/server/rlswire's in every build.
export GOFLAGS += -tags=vtprotobuf

.PHONY: test lint deps run bench fuzz
# staticcheck, pinned; `go run` builds it once into the build cache.
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

test: deps lint
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Cardinality' ./pkg/store/memory/
# Allocation counts, which the race detector's sync.Pool makes vary.
	$(GO) test -count=1 -run 'AllocatesNothing' ./pkg/service/
# The fuzz targets whose packages build without gRPC, briefly: an
# instrumented build of gRPC and go-control-plane took over two of CI's
# minutes for 4s of fuzzing a target. `make fuzz` runs all eight; every
# target's seeds and corpus run above as ordinary tests (BENCHMARKS.md,
# Fuzzing).
	$(call fuzz-each,$(FUZZ_QUICK),$(FUZZEXECS))
	cd tools && $(GO) test -count=1 ./...

# Fuzz targets as target:package. Redis answers make coverage vary between
# runs of one input, so minimising what looks new is capped.
#
# A -fuzztime of a duration can fail a target that found nothing, with a
# bare "context deadline exceeded": Go 1.26's fuzzing coordinator races
# its own deadline (go.dev/issue/75804, fixed in Go 1.27), as CI did once
# on FuzzCompatTree. `make test` so gives each of its targets a number of
# executions (FUZZEXECS), which sets no deadline; `make fuzz` keeps a
# time, as its targets' speeds differ a hundredfold.
FUZZTIME ?= 4s
FUZZEXECS ?= 40000x
FUZZ_QUICK = FuzzDescriptors:./pkg/frontdoor/spec/ FuzzParse:./pkg/policy/ FuzzCompatTree:./pkg/policy/
FUZZ_ALL = FuzzRequest:./pkg/server/ FuzzDecodeRequest:./pkg/server/rlswire/ $(FUZZ_QUICK) \
	FuzzConfig:./pkg/policy/xds/ FuzzForwardAuthQuery:./pkg/frontdoor/ FuzzLuaMatchesBucket:./pkg/store/redis/
define fuzz-each
	@for t in $(1); do f=$${t%%:*}; p=$${t#*:}; echo "fuzz $$f in $$p for $(2)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(2) -fuzzminimizetime 1s $$p || exit 1; done
endef

fuzz:
	$(call fuzz-each,$(FUZZ_ALL),$(FUZZTIME))

# gofmt, go vet and staticcheck over both modules.
lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt -l:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd tools && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

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
