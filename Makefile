# Peregrine: `make run` serves the example app, `make test` runs every test.
GO      ?= go
BIN     := bin/peregrine
ADDRESS ?= 127.0.0.1:8080

include native/native.mk

.PHONY: all setup build run test test-go test-php lint fuzz stress bench clean

all: build

setup: .setup-done
.setup-done: scripts/setup.sh go.mod
	./scripts/setup.sh
	@touch $@

build: setup native
	$(GO) build -o $(BIN) ./cmd/peregrine

run: build
	$(BIN) serve examples/hello/worker.php --address $(ADDRESS)

# WordPress from Debian's package in classic mode (examples/wordpress/README.md).
wordpress: build
	ADDRESS=$(ADDRESS) examples/wordpress/serve.sh

test: setup lint test-go test-php test-native

lint:
	@unformatted=$$(gofmt -l cmd internal integration); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags stress ./integration
	$(GO) tool staticcheck ./...

test-go:
	$(GO) test -race -count=1 -timeout 10m ./...

test-php:
	cd php && phpunit

# A short fuzzing pass over every decoder and over the HTTP-to-frame encoding; crashers land in
# testdata/fuzz and become regression tests. FUZZTIME=10m for a longer pass.
FUZZTIME ?= 30s
fuzz: fuzz-native
	for f in FuzzDecodeResponse FuzzReadFrame FuzzRequestRoundTrip FuzzDecodeRequest; do \
	  $(GO) test ./internal/protocol -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	$(GO) test ./internal/httpserver -run '^$$' -fuzz '^FuzzHandlerFrame$$' -fuzztime $(FUZZTIME)

# The stress suite (docs/reliability.md): the real binary and PHP workers under a steady load,
# one fault at a time, then a 10-minute soak; about 20 minutes. The output, with each
# scenario's FIGURES line, is kept in bin/stress.log. STRESS_SCALE=0.2 STRESS_SOAK=1m for a
# short pass.
stress: build
	@{ $(GO) test -tags stress -race=false -count=1 -timeout 40m -run Stress -v ./integration 2>&1; \
	  echo $$? > bin/stress.status; } | tee bin/stress.log
	@grep -o 'FIGURES .*' bin/stress.log || true
	@exit $$(cat bin/stress.status)

# Benchmarks against nginx + PHP-FPM, php -S and pure Go (not a test: CI does not run it); see
# docs/benchmarks.md. QUICK=1 runs one short pass of each scenario (under 2 minutes).
bench: build
	bash bench/setup.sh
	$(GO) run ./bench/cmd/bench $(if $(QUICK),-quick)

clean:
	rm -rf bin .setup-done
