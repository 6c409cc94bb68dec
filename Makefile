# The commands README.md documents. `make test` is what CI runs.
GO ?= go

.PHONY: test run bench vet
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Cardinality' ./pkg/store/memory/
	cd tools && $(GO) vet ./... && $(GO) test -count=1 ./...

run:
	$(GO) run ./cmd/tokengate

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
