/* decode.c: the REQUEST head decoder; see decode.h. */
#include "decode.h"

#include <stdlib.h>
#include <string.h>

/* Parses a decimal count of at most 9 digits: enough for any head, and no overflow. */
static int parse_count(const char *s, size_t len, size_t *out)
{
	size_t n = 0;

	if (len == 0 || len > 9)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		n = n * 10 + (size_t)(s[i] - '0');
	}
	*out = n;
	return 0;
}

/* Returns the start of the field after the one at p (which ends at a NUL), or end. */
static const char *next_field(const char *p, const char *end, size_t *len)
{
	const char *nul = memchr(p, '\0', (size_t)(end - p));

	if (nul == NULL)
		nul = end;
	*len = (size_t)(nul - p);
	return nul < end ? nul + 1 : NULL;
}

int pg_head_decode(struct pg_head *h, const char *head, size_t len, const char **err)
{
	const char *end = head + len, *p = head;
	size_t nfields = 1, n, flen, i;

	memset(h, 0, sizeof(*h));
	for (const char *q = head; (q = memchr(q, '\0', (size_t)(end - q))) != NULL; q++)
		nfields++;
	if (nfields < PG_FIXED_FIELDS + 2) {
		*err = "request head has too few fields";
		return -1;
	}
	for (i = 0; i < PG_FIXED_FIELDS; i++) {
		h->field[i] = p;
		p = next_field(p, end, &h->field_len[i]);
	}
	/* p is not NULL here: nfields guarantees that both counts follow. */
	const char *files = p;
	p = next_field(p, end, &flen);
	if (parse_count(files, flen, &n) != 0 ||
	    n > (nfields - PG_FIXED_FIELDS - 2) / 6) {
		*err = "request head has a bad file count";
		return -1;
	}
	for (i = 0; i < 6 * n; i++)
		p = next_field(p, end, &flen);
	if (p == NULL) {
		*err = "request head ends before its parameter count";
		return -1;
	}
	const char *count = p;
	p = next_field(p, end, &flen);
	size_t left = nfields - PG_FIXED_FIELDS - 2 - 6 * n; /* fields after the P count */
	if (parse_count(count, flen, &h->nparams) != 0 || h->nparams > left / 2 ||
	    (left - 2 * h->nparams) % 2 != 0) {
		*err = "request head has a bad parameter count or an odd header list";
		return -1;
	}
	h->nheaders = (left - 2 * h->nparams) / 2;
	if (h->nparams + h->nheaders > 0) {
		h->pairs = malloc((h->nparams + h->nheaders) * sizeof(*h->pairs));
		if (h->pairs == NULL) {
			*err = "out of memory";
			return -1;
		}
	}
	h->params = h->pairs;
	h->headers = h->pairs + h->nparams;
	for (i = 0; i < h->nparams + h->nheaders; i++) {
		struct pg_pair *pr = &h->pairs[i];
		pr->name = p;
		p = next_field(p, end, &pr->name_len);
		pr->value = p;
		p = next_field(p, end, &pr->value_len);
	}
	return 0;
}

void pg_head_free(struct pg_head *h)
{
	free(h->pairs);
	memset(h, 0, sizeof(*h));
}
