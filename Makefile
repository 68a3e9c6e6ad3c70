# Peregrine: `make run` serves the example app, `make test` runs every test.
GO      ?= go
BIN     := bin/peregrine
ADDRESS ?= 127.0.0.1:8080

include native/native.mk

.PHONY: all setup build run test test-go test-php lint fuzz stress bench clean install deb

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
	$(GO) test -race -count=1 -timeout 30m ./...

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

# make install [PREFIX=/usr/local] [DESTDIR=]: PREFIX/bin/peregrine and peregrine-php (which
# finds its runtime beside it) and the PHP library in PREFIX/share/peregrine/php (where
# --laravel and --symfony find it; a worker script requires its autoload.php). It builds what it
# installs, without setup.sh; BIN names the daemon binary it builds.
PREFIX  ?= /usr/local
DESTDIR ?=
install: native
	$(GO) build -trimpath -o $(BIN) ./cmd/peregrine
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/peregrine/php
	install -m 755 $(BIN) $(NATIVE_BIN) $(DESTDIR)$(PREFIX)/bin/
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
