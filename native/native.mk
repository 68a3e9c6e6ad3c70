# The native PHP runtime (native/README.md): bin/peregrine-php, its tests and its fuzz target.
# Included by the top-level Makefile.
PHP_CONFIG    ?= php-config8.2
NATIVE_BIN    := bin/peregrine-php
NATIVE_SRC    := native/decode.c native/frame.c native/sapi.c native/nativeserver.c native/template.c native/worker.c native/table.c native/async.c native/direct.c native/handoff.c native/http_parse.c native/main.c native/engine.c
NATIVE_ENGINE := bin/peregrine-php-engine.so
NATIVE_CFLAGS ?= -O2 -g
NATIVE_FLAGS   = -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror \
                 $(patsubst -I%,-isystem %,$(shell $(PHP_CONFIG) --includes))
NATIVE_LIBS    = $(shell $(PHP_CONFIG) --ldflags) -L/usr/lib -lphp$(shell $(PHP_CONFIG) --version | cut -d. -f1,2)

.PHONY: native test-native fuzz-native fuzz-http

# Direct mode's HTTP/1.1 parser (http_parse.c) has no PHP in it: its test driver and its fuzz
# target build alone, with AddressSanitizer and UBSan (gcc has them; libFuzzer needs clang).
HTTP_PARSE    := native/http_parse.c native/http_parse.h native/http_check.h
HTTP_SANITIZE ?= -fsanitize=address,undefined -fno-sanitize-recover=all
bin/http-driver: native/http_driver.c $(HTTP_PARSE)
	@mkdir -p bin
	$(CC) -O1 -g -std=gnu11 -Wall -Wextra -Werror $(HTTP_SANITIZE) -o $@ native/http_driver.c native/http_parse.c
bin/fuzz-http: native/fuzz_http.c native/fuzz_main.c $(HTTP_PARSE)
	@mkdir -p bin
	$(CC) -O1 -g -std=gnu11 -Wall -Wextra -Werror $(HTTP_SANITIZE) -o $@ native/fuzz_http.c native/fuzz_main.c native/http_parse.c

# A short fuzzing pass over the HTTP/1.1 parser (FUZZSECONDS, 10 by default in make test):
# libFuzzer when clang is there, the standalone mutator of fuzz_main.c otherwise. A crash
# leaves its input in bin/fuzz-http-crash-*; add it to native/test/testdata/http-corpus.
fuzz-http: bin/fuzz-http
	@mkdir -p bin/fuzz-http-corpus
	@if command -v clang >/dev/null 2>&1; then \
	  clang -g -O1 -fsanitize=fuzzer,address,undefined -o bin/fuzz-http-lf native/fuzz_http.c native/http_parse.c && \
	  bin/fuzz-http-lf -max_total_time=$${FUZZSECONDS:-10} -artifact_prefix=bin/fuzz-http-crash- bin/fuzz-http-corpus native/test/testdata/http-corpus; \
	else \
	  bin/fuzz-http $${FUZZSECONDS:-10} bin/fuzz-http-crash- native/test/testdata/http-corpus; \
	fi

native: $(NATIVE_BIN) $(NATIVE_ENGINE)

$(NATIVE_BIN): $(NATIVE_SRC) native/decode.h native/http_parse.h native/handoff.h native/peregrine.h native/table.h native/async.h native/native.mk
	@mkdir -p bin
	$(CC) $(NATIVE_CFLAGS) $(NATIVE_FLAGS) -o $@ $(NATIVE_SRC) $(NATIVE_LIBS)

# The same runtime as a shared object without libphp, for PEREGRINE_PHP_ENGINE (native/engine.c):
# its PHP symbols resolve to the engine executable's; -Bsymbolic keeps its own symbols its own.
$(NATIVE_ENGINE): $(NATIVE_SRC) native/decode.h native/http_parse.h native/handoff.h native/peregrine.h native/table.h native/async.h native/native.mk
	@mkdir -p bin
	$(CC) $(NATIVE_CFLAGS) $(NATIVE_FLAGS) -fPIC -shared -Wl,-Bsymbolic -DPG_ENGINE -Dmain=pg_main -o $@ $(NATIVE_SRC)

# Go end-to-end tests against the binary, then valgrind over a few hundred requests and the
# per-request memory check (native/test; about two minutes on two cores).
test-native: native fuzz-http
	$(GO) test -count=1 -timeout 8m ./native/test
	PEREGRINE_NATIVE_MEMORY=1 $(GO) test -count=1 -timeout 8m -run 'Valgrind|RSS' -v ./native/test

# libFuzzer with AddressSanitizer over the REQUEST head decoder when clang is there; the Go
# fuzz test that drives the binary otherwise.
fuzz-native: native
	$(MAKE) --no-print-directory fuzz-http FUZZSECONDS=$${FUZZSECONDS:-30}
	@if command -v clang >/dev/null 2>&1; then \
	  clang -g -O1 -fsanitize=fuzzer,address,undefined -o bin/fuzz-decode native/fuzz_decode.c native/decode.c && \
	  mkdir -p bin/fuzz-decode-corpus && \
	  bin/fuzz-decode -max_total_time=$${FUZZSECONDS:-30} -artifact_prefix=bin/fuzz-decode- bin/fuzz-decode-corpus native/test/testdata/corpus; \
	else \
	  $(GO) test ./native/test -run '^$$' -fuzz '^FuzzRequestHead$$' -fuzztime $(FUZZTIME); \
	fi
