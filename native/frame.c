/* frame.c: reading REQUEST frames from fd 3 and writing the answer's frames to fd 4. */
#include "peregrine.h"

#include <ctype.h>
#include <errno.h>
#include <strings.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#define FD_IN 3
#define FD_OUT 4

/* A REQUEST head larger than this is a protocol error (the server sends far less). */
#define MAX_HEAD (16u << 20)

static void put16(unsigned char *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (v >> (8 * i)) & 0xff;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Writes all of iov or exits: without fd 4 there is no one left to answer. */
static void write_all(struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(FD_OUT, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "peregrine-php: writing to fd 4: %s\n", strerror(errno));
			_exit(PG_EXIT_PROTOCOL);
		}
		for (; n > 0 && (size_t)w >= iov->iov_len; iov++, n--)
			w -= (ssize_t)iov->iov_len;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
}

/* Sends one frame whose payload is the concatenation of parts[0..n). */
static void send_frame(uint8_t type, uint16_t flags, uint32_t id, struct iovec *parts, int n)
{
	unsigned char hdr[12] = {PG_VERSION, type};
	struct iovec iov[8] = {{hdr, sizeof(hdr)}};
	size_t len = 0;

	for (int i = 0; i < n; i++) {
		iov[i + 1] = parts[i];
		len += parts[i].iov_len;
	}
	put16(hdr + 2, flags);
	put32(hdr + 4, id);
	put32(hdr + 8, (uint32_t)len);
	write_all(iov, n + 1);
}

void pg_send_ready(void)
{
	struct iovec v = {(char *)PHP_VERSION, sizeof(PHP_VERSION) - 1};

	if (!pg.ready_sent)
		send_frame(PG_READY, 0, 0, &v, 1);
	pg.ready_sent = true;
}

void pg_protocol_error(const char *message)
{
	struct iovec v = {(char *)message, strlen(message)};

	fprintf(stderr, "peregrine-php: protocol error: %s\n", message);
	send_frame(PG_ERROR, 0, 0, &v, 1);
	_exit(PG_EXIT_PROTOCOL);
}

/* What was read from fd 3 ahead of the caller: one read() takes whatever the server has written
 * (a batch of requests, or a head with the start of its body) instead of one read() per field.
 * Only requests for this worker are ever on the pipe, so reading ahead takes nothing from
 * anyone; a frame is still decoded only when the previous request has ended. */
static struct {
	char buf[64 << 10];
	size_t pos, len;
} in;

/* Reads up to count bytes: what is buffered, else what one read() brings into the buffer
 * (PHP reads bodies 8 KiB at a time: the copy is small). Returns 0 at end of input, -1 on an
 * error. */
static ssize_t read_some(char *dst, size_t count)
{
	if (in.pos == in.len) {
		ssize_t r;
		do
			r = read(FD_IN, in.buf, sizeof(in.buf));
		while (r < 0 && errno == EINTR);
		if (r <= 0)
			return r;
		in.pos = 0;
		in.len = (size_t)r;
	}
	size_t n = in.len - in.pos;
	if (n > count)
		n = count;
	memcpy(dst, in.buf + in.pos, n);
	in.pos += n;
	return (ssize_t)n;
}

/* Reads exactly len bytes; returns false at end of file before the first byte. */
static bool read_full(void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = read_some((char *)buf + got, len - got);
		if (r <= 0) {
			if (got == 0 && r == 0)
				return false;
			pg_protocol_error(r == 0 ? "end of input inside a frame" : strerror(errno));
		}
		got += (size_t)r;
	}
	return true;
}

size_t pg_read_body(char *buf, size_t count)
{
	size_t got = 0;

	if (pg.direct)
		return pg_direct_read_body(buf, count);
	if (count > pg.req.body_left)
		count = (size_t)pg.req.body_left;
	while (got < count) {
		ssize_t r = read_some(buf + got, count - got);
		if (r <= 0) { /* the server is gone: finish this request, then stop */
			pg.eof = true;
			pg.req.body_left = 0;
			break;
		}
		got += (size_t)r;
		pg.req.body_left -= (size_t)r;
	}
	return got;
}

void pg_discard_body(void)
{
	char buf[16384];

	while (pg.req.body_left > 0 && pg_read_body(buf, sizeof(buf)) > 0)
		;
}

/* The request's buffers live outside PHP's memory manager: in classic mode they outlive
 * php_request_shutdown(), which resets it. */
void *pg_xmalloc(size_t size)
{
	void *p = malloc(size);

	if (p == NULL) {
		fprintf(stderr, "peregrine-php: out of memory\n");
		_exit(1);
	}
	return p;
}

/* Bump allocation from the request's arena, sized in prepare_request to what it can need. */
static char *arena_dup(struct pg_request *r, const char *a, size_t alen, const char *b, size_t blen)
{
	char *s = r->arena + r->arena_used;

	if (r->arena_used + alen + blen + 1 > r->arena_cap) /* prepare_request sized it: a bug */
		pg_protocol_error("internal error: request arena too small");
	memcpy(s, a, alen);
	if (b != NULL)
		memcpy(s + alen, b, blen);
	s[alen + blen] = '\0';
	r->arena_used += alen + blen + 1;
	return s;
}

static void add_var(struct pg_request *r, const char *name, const char *value)
{
	r->vars[r->nvars++] = (struct pg_pair){name, value, strlen(name), strlen(value)};
}

/* SERVER_NAME where the front passes none (a worker script, no http.root): http.server_name
 * (PEREGRINE_SERVER_NAME), or the address the connection arrived on, as the front gives scripts
 * under http.root, direct mode and the cli runtime (ServerParams.php): never the Host header. */
static const char *server_name(const struct pg_head *h)
{
	static const char *configured;
	static bool looked;

	if (!looked) {
		configured = getenv("PEREGRINE_SERVER_NAME");
		looked = true;
	}
	return configured != NULL && configured[0] != '\0' ? configured : h->field[PG_SERVER_ADDR];
}

/* Whether header i is named name (lower case, its length len). */
static inline bool header_is(const struct pg_head *h, size_t i, const char *name, size_t len)
{
	return h->headers[i].name_len == len && memcmp(h->headers[i].name, name, len) == 0;
}

static const char *header_value_len(const struct pg_head *h, const char *name, size_t len)
{
	for (size_t i = 0; i < h->nheaders; i++)
		if (header_is(h, i, name, len))
			return h->headers[i].value;
	return NULL;
}

#define header_value(h, name) header_value_len(h, name, sizeof(name) - 1)

/* A header name's byte as it is in its HTTP_ variable: letters upper-cased, hyphens as
 * underscores, digits as they are; 0 for the bytes nginx's ignore_invalid_headers drops
 * (underscores included). ASCII only, as nginx: the locale does not change it. */
static const char http_var_char[256] = {
	['-'] = '_',
	['0'] = '0', ['1'] = '1', ['2'] = '2', ['3'] = '3', ['4'] = '4',
	['5'] = '5', ['6'] = '6', ['7'] = '7', ['8'] = '8', ['9'] = '9',
	['A'] = 'A', ['B'] = 'B', ['C'] = 'C', ['D'] = 'D', ['E'] = 'E', ['F'] = 'F', ['G'] = 'G',
	['H'] = 'H', ['I'] = 'I', ['J'] = 'J', ['K'] = 'K', ['L'] = 'L', ['M'] = 'M', ['N'] = 'N',
	['O'] = 'O', ['P'] = 'P', ['Q'] = 'Q', ['R'] = 'R', ['S'] = 'S', ['T'] = 'T', ['U'] = 'U',
	['V'] = 'V', ['W'] = 'W', ['X'] = 'X', ['Y'] = 'Y', ['Z'] = 'Z',
	['a'] = 'A', ['b'] = 'B', ['c'] = 'C', ['d'] = 'D', ['e'] = 'E', ['f'] = 'F', ['g'] = 'G',
	['h'] = 'H', ['i'] = 'I', ['j'] = 'J', ['k'] = 'K', ['l'] = 'L', ['m'] = 'M', ['n'] = 'N',
	['o'] = 'O', ['p'] = 'P', ['q'] = 'Q', ['r'] = 'R', ['s'] = 'S', ['t'] = 'T', ['u'] = 'U',
	['v'] = 'V', ['w'] = 'W', ['x'] = 'X', ['y'] = 'Y', ['z'] = 'Z',
};

/* Adds the header named like hd as HTTP_NAME, as nginx passes headers to FastCGI: names with
 * other characters than letters, digits and hyphens are dropped (nginx's
 * ignore_invalid_headers, underscores included), Proxy never becomes HTTP_PROXY
 * (httpoxy), and a header sent several times becomes one variable, its values joined with ", "
 * ("; " for Cookie). first is the index of hd; later headers of the same name are joined. */
static void add_header_var(struct pg_request *r, size_t first)
{
	const struct pg_head *h = &r->head;
	const struct pg_pair *hd = &h->headers[first];
	const char *sep = header_is(h, first, "cookie", 6) ? "; " : ", ";
	char *name;
	size_t len = 0, i;

	if (hd->name_len == 0 || hd->name_len > 255 || header_is(h, first, "proxy", 5))
		return;
	for (i = 0; i < hd->name_len; i++)
		if (http_var_char[(unsigned char)hd->name[i]] == 0)
			return;
	for (i = 0; i < first; i++)
		if (header_is(h, i, hd->name, hd->name_len))
			return; /* joined into the first one already */
	for (i = first; i < h->nheaders; i++)
		if (header_is(h, i, hd->name, hd->name_len))
			len += (len ? 2 : 0) + h->headers[i].value_len;
	const char *value = hd->value;
	if (len != hd->value_len) {
		char *joined = arena_dup(r, "", 0, NULL, len), *p = joined;
		for (i = first; i < h->nheaders; i++) {
			if (!header_is(h, i, hd->name, hd->name_len))
				continue;
			if (p != joined) {
				memcpy(p, sep, 2);
				p += 2;
			}
			memcpy(p, h->headers[i].value, h->headers[i].value_len);
			p += h->headers[i].value_len;
		}
		value = joined;
	}
	name = arena_dup(r, "HTTP_", 5, NULL, hd->name_len);
	for (i = 0; i < hd->name_len; i++)
		name[5 + i] = http_var_char[(unsigned char)hd->name[i]];
	r->vars[r->nvars++] = (struct pg_pair){name, value, 5 + hd->name_len, len};
}

/* nginx's $remote_user, which Debian's fastcgi.conf passes as REMOTE_USER: the user name of a
 * "Basic" Authorization header (base64 decoded up to its first "=", as ngx_decode_base64 does,
 * then cut at the colon), or "" when there is none or it is malformed. */
static const char *remote_user(struct pg_request *r, const char *auth)
{
	static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0;
	unsigned acc = 0, bits = 0;

	if (auth == NULL || strncasecmp(auth, "Basic ", 6) != 0)
		return "";
	for (auth += 6; *auth == ' '; auth++)
		;
	for (; auth[n] != '\0' && auth[n] != '='; n++)
		if (strchr(b64, auth[n]) == NULL)
			return "";
	if (n == 0 || n % 4 == 1)
		return "";
	char *user = arena_dup(r, "", 0, NULL, n * 3 / 4), *p = user;
	for (size_t i = 0; i < n; i++) {
		acc = acc << 6 | (unsigned)(strchr(b64, auth[i]) - b64);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*p++ = (char)(acc >> bits & 0xff);
		}
	}
	*p = '\0';
	char *colon = memchr(user, ':', (size_t)(p - user));
	if (colon == NULL || colon == user)
		return "";
	*colon = '\0';
	return user;
}

/* The value of the last server parameter named name, or NULL. The parameters come after the
 * headers' variables, so a parameter wins over a header's (as pg_param() reads them). */
static const char *last_param(const struct pg_head *h, const char *name)
{
	size_t len = strlen(name);

	for (size_t i = h->nparams; i-- > 0;)
		if (h->params[i].name_len == len && memcmp(h->params[i].name, name, len) == 0)
			return h->params[i].value;
	return NULL;
}

/* Sizes the request's arena and takes from the head what every request needs: the content
 * type, the cookies and PHP_SELF. The server variables wait for pg_request_vars(): a worker
 * whose code never reads $_SERVER, getenv() or getallheaders() never needs them, and building
 * them was a tenth of a small request's instructions in direct mode. */
static void prepare_request(struct pg_request *r)
{
	const struct pg_head *h = &r->head;
	const char *auth = header_value(h, "authorization");
	size_t head_len = 0, cookies = 0;
	const char *cookie = NULL;

	/* Names (HTTP_ + name), joined values, PHP_SELF (two fields of the head), REMOTE_USER. */
	for (size_t i = 0; i < h->nheaders; i++) {
		head_len += h->headers[i].name_len + h->headers[i].value_len + 16;
		if (h->headers[i].name_len == 6 && memcmp(h->headers[i].name, "cookie", 6) == 0 && cookies++ == 0)
			cookie = h->headers[i].value;
	}
	r->arena_cap = head_len + r->head_len + (auth ? strlen(auth) : 0) + 64;
	r->arena = pg_xmalloc(r->arena_cap);
	r->content_type = header_value(h, "content-type");
	/* HTTP_COOKIE: a parameter of that name, or the Cookie headers joined with "; ". */
	r->cookie = last_param(h, "HTTP_COOKIE");
	if (r->cookie == NULL && cookies > 1) {
		pg_request_vars();
		r->cookie = pg_param("HTTP_COOKIE");
	} else if (r->cookie == NULL) {
		r->cookie = cookie;
	}

	/* PHP_SELF as FPM builds it with cgi.fix_pathinfo: SCRIPT_NAME then PATH_INFO. */
	const char *script = last_param(h, "SCRIPT_NAME"), *info = last_param(h, "PATH_INFO");
	r->php_self = script ? arena_dup(r, script, strlen(script), info ? info : "", info ? strlen(info) : 0)
			     : h->field[PG_PATH];
}

/* Builds the request's server variables, once, in the order FPM behind nginx registers them:
 * the fields of the frame, the headers, then the server parameters as given. Nothing without a
 * request. */
void pg_request_vars(void)
{
	struct pg_request *r = &pg.req;
	const struct pg_head *h = &r->head;
	const char *v;

	if (r->vars != NULL || r->arena == NULL)
		return;
	r->vars = pg_xmalloc((20 + h->nheaders + h->nparams) * sizeof(*r->vars));
	add_var(r, "FCGI_ROLE", "RESPONDER"); /* FPM's, from the FastCGI request's role */
	add_var(r, "REQUEST_METHOD", h->field[PG_METHOD]);
	add_var(r, "REQUEST_URI", h->field[PG_URI]);
	add_var(r, "QUERY_STRING", h->field[PG_QUERY]);
	add_var(r, "SERVER_PROTOCOL", h->field[PG_PROTOCOL]);
	add_var(r, "REQUEST_SCHEME", h->field[PG_SCHEME]);
	add_var(r, "REMOTE_ADDR", h->field[PG_REMOTE_ADDR]);
	add_var(r, "REMOTE_PORT", h->field[PG_REMOTE_PORT]);
	add_var(r, "SERVER_ADDR", h->field[PG_SERVER_ADDR]);
	add_var(r, "SERVER_PORT", h->field[PG_SERVER_PORT]);
	if (strcmp(h->field[PG_SCHEME], "https") == 0)
		add_var(r, "HTTPS", "on");
	add_var(r, "CONTENT_TYPE", r->content_type ? r->content_type : "");
	v = header_value(h, "content-length");
	add_var(r, "CONTENT_LENGTH", v ? v : "");
	add_var(r, "GATEWAY_INTERFACE", "CGI/1.1");
	add_var(r, "SERVER_SOFTWARE", "peregrine");
	add_var(r, "REMOTE_USER", remote_user(r, header_value(h, "authorization")));
	for (size_t i = 0; i < h->nheaders; i++)
		add_header_var(r, i);
	bool named = false;
	for (size_t i = 0; i < h->nparams; i++) {
		named = named || strcmp(h->params[i].name, "SERVER_NAME") == 0;
		r->vars[r->nvars++] = h->params[i];
	}
	if (!named) /* a worker script without http.root: the front passes no parameter */
		add_var(r, "SERVER_NAME", server_name(h));
}

bool pg_next_request(void)
{
	unsigned char hdr[12], lenbuf[4];

	pg_discard_body();
	if (pg.direct) /* direct.c reads requests from clients */
		return pg_direct_next();
	if (pg.eof || !read_full(hdr, sizeof(hdr))) {
		pg.stopped = true;
		return false;
	}
	if (hdr[0] != PG_VERSION)
		pg_protocol_error("frame header version is not 3");
	uint32_t len = get32(hdr + 8);
	if (hdr[1] == PG_STOP) {
		pg.req.body_left = len; /* a STOP carries nothing; skip whatever it has */
		pg_discard_body();
		pg.stopped = true;
		return false;
	}
	if (hdr[1] != PG_REQUEST)
		pg_protocol_error("expected a REQUEST or STOP frame");
	if (len < 4)
		pg_protocol_error("REQUEST payload shorter than its head length");
	read_full(lenbuf, 4);
	uint32_t head_len = get32(lenbuf);
	if (head_len > len - 4 || head_len > MAX_HEAD)
		pg_protocol_error("REQUEST head length exceeds the payload");

	char *head_buf = pg_xmalloc((size_t)head_len + 1);
	if (head_len > 0)
		read_full(head_buf, head_len);
	head_buf[head_len] = '\0';
	pg_request_load(get32(hdr + 4), head_buf, head_len, len - 4 - head_len, 0);
	return true;
}

/* Starts pg.req from a head in the REQUEST format (decode.h), NUL-terminated at head_len,
 * which it takes; body_len bytes of body follow, read with pg_read_body(). time: when the
 * request began (Unix seconds, REQUEST_TIME_FLOAT), or 0 for now. */
void pg_request_load(uint32_t id, char *head_buf, size_t head_len, uint64_t body_len, double time)
{
	struct pg_request *r = &pg.req;
	const char *err;

	memset(r, 0, sizeof(*r));
	r->id = id;
	r->body_left = body_len;
	r->head_len = head_len;
	r->head_buf = head_buf;
	if (pg_head_decode(&r->head, r->head_buf, head_len, &err) != 0)
		pg_protocol_error(err);
	if (time <= 0) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		time = (double)tv.tv_sec + tv.tv_usec / 1e6;
	}
	r->time = time;
	r->status = 200;
	prepare_request(r);
	pg.out_len = 0;
}

/* Sends the answer's next frame with the output collected so far: RESPONSE first, BODY after.
 * done appends the request's DONE frame (with flags done_flags) to the same write. */
static void emit(uint16_t flags, bool done, uint16_t done_flags)
{
	struct pg_request *r = &pg.req;
	struct iovec iov[5];
	unsigned char hdr[12] = {PG_VERSION}, pre[6], tail[12] = {PG_VERSION, PG_DONE};
	size_t len;
	int n;

	if (pg.direct) { /* HTTP to the client; no DONE: the server sent no REQUEST */
		pg_direct_emit(done ? 0 : flags);
		return;
	}
	if (r->started) {
		hdr[1] = PG_BODY;
		iov[1] = (struct iovec){pg.out, pg.out_len};
		len = pg.out_len;
		n = 2;
	} else {
		hdr[1] = PG_RESPONSE;
		put16(pre, (uint16_t)r->status);
		put32(pre + 2, (uint32_t)r->resp_head_len);
		iov[1] = (struct iovec){pre, sizeof(pre)};
		iov[2] = (struct iovec){r->resp_head, r->resp_head_len};
		iov[3] = (struct iovec){pg.out, pg.out_len};
		len = sizeof(pre) + r->resp_head_len + pg.out_len;
		n = 4;
		r->started = true;
	}
	put16(hdr + 2, flags);
	put32(hdr + 4, r->id);
	put32(hdr + 8, (uint32_t)len);
	iov[0] = (struct iovec){hdr, sizeof(hdr)};
	if (done) {
		put16(tail + 2, done_flags);
		put32(tail + 4, r->id);
		put32(tail + 8, 0);
		iov[n++] = (struct iovec){tail, sizeof(tail)};
	}
	write_all(iov, n);
	pg.out_len = 0;
}

void pg_emit(uint16_t flags)
{
	emit(flags, false, 0);
}

void pg_send_hints(const char *pairs, size_t len)
{
	struct iovec v = {(char *)pairs, len};

	if (pg.direct) {
		pg_direct_hints(pairs, len);
		return;
	}
	send_frame(PG_HINTS, 0, pg.req.id, &v, 1);
}

/* Ends the answer; the request goes on (fastcgi_finish_request()) until pg_request_end(). */
void pg_answer_finish(void)
{
	if (pg.req.finished)
		return;
	pg_emit(0);
	pg.req.finished = true;
}

/* Ends the request: its answer, if still open, and its DONE frame in one write. last says this
 * worker exits after it and reads no other request. */
void pg_request_end(bool last)
{
	uint16_t flags = last ? PG_FLAG_LAST : 0;

	if (pg.said_last)
		return;
	if (pg.direct && last)
		pg_direct_last();
	if (!pg.req.finished) {
		emit(0, true, flags);
		pg.req.finished = true;
	} else if (!pg.direct) {
		send_frame(PG_DONE, flags, pg.req.id, NULL, 0);
	}
	if (pg.direct)
		pg_direct_request_end();
	pg.last_id = pg.req.id;
	pg.said_last = last;
}

/* Says, once, that the worker exits and reads no request after the last one that ended, unless
 * the server asked it to stop: then nobody listens. */
void pg_say_exit(void)
{
	if (pg.said_last || pg.stopped || pg.active || !pg.ready_sent) /* before READY, the exit says it */
		return;
	send_frame(PG_DONE, PG_FLAG_LAST, pg.last_id, NULL, 0);
	pg.said_last = true;
}

void pg_request_free(void)
{
	struct pg_request *r = &pg.req;
	uint64_t body_left = r->body_left;

	pg_head_free(&r->head);
	free(r->resp_head);
	free(r->head_buf);
	free(r->arena);
	free(r->vars);
	memset(r, 0, sizeof(*r));
	r->body_left = body_left; /* discarded before the next frame is read */
}
