/* decode.h: the REQUEST head decoder (docs/protocol.md, "REQUEST payload").
 *
 * A pure function over a byte buffer, kept apart from the rest so it can be fuzzed alone
 * (fuzz_decode.c). It allocates one array (the name/value pairs) and nothing else: every string
 * points into the head buffer, which the caller keeps alive and NUL-terminated at head[len]. */
#ifndef PEREGRINE_DECODE_H
#define PEREGRINE_DECODE_H

#include <stddef.h>

/* The fixed head fields, in their order on the wire. */
enum pg_field {
	PG_METHOD, PG_URI, PG_PATH, PG_QUERY, PG_PROTOCOL, PG_REMOTE_ADDR, PG_REMOTE_PORT,
	PG_SERVER_ADDR, PG_SERVER_PORT, PG_SCHEME, PG_FORM, PG_FIXED_FIELDS
};

struct pg_pair {
	const char *name, *value;
	size_t name_len, value_len;
};

struct pg_head {
	const char *field[PG_FIXED_FIELDS];
	size_t field_len[PG_FIXED_FIELDS];
	struct pg_pair *params;  /* the P server parameters, in order */
	size_t nparams;
	struct pg_pair *headers; /* lower-case name, value; in order, duplicates kept */
	size_t nheaders;
	struct pg_pair *pairs;   /* the one allocation: params, then headers */
};

/* pg_head_decode parses head[0..len) (head[len] must be 0). It returns 0 on success, or -1 with
 * *err set to a static message; on failure nothing is left allocated. Files (N groups) are
 * skipped: under the native runtime the server sends none, PHP parses multipart bodies itself. */
int pg_head_decode(struct pg_head *h, const char *head, size_t len, const char **err);

/* pg_head_free releases what pg_head_decode allocated; safe on a zeroed or freed pg_head. */
void pg_head_free(struct pg_head *h);

#endif
