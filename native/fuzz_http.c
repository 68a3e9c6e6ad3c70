/* fuzz_http.c: the fuzz target of direct mode's HTTP/1.1 parser (make fuzz-http).
 *
 * Properties checked on every input, with AddressSanitizer watching every read:
 * - the head parses to the same result whole and given a byte at a time (the "need more bytes"
 *   path at every offset), and a prefix of a head that parses asks for more bytes;
 * - what it returns points inside the head, names are tokens, values hold no CR, LF or NUL,
 *   the target is a path (or a query, or "*");
 * - it never asks for more bytes when the head is complete or past the limit;
 * - a chunked body after the head decodes to the same bytes and end whole and byte by byte. */
#include "http_parse.h"
#include "http_check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 16
static const struct ph_limits lim = {.max_head = 1024, .max_fields = MAX_FIELDS, .max_line = 200};

static void check(int ok)
{
	if (!ok)
		abort();
}

static void inside(const char *s, size_t len, const char *buf, size_t size)
{
	check(s >= buf && s + len <= buf + size);
}


/* chunked decodes buf whole (step 0) or step bytes more at a time into out. */
static int chunked(const char *buf, size_t size, size_t step, char *out, size_t *outlen)
{
	struct ph_chunked c = {0};
	size_t pos = 0, have = 0;
	*outlen = 0;
	for (;;) {
		have = step == 0 || have + step > size - pos ? size - pos : have + step;
		size_t used, dlen;
		const char *data, *err = NULL;
		int s = ph_chunked_next(&c, buf + pos, have, &used, &data, &dlen, &err);
		check(used <= have);
		if (dlen) {
			inside(data, dlen, buf + pos, have);
			memcpy(out + *outlen, data, dlen);
			*outlen += dlen;
		}
		pos += used;
		have -= used;
		if (s == PH_ERROR)
			check(err != NULL);
		if (s == PH_CHUNK_DONE || s == PH_ERROR)
			return s;
		if (s == PH_INCOMPLETE && have == size - pos && used == 0 && dlen == 0)
			return s;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1);
	memcpy(buf, data, size);
	struct ph_field f1[MAX_FIELDS], f2[MAX_FIELDS];
	struct ph_request whole = {.fields = f1}, bytes = {.fields = f2};

	int h = ph_parse_request(&whole, buf, size, &lim);
	int g = PH_INCOMPLETE;
	size_t at = 0;
	for (at = 0; at <= size && g == PH_INCOMPLETE; at++)
		g = ph_parse_request(&bytes, buf, at, &lim);
	check(g == h);
	/* Growing by more than a byte: lines end in the middle of what arrives. */
	for (size_t step = 2; step <= 13; step += 11) {
		struct ph_field f3[MAX_FIELDS];
		struct ph_request r3 = {.fields = f3};
		int k = PH_INCOMPLETE;
		for (size_t n = step; k == PH_INCOMPLETE; n += step) {
			k = ph_parse_request(&r3, buf, n < size ? n : size, &lim);
			if (n >= size)
				break;
		}
		check(k == h && (h != PH_ERROR || r3.status == whole.status));
	}
	if (h > 0) {
		check(at - 1 == (size_t)h); /* first complete at exactly the head's end */
		check(whole.nfields == bytes.nfields && whole.nfields <= MAX_FIELDS);
		check(whole.content_length == bytes.content_length && whole.keep_alive == bytes.keep_alive);
		inside(whole.method, whole.method_len, buf, (size_t)h);
		if (!(whole.target_len == 1 && whole.target[0] == '/')) /* a full URL's empty path */
			inside(whole.target, whole.target_len, buf, (size_t)h);
		check(whole.target[0] == '/' || whole.target[0] == '?' || (whole.target_len == 1 && whole.target[0] == '*'));
		check(whole.method_len > 0 && whole.target_len > 0);
		check(!whole.chunked || whole.content_length == -1);
		for (size_t i = 0; i < whole.nfields; i++) {
			const struct ph_field *f = &whole.fields[i];
			inside(f->name, f->name_len, buf, (size_t)h);
			inside(f->value, f->value_len, buf, (size_t)h);
			check(f->name_len > 0 && !memchr(f->name, ':', f->name_len));
			check(!memchr(f->value, '\r', f->value_len) && !memchr(f->value, '\n', f->value_len) &&
			      !memchr(f->value, '\0', f->value_len));
		}
		if (whole.host)
			inside(whole.host, whole.host_len, buf, (size_t)h);
		if (whole.chunked) {
			size_t rest = size - (size_t)h, n1, n2;
			char *o1 = malloc(rest + 1), *o2 = malloc(rest + 1);
			int s1 = chunked(buf + h, rest, 0, o1, &n1);
			int s2 = chunked(buf + h, rest, 1, o2, &n2);
			check(s1 == s2 && n1 == n2 && memcmp(o1, o2, n1) == 0);
			free(o1);
			free(o2);
		}
	} else if (h == PH_ERROR) {
		check(whole.status >= 400 && whole.status < 600 && whole.error != NULL);
		check(whole.status == bytes.status);
	} else {
		check(size <= lim.max_head && (!head_complete(buf, size) || size > lim.max_line));
	}
	free(buf);
	return 0;
}
