/* http_parse.h: the HTTP/1.1 request parser of direct mode (docs/direct.md).
 *
 * It reads a request head and a chunked body as the proxied front (internal/http1) reads them
 * (RFC 9112, net/http's framing with nginx's checks of the method, Host and full URLs), and
 * refuses what it refuses, with its status; native/test/httpdiff_test.go compares them, and
 * with net/http, and lists where they differ and why. It is pure: no allocation, no
 * I/O, no global state; every string it returns points into the caller's buffer. It does not
 * decide limits on bodies or time: the connection that calls it does.
 *
 * "Need more bytes" is a return code (PH_INCOMPLETE): call again with the same buffer grown.
 * A head is parsed again from its start on each call, but only when a new line ended since the
 * last call (struct ph_request.scanned), so a head sent a byte at a time costs at most one pass
 * per line, and max_fields bounds the lines. */
#ifndef PEREGRINE_HTTP_PARSE_H
#define PEREGRINE_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define PH_ERROR      (-1)
#define PH_INCOMPLETE (-2)

struct ph_field {
	const char *name, *value; /* the name as sent; the value without surrounding spaces/tabs */
	size_t name_len, value_len;
};

struct ph_limits {
	size_t max_head;   /* the head's bytes, request line and empty line included: 431 past it */
	size_t max_fields; /* header fields: 431 past it; also the capacity of ph_request.fields */
	size_t max_line;   /* one line without its CRLF: the request line 414 past it, a field
			    * line 431; 0: none */
};

struct ph_request {
	/* In: the caller's array of limits->max_fields fields. Set scanned to 0 for each new head,
	 * and after_post when the request before on the connection was a POST (up to 4 bytes of
	 * CR and LF before this head are then skipped, as net/http does; none otherwise). */
	struct ph_field *fields;
	unsigned after_post : 1;
	size_t scanned;     /* bytes already seen not to end a line; the caller leaves it alone */
	size_t line_start;  /* where the unended line began at that point, plus one; 0: none */
	unsigned in_fields : 1; /* that line is a field line, not the request line */

	/* Out, when the head is complete. The target is the path and query as REQUEST_URI has
	 * them: a full URL's ("http://h/x?y" gives "/x?y"; "http://h?y" gives "?y", whose path
	 * is empty and means "/"), "*" (OPTIONS only), or the origin form as sent. */
	const char *method, *target;
	size_t method_len, target_len;
	int minor;                /* HTTP/1.minor */
	size_t nfields;
	const char *host;         /* a full URL's authority, else the Host header's value; NULL
				   * without either */
	size_t host_len;
	int64_t content_length;   /* -1 when the body is chunked; 0 without a body */
	unsigned chunked : 1;
	unsigned keep_alive : 1;  /* another request may follow this one's answer */
	unsigned expect_continue : 1;

	/* Out, on PH_ERROR: the status to answer (400, 405, 414, 417, 431, 501, 505) and why. */
	int status;
	const char *error;

	/* Scratch: refusals that wait for the end of the head, and a full URL's authority. */
	int line_status;
	const char *line_error, *name_error, *url_host;
	size_t url_host_len;
	unsigned http10 : 1;      /* the version read is HTTP/1.0 itself (not CONNECT's or TRACE's,
				   * which are framed as 1.0 with no version read) */
};

/* ph_parse_request parses the head at buf[0..len). It returns the head's length (up to and
 * including the empty line that ends it), PH_INCOMPLETE, or PH_ERROR with r->status and
 * r->error set. */
int ph_parse_request(struct ph_request *r, const char *buf, size_t len, const struct ph_limits *lim);

/* The state of one chunked body (RFC 9112 7.1); zero it before the body's first byte. */
struct ph_chunked {
	int state;
	uint64_t remain; /* data bytes left in the current chunk */
	int64_t excess;  /* framing bytes beyond what the data justifies, as net/http counts them */
};

#define PH_CHUNK_DATA 0 /* *data holds the next *data_len bytes of the body (maybe none) */
#define PH_CHUNK_DONE 1 /* the last chunk and the trailer are read: the body is over */

/* ph_chunked_next reads framing from buf[0..len) and at most one span of data. It sets
 * *consumed to the bytes it used (framing and data) and returns PH_CHUNK_DATA, PH_CHUNK_DONE,
 * PH_INCOMPLETE (nothing more can be read from what is there: call again with what follows
 * buf + *consumed) or PH_ERROR with *error set (answer 400 and close). Extensions are skipped,
 * trailer fields checked and dropped. */
int ph_chunked_next(struct ph_chunked *c, const char *buf, size_t len, size_t *consumed,
		    const char **data, size_t *data_len, const char **error);

/* ph_has_token reports whether the comma-separated value v[0..len) holds token (lower case)
 * as an item, blanks around it aside, in any case (internal/http1's hasToken). */
int ph_has_token(const char *v, size_t len, const char *token);

#endif
