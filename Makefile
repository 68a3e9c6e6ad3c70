# Peregrine: `make run` serves the example app, `make test` runs every test.
GO      ?= go
BIN     := bin/peregrine
ADDRESS ?= 127.0.0.1:8080

.PHONY: all setup build run test test-go test-php lint fuzz bench clean

all: build

setup: .setup-done
.setup-done: scripts/setup.sh go.mod
	./scripts/setup.sh
	@touch $@

build: setup
	$(GO) build -o $(BIN) ./cmd/peregrine

run: build
	$(BIN) serve examples/hello/worker.php --address $(ADDRESS)

test: setup lint test-go test-php

lint:
	@unformatted=$$(gofmt -l cmd internal integration); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

test-go:
	$(GO) test -race -count=1 -timeout 10m ./...

test-php:
	cd php && phpunit

# A short fuzzing pass over every decoder; crashers land in testdata/fuzz and become regression tests.
fuzz:
	for f in FuzzDecodeResponse FuzzReadFrame FuzzRequestRoundTrip FuzzDecodeRequest; do \
	  $(GO) test ./internal/protocol -run '^$$' -fuzz "^$$f$$" -fuzztime 30s || exit 1; done

clean:
	rm -rf bin .setup-done
