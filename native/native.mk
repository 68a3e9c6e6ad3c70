# The native PHP runtime (native/README.md): bin/peregrine-php, its tests and its fuzz target.
# Included by the top-level Makefile.
PHP_CONFIG    ?= php-config8.2
NATIVE_BIN    := bin/peregrine-php
NATIVE_SRC    := native/decode.c native/frame.c native/sapi.c native/template.c native/worker.c native/table.c native/async.c native/main.c
NATIVE_CFLAGS ?= -O2 -g
NATIVE_FLAGS   = -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror \
                 $(patsubst -I%,-isystem %,$(shell $(PHP_CONFIG) --includes))
NATIVE_LIBS    = $(shell $(PHP_CONFIG) --ldflags) -L/usr/lib -lphp$(shell $(PHP_CONFIG) --version | cut -d. -f1,2)

.PHONY: native test-native fuzz-native

native: $(NATIVE_BIN)

$(NATIVE_BIN): $(NATIVE_SRC) native/decode.h native/peregrine.h native/table.h native/async.h native/native.mk
	@mkdir -p bin
	$(CC) $(NATIVE_CFLAGS) $(NATIVE_FLAGS) -o $@ $(NATIVE_SRC) $(NATIVE_LIBS)

# Go end-to-end tests against the binary, then valgrind over a few hundred requests and the
# per-request memory check (native/test; about two minutes on two cores).
test-native: native
	$(GO) test -count=1 -timeout 8m ./native/test
	PEREGRINE_NATIVE_MEMORY=1 $(GO) test -count=1 -timeout 8m -run 'Valgrind|RSS' -v ./native/test

# libFuzzer with AddressSanitizer over the REQUEST head decoder when clang is there; the Go
# fuzz test that drives the binary otherwise.
fuzz-native: native
	@if command -v clang >/dev/null 2>&1; then \
	  clang -g -O1 -fsanitize=fuzzer,address,undefined -o bin/fuzz-decode native/fuzz_decode.c native/decode.c && \
	  mkdir -p bin/fuzz-decode-corpus && \
	  bin/fuzz-decode -max_total_time=$${FUZZSECONDS:-30} -artifact_prefix=bin/fuzz-decode- bin/fuzz-decode-corpus native/test/testdata/corpus; \
	else \
	  $(GO) test ./native/test -run '^$$' -fuzz '^FuzzRequestHead$$' -fuzztime $(FUZZTIME); \
	fi
