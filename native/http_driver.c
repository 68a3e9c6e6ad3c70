/* http_driver.c: serves a byte stream read on stdin as a direct-mode connection would, with
 * http_parse.c, and prints what it read; the differential test (native/test/httpdiff_test.go)
 * compares that with what net/http and internal/http1 make of the same bytes.
 *
 *   http-driver [-step N] [-max-head N] [-max-fields N] [-max-line N] < stream
 *
 * The stream is given to the parser N bytes more at a time (1: byte by byte; 0: whole), so the
 * "need more bytes" path is taken at every offset. Output, one line each:
 *   req METHOD TARGET BODY-HEX      a request read whole
 *   end eof | close | truncated | refused STATUS | bodyerror
 * and a line "bug ..." (exit status 2) if the parser asked for more bytes when the head it had
 * was already complete. */
#include "http_parse.h"
#include "http_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t step = 0;

static size_t window(size_t have, size_t rest)
{
	if (step == 0 || have + step > rest)
		return rest;
	return have + step;
}

int main(int argc, char **argv)
{
	/* internal/http1's defaults, as the daemon passes them to direct mode. */
	struct ph_limits lim = {.max_head = 64 << 10, .max_fields = 100, .max_line = 8 << 10};
	for (int i = 1; i + 1 < argc; i += 2) {
		size_t v = strtoul(argv[i + 1], NULL, 10);
		if (strcmp(argv[i], "-step") == 0)
			step = v;
		else if (strcmp(argv[i], "-max-head") == 0)
			lim.max_head = v;
		else if (strcmp(argv[i], "-max-fields") == 0)
			lim.max_fields = v;
		else if (strcmp(argv[i], "-max-line") == 0)
			lim.max_line = v;
	}
	size_t cap = 1 << 16, len = 0;
	char *in = malloc(cap);
	size_t n;
	while ((n = fread(in + len, 1, cap - len, stdin)) > 0) {
		len += n;
		if (len == cap)
			in = realloc(in, cap *= 2);
	}
	struct ph_field *fields = malloc(sizeof *fields * (lim.max_fields ? lim.max_fields : 1));
	char *body = malloc(len + 1);
	size_t pos = 0;
	int rc = 0, after_post = 0;
	for (;;) {
		if (pos == len) {
			puts("end eof");
			break;
		}
		struct ph_request r = {.fields = fields, .after_post = after_post};
		const char *p = in + pos;
		size_t rest = len - pos, have = 0;
		int h;
		do {
			have = window(have, rest);
			h = ph_parse_request(&r, p, have, &lim);
		} while (h == PH_INCOMPLETE && have < rest);
		if (h == PH_ERROR) {
			printf("end refused %d %s\n", r.status, r.error);
			break;
		}
		if (h == PH_INCOMPLETE) {
			if (head_complete(p, rest < lim.max_head ? rest : lim.max_head)) {
				puts("bug: PH_INCOMPLETE on a complete head");
				rc = 2;
			}
			puts("end truncated");
			break;
		}
		pos += (size_t)h;
		size_t blen = 0;
		int ended = 0;
		if (r.chunked) {
			struct ph_chunked c = {0};
			const char *err = NULL;
			have = 0;
			for (;;) {
				rest = len - pos;
				have = window(have, rest);
				size_t used;
				const char *data;
				size_t dlen;
				int s = ph_chunked_next(&c, in + pos, have, &used, &data, &dlen, &err);
				memcpy(body + blen, data, dlen);
				blen += dlen;
				pos += used;
				have -= used;
				if (s == PH_CHUNK_DONE)
					break;
				if (s == PH_ERROR) {
					printf("end bodyerror %s\n", err);
					ended = 1;
					break;
				}
				if (s == PH_INCOMPLETE && have == len - pos && used == 0 && dlen == 0) {
					puts("end truncated");
					ended = 1;
					break;
				}
			}
		} else if (r.content_length > 0) {
			if ((uint64_t)r.content_length > len - pos) {
				puts("end truncated");
				break;
			}
			memcpy(body, in + pos, (size_t)r.content_length);
			blen = (size_t)r.content_length;
			pos += blen;
		}
		if (ended)
			break;
		after_post = r.method_len == 4 && memcmp(r.method, "POST", 4) == 0;
		/* As direct.c: OPTIONS * is answered without a script; "?x" is a full URL's "/?x". */
		if (!(r.target_len == 1 && r.target[0] == '*')) {
			printf("req %.*s %s%.*s ", (int)r.method_len, r.method, r.target[0] == '?' ? "/" : "",
			       (int)r.target_len, r.target);
			for (size_t i = 0; i < blen; i++)
				printf("%02x", (unsigned char)body[i]);
			putchar('\n');
		}
		if (!r.keep_alive) {
			puts("end close");
			break;
		}
	}
	free(in);
	free(fields);
	free(body);
	return rc;
}
