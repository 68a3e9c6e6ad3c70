/* fuzz_decode.c: libFuzzer target for pg_head_decode (make fuzz-native).
 *
 * Properties checked on every input: a head that decodes has all its strings inside the buffer,
 * NUL-terminated at their stated length, and accounts for every field; one that does not
 * decode leaves nothing allocated. AddressSanitizer catches any read outside the buffer. */
#include "decode.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_string(const char *s, size_t len, const char *head, size_t size)
{
	if (s < head || s + len > head + size || s[len] != '\0' || strlen(s) != len)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *head = malloc(size + 1);
	struct pg_head h;
	const char *err = NULL;
	size_t nuls = 0;

	memcpy(head, data, size);
	head[size] = '\0';
	for (size_t i = 0; i < size; i++)
		nuls += head[i] == '\0';
	if (pg_head_decode(&h, head, size, &err) == 0) {
		for (int i = 0; i < PG_FIXED_FIELDS; i++)
			check_string(h.field[i], h.field_len[i], head, size);
		for (size_t i = 0; i < h.nparams + h.nheaders; i++) {
			check_string(h.pairs[i].name, h.pairs[i].name_len, head, size);
			check_string(h.pairs[i].value, h.pairs[i].value_len, head, size);
		}
		/* Fields: fixed, the file count, 6 per file, the parameter count, the pairs. */
		size_t files = (nuls + 1 - PG_FIXED_FIELDS - 2 - 2 * (h.nparams + h.nheaders));
		if (files % 6 != 0 || h.params != h.pairs || h.headers != h.pairs + h.nparams)
			abort();
	} else if (err == NULL || h.pairs != NULL) {
		abort();
	}
	pg_head_free(&h);
	free(head);
	return 0;
}
