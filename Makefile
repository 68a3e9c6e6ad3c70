# Peregrine: `make run` serves the example app, `make test` runs every test.
GO      ?= go
BIN     := bin/peregrine
ADDRESS ?= 127.0.0.1:8080

include native/native.mk

.PHONY: all setup build run test test-go test-fuzz-http1 test-fuzz-websocket test-php lint fuzz stress bench bench-websocket clean install deb

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

test: setup lint test-go test-fuzz-http1 test-fuzz-websocket test-php test-native

lint:
	@unformatted=$$(gofmt -l cmd internal integration); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags stress ./integration
	$(GO) vet -tags poison ./internal/worker ./integration
	$(GO) tool staticcheck ./...

# POISON_TESTS run again in a poison build (docs/protocol.md, "Who owns a request's bytes"):
# every buffer and body file the server releases is overwritten first.
POISON_TESTS := TestCall|TestExecHoldsARequestsBytesUntilItEnded|TestFrameCarriesTheRequest|TestBodyOfEverySizeArrivesWhole|TestConcurrentAnswersCarryTheirOwnData|TestLateBodyReadsGetTheirOwnBody|TestRefusedLargePutsKeepTheirWorker|TestLargeRequestsWithLargeAnswersDoNotWedge|TestConcurrentPostsRunAtMostOnce
test-go: native
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -race -count=1 -timeout 10m -tags poison -run '$(POISON_TESTS)' ./internal/worker ./internal/pool ./internal/httpserver ./integration

# A few seconds of real fuzzing of the HTTP/1 reader on every test run: FuzzDifferential
# against net/http's, FuzzConnection for crashes (their seed corpora run in test-go already).
# Budgets are counts of inputs (a few seconds each on a quiet machine), not durations: a duration
# races Go's fuzzing coordinator at its deadline and fails with a bare "context deadline
# exceeded" and no input (go.dev/issue/75804, fixed in Go 1.27; CI has 1.26).
test-fuzz-http1:
	$(GO) test ./internal/http1 -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 25000x -timeout 5m
	$(GO) test ./internal/http1 -run '^$$' -fuzz '^FuzzConnection$$' -fuzztime 80000x -timeout 5m

# The same for WebSocket frames after an upgrade: FuzzDifferential against coder/websocket,
# FuzzHub for crashes, hangs and leaked goroutines.
test-fuzz-websocket:
	$(GO) test ./internal/websocket -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime 6000x -timeout 5m
	$(GO) test ./internal/websocket -run '^$$' -fuzz '^FuzzHub$$' -fuzztime 800x -timeout 5m

test-php:
	cd php && phpunit

# A short fuzzing pass over every decoder and over the HTTP-to-frame encoding; crashers land in
# testdata/fuzz and become regression tests. FUZZTIME=10m for a longer pass.
FUZZTIME ?= 30s
fuzz: fuzz-native
	for f in FuzzDecodeResponse FuzzReadFrame FuzzRequestRoundTrip FuzzDecodeRequest; do \
	  $(GO) test ./internal/protocol -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	$(GO) test ./internal/httpserver -run '^$$' -fuzz '^FuzzHandlerFrame$$' -fuzztime $(FUZZTIME)
	for f in FuzzDifferential FuzzConnection; do \
	  $(GO) test ./internal/http1 -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	for f in FuzzDifferential FuzzHub; do \
	  $(GO) test ./internal/websocket -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

# The stress suite (docs/reliability.md): the real binary and PHP workers under a steady load,
# one fault at a time, then two 10-minute soaks (exec'd and forked workers); about 30 minutes. The output, with each
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

# Issue 26's WebSocket targets on the real server (docs/websocket.md, "Measured").
bench-websocket: build
	$(GO) run ./bench/cmd/wsbench -conns 10000 -echo 50

# make install [PREFIX=/usr/local] [DESTDIR=]: PREFIX/bin/peregrine, peregrine-php and its
# peregrine-php-engine.so (PEREGRINE_PHP_ENGINE, native/engine.c) (peregrine-php
# finds its runtime beside it) and the PHP library in PREFIX/share/peregrine/php (where
# --laravel and --symfony find it; a worker script requires its autoload.php). It builds what it
# installs, without setup.sh; BIN names the daemon binary it builds.
PREFIX  ?= /usr/local
DESTDIR ?=
install: native
	$(GO) build -trimpath -o $(BIN) ./cmd/peregrine
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/peregrine/php
	install -m 755 $(BIN) $(NATIVE_BIN) $(NATIVE_ENGINE) $(DESTDIR)$(PREFIX)/bin/
	cp -R php/src php/bin php/autoload.php php/composer.json php/README.md $(DESTDIR)$(PREFIX)/share/peregrine/php/
	chmod -R u=rwX,go=rX $(DESTDIR)$(PREFIX)/share/peregrine

# make deb [DEB_OUT=bin]: DEB_OUT/peregrine_VERSION_ARCH.deb, built with dpkg-deb from
# make install PREFIX=/usr and packaging/ (the systemd unit, /etc/peregrine/peregrine.yaml).
VERSION  := $(shell sed -n 's/^const Version = "\(.*\)"/\1/p' internal/daemon/daemon.go)
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB_OUT  ?= bin
DEB_ROOT  = $(DEB_OUT)/deb-root
deb:
	rm -rf $(DEB_ROOT)
	$(MAKE) --no-print-directory install PREFIX=/usr DESTDIR=$(abspath $(DEB_ROOT)) BIN=$(abspath $(DEB_OUT))/peregrine
	install -D -m 644 packaging/peregrine.service $(DEB_ROOT)/lib/systemd/system/peregrine.service
	install -D -m 644 packaging/peregrine.yaml $(DEB_ROOT)/etc/peregrine/peregrine.yaml
	install -d $(DEB_ROOT)/DEBIAN
	sed -e 's/@VERSION@/$(VERSION)/' -e 's/@ARCH@/$(DEB_ARCH)/' -e "s/@SIZE@/$$(du -sk $(DEB_ROOT) | cut -f1)/" \
	  packaging/debian/control > $(DEB_ROOT)/DEBIAN/control
	echo /etc/peregrine/peregrine.yaml > $(DEB_ROOT)/DEBIAN/conffiles
	install -m 755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm $(DEB_ROOT)/DEBIAN/
	dpkg-deb --root-owner-group --build $(DEB_ROOT) $(DEB_OUT)/peregrine_$(VERSION)_$(DEB_ARCH).deb
	rm -rf $(DEB_ROOT)

clean:
	rm -rf bin .setup-done
