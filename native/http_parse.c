/* http_parse.c: the HTTP/1.1 request parser of direct mode (http_parse.h). */
#include "http_parse.h"

#include <string.h>

/* RFC 9110 tchar, as net/http's validHeaderFieldByte has it. */
static const unsigned char tchar[256] = {
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
	['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1,
	['8'] = 1, ['9'] = 1,
	['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,
	['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1,
	['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
	['Y'] = 1, ['Z'] = 1,
	['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1,
	['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1,
	['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
	['y'] = 1, ['z'] = 1,
};

/* The bytes of a Host header, as net/http's httpguts.ValidHostHeader allows them. */
static int host_byte(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
	       (ch && strchr("!$%&()*+,-.:;=[]'_~", ch));
}

/* valid_host checks a Host header, or a full URL's authority, as internal/http1's validHost:
 * the bytes of a host and port, and a name (nginx's ngx_http_validate_host) that is not empty
 * (but for one trailing dot), holds no ".." and no '/' or '\\'. PHP builds links from it. */
static int valid_host(const char *h, size_t len)
{
	size_t name = len;
	const char *close = len > 0 && h[0] == '[' ? memchr(h, ']', len) : NULL;
	if (close)
		name = (size_t)(close - h) + 1;
	else if (len > 0 && h[0] != '[' && memchr(h, ':', len))
		name = (size_t)((const char *)memchr(h, ':', len) - h);
	if (name == 0 || (name == 1 && h[0] == '.'))
		return 0;
	for (size_t i = 0; i + 1 < name; i++)
		if (h[i] == '.' && h[i + 1] == '.')
			return 0;
	for (size_t i = 0; i < len; i++)
		if (!host_byte((unsigned char)h[i]))
			return 0;
	return 1;
}

/* A field value's bytes: VCHAR, SP, HTAB and obs-text; no other control byte. */
static int value_byte(unsigned char ch)
{
	return ch >= 0x20 ? ch != 0x7f : ch == '\t';
}

static int hexval(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

static int lower_eq(const char *s, size_t len, const char *lit)
{
	size_t n = strlen(lit);
	if (len != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch >= 'A' && ch <= 'Z' ? ch | 0x20 : ch) != (unsigned char)lit[i])
			return 0;
	}
	return 1;
}

/* ph_has_token reports whether a comma-separated value holds token (lower case) as an item,
 * blanks around it aside, in any case, as internal/http1's hasToken finds it. */
int ph_has_token(const char *v, size_t len, const char *token)
{
	const char *p = v, *end = v + len;
	while (p <= end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *e = comma ? comma : end, *s = p;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (lower_eq(s, (size_t)(e - s), token))
			return 1;
		if (!comma)
			break;
		p = comma + 1;
	}
	return 0;
}

/* contains_token reports whether v holds token (lower case) between blanks, commas or its
 * ends, in any case, as internal/http1's containsToken (net/http's test of the first
 * Connection or Expect header: "close x" closes, "100-continue x" expects a 100). */
static int contains_token(const char *v, size_t len, const char *token)
{
	size_t n = strlen(token);
	for (size_t sp = 0; sp + n <= len; sp++) {
		size_t end = sp + n;
		int before = sp == 0 || v[sp - 1] == ' ' || v[sp - 1] == ',' || v[sp - 1] == '\t';
		int after = end == len || v[end] == ' ' || v[end] == ',' || v[end] == '\t';
		if (before && after && lower_eq(v + sp, n, token))
			return 1;
	}
	return 0;
}

static int fail(struct ph_request *r, int status, const char *why)
{
	r->status = status;
	r->error = why;
	return PH_ERROR;
}

/* valid_escapes checks that every '%' in s is followed by two hex digits (Go's url.unescape). */
static int valid_escapes(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] == '%' && (i + 2 >= len || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0))
			return 0;
	return 1;
}

/* valid_port: empty, or ':' and digits. */
static int valid_port(const char *s, size_t len)
{
	if (len == 0)
		return 1;
	if (s[0] != ':')
		return 0;
	for (size_t i = 1; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

/* valid_authority checks [userinfo@]host[:port] as Go's url.parseAuthority does. */
static int valid_authority(const char *a, size_t len)
{
	const char *at = NULL;
	for (size_t i = 0; i < len; i++)
		if (a[i] == '@')
			at = a + i;
	if (at) {
		for (const char *p = a; p < at; p++) {
			unsigned char ch = (unsigned char)*p;
			if (!((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
			      strchr("-._:~!$&'()*+,;=%@", ch)))
				return 0;
		}
		if (!valid_escapes(a, (size_t)(at - a)))
			return 0;
		len -= (size_t)(at + 1 - a);
		a = at + 1;
	}
	const char *host = a, *end = a + len;
	if (len > 0 && a[0] == '[') {
		const char *close = memchr(a, ']', len);
		if (!close || !valid_port(close + 1, (size_t)(end - close - 1)))
			return 0;
		end = close + 1;
	} else {
		const char *colon = NULL;
		for (const char *p = a; p < end; p++)
			if (*p == ':')
				colon = p;
		if (colon) {
			if (!valid_port(colon, (size_t)(a + len - colon)))
				return 0;
			end = colon;
		}
	}
	/* The host's bytes as Go's unescape(encodeHost) accepts them; escapes only of non-ASCII
	 * bytes (or %25 for a zone). */
	for (const char *p = host; p < end; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == '%') {
			if (end - p < 3 || hexval(p[1]) < 0 || hexval(p[2]) < 0)
				return 0;
			if (hexval(p[1]) < 8 && memcmp(p, "%25", 3) != 0)
				return 0;
			p += 2;
			continue;
		}
		if (ch < 0x80 && !((ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
				   strchr("-_.~!$&'()*+,;=:[]<>\"", ch)))
			return 0;
	}
	return 1;
}

/* valid_target checks a request target as Go's url.ParseRequestURI does: origin form, "*",
 * or an absolute URL. */
static int valid_target(const char *t, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
			return 0;
	if (len == 1 && t[0] == '*')
		return 1;
	const char *rest = t, *end = t + len;
	int authority = 0;
	if (t[0] != '/') {
		/* scheme ":" */
		size_t i = 0;
		for (; i < len; i++) {
			unsigned char ch = (unsigned char)t[i];
			if (((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z'))
				continue;
			if (i > 0 && ((ch >= '0' && ch <= '9') || ch == '+' || ch == '-' || ch == '.'))
				continue;
			break;
		}
		if (i == 0 || i == len || t[i] != ':')
			return 0;
		rest = t + i + 1;
		/* What follows is opaque unless it starts with "//"; a '?' ends it either way. */
		const char *q = memchr(rest, '?', (size_t)(end - rest));
		if (q)
			end = q;
		if (end - rest < 2 || rest[0] != '/' || rest[1] != '/') {
			if (end == rest || rest[0] != '/')
				return 1; /* opaque: not checked further */
			return valid_escapes(rest, (size_t)(end - rest));
		}
		rest += 2;
		authority = 1;
	}
	if (authority) {
		const char *q = memchr(rest, '?', (size_t)(end - rest));
		if (q)
			end = q;
		const char *slash = memchr(rest, '/', (size_t)(end - rest));
		const char *aend = slash ? slash : end;
		if (!valid_authority(rest, (size_t)(aend - rest)))
			return 0;
		rest = aend;
	} else {
		const char *q = memchr(rest, '?', (size_t)(end - rest));
		if (q)
			end = q;
	}
	return valid_escapes(rest, (size_t)(end - rest));
}

/* parse_version reads "HTTP/x.y" (exactly, one digit each, as net/http's ParseHTTPVersion). */
static int parse_version(const char *v, size_t len, int *major, int *minor)
{
	if (len != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9')
		return 0;
	*major = v[5] - '0';
	*minor = v[7] - '0';
	return 1;
}

/* is_method: A-Z, '_' and '-', the methods nginx takes (internal/http1's isMethod). */
static int is_method(const char *m, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((m[i] < 'A' || m[i] > 'Z') && m[i] != '_' && m[i] != '-')
			return 0;
	return len > 0;
}

static int method_is(const struct ph_request *r, const char *m)
{
	return r->method_len == strlen(m) && memcmp(r->method, m, r->method_len) == 0;
}

static int defer_error(struct ph_request *r, int status, const char *why)
{
	r->line_status = status;
	r->line_error = why;
	return 0;
}

/* absolute_target checks a full URL in the request line (RFC 9112 3.2.2) as internal/http1
 * does: http or https, no user:password, a host a Host header could name. The target becomes
 * its path and query (nginx's $request_uri), and the host its authority. */
static int absolute_target(struct ph_request *r)
{
	const char *t = r->target, *end = t + r->target_len, *a;
	if (r->target_len > 7 && lower_eq(t, 7, "http://"))
		a = t + 7;
	else if (r->target_len > 8 && lower_eq(t, 8, "https://"))
		a = t + 8;
	else
		return fail(r, 400, "a full URL in the request line must be http or https");
	const char *path = a;
	while (path < end && *path != '/' && *path != '?' && *path != '#')
		path++;
	if (memchr(a, '@', (size_t)(path - a)))
		return fail(r, 400, "a full URL in the request line carries user:password");
	if (!valid_host(a, (size_t)(path - a)))
		return fail(r, 400, "malformed host in the request line");
	r->url_host = a;
	r->url_host_len = (size_t)(path - a);
	r->target = path < end ? path : "/";
	r->target_len = path < end ? (size_t)(end - path) : 1;
	return 0;
}

/* request_line reads "GET /path HTTP/1.1" as internal/http1's parseRequestLine: a malformed
 * line is refused at once (400); a well-formed one that is not served, CONNECT and TRACE (405)
 * or a version other than 1 (505), once the head is read (r->line_status), in net/http's
 * order, so that a head with several faults gets the same refusal from both. */
static int request_line(struct ph_request *r, const char *line, size_t len, int *major)
{
	const char *sp1 = memchr(line, ' ', len);
	if (!sp1)
		return fail(r, 400, "malformed request line");
	const char *rest = sp1 + 1, *end = line + len;
	const char *sp2 = memchr(rest, ' ', (size_t)(end - rest));
	if (!sp2)
		return fail(r, 400, "malformed request line");
	r->method = line;
	r->method_len = (size_t)(sp1 - line);
	r->target = rest;
	r->target_len = (size_t)(sp2 - rest);
	r->url_host = NULL;
	r->url_host_len = 0;
	if (r->method_len == 0 || r->target_len == 0)
		return fail(r, 400, "malformed request line");
	if (!is_method(r->method, r->method_len))
		return fail(r, 400, "invalid method");
	r->http10 = 0;
	if (method_is(r, "CONNECT") || method_is(r, "TRACE")) {
		/* internal/http1 reads no version then: the head is framed as HTTP/1.0's. */
		*major = 1;
		r->minor = 0;
		return defer_error(r, 405, "method not served");
	}
	if (!parse_version(sp2 + 1, (size_t)(end - sp2 - 1), major, &r->minor))
		return fail(r, 400, "malformed HTTP version");
	r->http10 = *major == 1 && r->minor == 0;
	if (!valid_target(r->target, r->target_len))
		return fail(r, 400, "malformed request target");
	if (*major != 1)
		return defer_error(r, 505, "unsupported protocol version");
	if (r->target_len == 1 && r->target[0] == '*') {
		if (!method_is(r, "OPTIONS"))
			return fail(r, 400, "the target * is only for OPTIONS");
	} else if (r->target[0] != '/') {
		return absolute_target(r);
	}
	return 0;
}

/* field_line splits "name: value" into f, checked. It returns 1 for a line to skip, whose
 * refusal waits for the end of the head (r->name_error). */
static int field_line(struct ph_request *r, struct ph_field *f, const char *line, size_t len)
{
	if (line[0] == ' ' || line[0] == '\t')
		return fail(r, 400, "a header folded over several lines (obs-fold)");
	const char *colon = memchr(line, ':', len);
	if (!colon || colon == line)
		return fail(r, 400, "malformed header line");
	int spaced = 0;
	for (const char *p = line; p < colon; p++) {
		if (*p == ' ') {
			spaced = 1;
		} else if (!tchar[(unsigned char)*p]) {
			spaced = -1;
			break;
		}
	}
	if (spaced == 1) {
		/* net/http reads a name with a space in it and refuses it once the head is read. */
		r->name_error = "invalid header name";
		return 1;
	}
	if (spaced)
		return fail(r, 400, "invalid header name");
	const char *v = colon + 1, *end = line + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	for (const char *p = v; p < end; p++)
		if (!value_byte((unsigned char)*p))
			return fail(r, 400, "invalid header value");
	f->name = line;
	f->name_len = (size_t)(colon - line);
	f->value = v;
	f->value_len = (size_t)(end - v);
	return 0;
}

/* content_length parses digits as Go's strconv.ParseUint(s, 10, 63). */
static int content_length(const char *s, size_t len, int64_t *n)
{
	uint64_t v = 0;
	if (len == 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v > (uint64_t)INT64_MAX)
			return 0;
	}
	*n = (int64_t)v;
	return 1;
}

/* framing reads the fields that frame the request and decide the connection's fate. */
static int framing(struct ph_request *r)
{
	const struct ph_field *cl = NULL, *te = NULL, *expect = NULL, *conn = NULL;
	int hosts = 0, tes = 0, close = 0, keep = 0;

	r->host = NULL;
	r->host_len = 0;
	for (size_t i = 0; i < r->nfields; i++) {
		const struct ph_field *f = &r->fields[i];
		if (lower_eq(f->name, f->name_len, "host")) {
			if (hosts++ == 0) {
				r->host = f->value;
				r->host_len = f->value_len;
			}
		} else if (lower_eq(f->name, f->name_len, "content-length")) {
			if (cl && (cl->value_len != f->value_len || memcmp(cl->value, f->value, f->value_len)))
				return fail(r, 400, "differing Content-Length headers");
			cl = f;
		} else if (lower_eq(f->name, f->name_len, "transfer-encoding")) {
			te = f;
			tes++;
		} else if (lower_eq(f->name, f->name_len, "connection")) {
			/* As net/http's server: HTTP/1.1 closes when any holds the item close or the
			 * first holds the word; HTTP/1.0 keeps the connection when the first holds
			 * the word keep-alive. */
			close |= ph_has_token(f->value, f->value_len, "close");
			if (!conn) {
				conn = f;
				close |= contains_token(f->value, f->value_len, "close");
				keep = contains_token(f->value, f->value_len, "keep-alive");
			}
		} else if (lower_eq(f->name, f->name_len, "expect") && !expect) {
			expect = f;
		}
	}
	/* In net/http's order, so that a head with several faults gets the same status. */
	if (hosts > 1)
		return fail(r, 400, "too many Host headers");
	r->content_length = 0;
	r->chunked = 0;
	if (te) {
		/* Refused where net/http would ignore it or let it override Content-Length: a proxy
		 * in front may have framed the body the other way (request smuggling). */
		if (r->http10)
			return fail(r, 400, "Transfer-Encoding in an HTTP/1.0 request");
		if (tes > 1 || !lower_eq(te->value, te->value_len, "chunked"))
			return fail(r, 501, "unsupported transfer encoding");
		if (cl)
			return fail(r, 400, "both Content-Length and Transfer-Encoding");
		r->chunked = 1;
		r->content_length = -1;
	} else if (cl && !content_length(cl->value, cl->value_len, &r->content_length)) {
		return fail(r, 400, "invalid Content-Length");
	}
	if (r->line_status)
		return fail(r, r->line_status, r->line_error);
	if (r->minor >= 1 && !hosts)
		return fail(r, 400, "missing required Host header");
	if (hosts && !valid_host(r->host, r->host_len))
		return fail(r, 400, "malformed Host header");
	if (r->name_error)
		return fail(r, 400, r->name_error);
	if (r->url_host) {
		r->host = r->url_host;
		r->host_len = r->url_host_len;
	}
	r->keep_alive = r->minor == 0 ? keep : !close;
	r->expect_continue = 0;
	if (expect && expect->value_len > 0) {
		if (!contains_token(expect->value, expect->value_len, "100-continue"))
			return fail(r, 417, "unsupported Expect header");
		r->expect_continue = r->minor >= 1 && r->content_length != 0;
	}
	return 0;
}

/* too_long refuses an unended line already longer than the limit: the request line with
 * 414, a field line with 431 (as internal/http1); CR of its CRLF may have come. */
static int too_long(struct ph_request *r, size_t unended, const struct ph_limits *lim)
{
	if (!lim->max_line || unended <= lim->max_line + 1)
		return 0;
	if (!r->in_fields)
		return fail(r, 414, "request line too long");
	return fail(r, 431, "header line too long");
}

int ph_parse_request(struct ph_request *r, const char *buf, size_t len, const struct ph_limits *lim)
{
	/* Nothing to do unless a line ended since the last call. */
	if (r->scanned > 0 && r->scanned <= len) {
		if (!memchr(buf + r->scanned, '\n', len - r->scanned)) {
			r->scanned = len;
			if (len > lim->max_head)
				return fail(r, 431, "request head too large");
			if (r->line_start && too_long(r, len - (r->line_start - 1), lim) < 0)
				return PH_ERROR;
			return PH_INCOMPLETE;
		}
	}
	const char *p = buf, *end = buf + len;
	int major = 0;
	size_t lines = 0;
	/* RFC 9112 2.2: a stray CRLF after a POST body, as net/http skips it (4 bytes at most). */
	while (r->after_post && p < end && p - buf < 4 && (*p == '\r' || *p == '\n'))
		p++;
	r->nfields = 0;
	r->line_status = 0;
	r->name_error = NULL;
	for (;;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl || (size_t)(nl + 1 - buf) > lim->max_head) {
			r->scanned = len;
			r->line_start = (size_t)(p - buf) + 1;
			r->in_fields = major != 0;
			if (too_long(r, (size_t)(end - p), lim) < 0)
				return PH_ERROR;
			if (len > lim->max_head)
				return fail(r, 431, "request head too large");
			return PH_INCOMPLETE;
		}
		const char *line = p;
		size_t n = (size_t)(nl - p);
		if (n > 0 && line[n - 1] == '\r')
			n--;
		p = nl + 1;
		if (major == 0) {
			if (lim->max_line && n > lim->max_line)
				return fail(r, 414, "request line too long");
			if (request_line(r, line, n, &major) < 0)
				return PH_ERROR;
			if (major == 0)
				major = -1; /* HTTP/0.x: refused with 505 once the head is read */
			continue;
		}
		if (lim->max_line && n > lim->max_line)
			return fail(r, 431, "header line too long");
		if (n == 0)
			break;
		if (lines++ == lim->max_fields)
			return fail(r, 431, "too many header fields");
		int rc = field_line(r, &r->fields[r->nfields], line, n);
		if (rc < 0)
			return PH_ERROR;
		if (rc == 0)
			r->nfields++;
	}
	if (framing(r) < 0)
		return PH_ERROR;
	return (int)(p - buf);
}

/* Chunked body states. */
enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

/* net/http reads chunk lines through a 4 KiB buffer: a longer line is refused. */
#define MAX_CHUNK_LINE 4096
#define MAX_TRAILER    4096

/* chunk_line finds the next line of chunked framing: it must end with CRLF and hold no other
 * CR. It returns the line's length without CRLF, PH_INCOMPLETE or PH_ERROR. */
static long chunk_line(const char *buf, size_t len, size_t max, const char **error)
{
	size_t n = len < max ? len : max;
	const char *nl = memchr(buf, '\n', n);
	if (!nl) {
		if (len >= max) {
			*error = "chunk line too long";
			return PH_ERROR;
		}
		return PH_INCOMPLETE;
	}
	const char *cr = memchr(buf, '\r', (size_t)(nl - buf));
	if (!cr) {
		*error = "chunked line ends with bare LF";
		return PH_ERROR;
	}
	if (cr != nl - 1) {
		*error = "invalid CR in chunked line";
		return PH_ERROR;
	}
	return (long)(cr - buf);
}

static int chunk_size(struct ph_chunked *c, const char *line, size_t n, const char **error)
{
	c->excess += (int64_t)n + 2;
	while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	const char *semi = memchr(line, ';', n);
	if (semi)
		n = (size_t)(semi - line);
	if (n == 0 || n > 16) {
		*error = n ? "chunk length too large" : "empty chunk length";
		return PH_ERROR;
	}
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		int d = hexval((unsigned char)line[i]);
		if (d < 0) {
			*error = "invalid byte in chunk length";
			return PH_ERROR;
		}
		v = v << 4 | (uint64_t)d;
	}
	if (v > (uint64_t)INT64_MAX) { /* as internal/http1: no body that long is real */
		*error = "chunk length too large";
		return PH_ERROR;
	}
	c->remain = v;
	/* net/http allows 16 bytes of framing per chunk and twice its data. */
	int64_t allowed = v > (uint64_t)INT64_MAX / 4 ? INT64_MAX / 2 : 16 + 2 * (int64_t)v;
	c->excess = c->excess - allowed < 0 ? 0 : c->excess - allowed;
	if (c->excess > 16 * 1024) {
		*error = "chunked encoding contains too much non-data";
		return PH_ERROR;
	}
	return 0;
}

/* trailer checks the trailer fields after the last chunk, up to the empty line, and returns
 * the bytes they take. */
static long trailer(const char *buf, size_t len, const char **error)
{
	size_t off = 0;
	for (;;) {
		long n = chunk_line(buf + off, len - off, MAX_TRAILER + 2 - off, error);
		if (n == PH_ERROR && off + (size_t)2 > MAX_TRAILER) {
			*error = "trailer too long";
			return PH_ERROR;
		}
		if (n < 0)
			return n;
		const char *line = buf + off;
		off += (size_t)n + 2;
		if (n == 0)
			return (long)off;
		struct ph_request r;
		struct ph_field f;
		int rc = field_line(&r, &f, line, (size_t)n);
		if (rc != 0) {
			*error = rc < 0 ? r.error : r.name_error;
			return PH_ERROR;
		}
	}
}

int ph_chunked_next(struct ph_chunked *c, const char *buf, size_t len, size_t *consumed,
		    const char **data, size_t *data_len, const char **error)
{
	size_t off = 0;
	*data = buf;
	*data_len = 0;
	for (;;) {
		const char *p = buf + off;
		size_t left = len - off;
		*consumed = off;
		switch (c->state) {
		case CH_SIZE: {
			long n = chunk_line(p, left, MAX_CHUNK_LINE, error);
			if (n < 0)
				return (int)n;
			if (chunk_size(c, p, (size_t)n, error) < 0)
				return PH_ERROR;
			off += (size_t)n + 2;
			c->state = c->remain ? CH_DATA : CH_TRAILER;
			break;
		}
		case CH_DATA: {
			if (left == 0)
				return PH_INCOMPLETE;
			size_t n = left < c->remain ? left : (size_t)c->remain;
			c->remain -= n;
			if (c->remain == 0)
				c->state = CH_DATA_END;
			*data = p;
			*data_len = n;
			*consumed = off + n;
			return PH_CHUNK_DATA;
		}
		case CH_DATA_END:
			if (left < 2) {
				if (left == 1 && p[0] != '\r')
					goto bad_end;
				return PH_INCOMPLETE;
			}
			if (p[0] != '\r' || p[1] != '\n')
				goto bad_end;
			off += 2;
			c->state = CH_SIZE;
			break;
		case CH_TRAILER: {
			long n = trailer(p, left, error);
			if (n < 0)
				return (int)n;
			*consumed = off + (size_t)n;
			c->state = CH_DONE;
			return PH_CHUNK_DONE;
		}
		default:
			return PH_CHUNK_DONE;
		}
	}
bad_end:
	*error = "malformed chunked encoding";
	return PH_ERROR;
}
