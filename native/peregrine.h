/* peregrine.h: the native PHP runtime's shared state and the functions its files share.
 *
 * The runtime serves one request at a time. A request's state lives in `struct pg_request`
 * from its REQUEST frame to its DONE frame; everything it owns is released by pg_request_free()
 * once the request has ended. */
#ifndef PEREGRINE_H
#define PEREGRINE_H

#include <stdbool.h>
#include <stdint.h>

#include "php.h"
#include "SAPI.h"

#include "zend_smart_string.h"

#include "decode.h"

/* Frame types and flags (docs/protocol.md). */
enum {
	PG_VERSION = 3,
	PG_READY = 1, PG_REQUEST = 2, PG_RESPONSE = 3, PG_STOP = 4, PG_ERROR = 5, PG_BODY = 6,
	PG_HINTS = 7, PG_DONE = 8, PG_CANCEL = 9,
	PG_FLAG_MORE = 1, PG_FLAG_FLUSH = 2, PG_FLAG_LAST = 4,
};

/* At most this much body goes in one RESPONSE or BODY frame. */
#define PG_BODY_CHUNK (1u << 20)

/* Exit status after a protocol error (EX_SOFTWARE), as the PHP library. */
#define PG_EXIT_PROTOCOL 70

struct pg_request {
	uint32_t id;
	char *head_buf;          /* the REQUEST head, NUL-terminated; `head` points into it */
	size_t head_len;
	struct pg_head head;
	struct pg_pair *vars;    /* what $_SERVER gets from the request, in order; NULL until pg_request_vars() */
	size_t nvars;
	char *arena;             /* derived names and joined values the vars point to */
	size_t arena_used, arena_cap;
	const char *cookie;      /* the Cookie headers joined with "; ", or NULL */
	const char *php_self;
	const char *content_type;
	uint64_t body_left;      /* request body bytes still in the pipe */
	double time;

	/* The answer: status and header pairs from send_headers, then the body in frames. */
	int status;
	char *resp_head;
	size_t resp_head_len;
	bool captured;           /* send_headers ran */
	bool started;            /* the RESPONSE frame is out; the rest goes in BODY frames */
	bool finished;           /* the answer is complete; later output is discarded */
};

struct pg_runtime {
	bool worker;             /* worker mode (a SCRIPT was given) rather than classic */
	bool active;             /* a request is being served */
	bool ready_sent;
	bool eof;                /* fd 3 is at its end: no request will follow */
	bool stopped;            /* STOP or end of input: the server expects nothing more */
	bool said_last;          /* a DONE with LAST went out: nothing more is written */
	bool direct;             /* direct mode: requests come from clients, not on fd 3 (direct.c) */
	int concurrency;         /* PEREGRINE_CONCURRENCY, read once at start (not per request) */
	uint32_t last_id;        /* the last request that ended (its DONE went out) */
	const char *script;
	struct pg_request req;
	char *out;               /* body not yet sent; PG_BODY_CHUNK bytes */
	size_t out_len;
};

extern struct pg_runtime pg;
extern sapi_module_struct pg_sapi;
extern const zend_function_entry pg_functions[];

/* frame.c: frames on fds 3 and 4. */
void *pg_xmalloc(size_t size);
void pg_send_ready(void);
ZEND_NORETURN void pg_protocol_error(const char *message);
bool pg_next_request(void);
size_t pg_read_body(char *buf, size_t count);
void pg_discard_body(void);
void pg_emit(uint16_t flags);
void pg_send_hints(const char *pairs, size_t len);
void pg_answer_finish(void);
void pg_request_end(bool last);
void pg_say_exit(void);
void pg_request_free(void);
void pg_request_load(uint32_t id, char *head_buf, size_t head_len, uint64_t body_len, double time);
void pg_request_vars(void);

/* direct.c: direct mode, the worker's own HTTP/1.1 event loop (docs/direct.md) */
bool pg_direct_init(void);
bool pg_direct_next(void);
size_t pg_direct_read_body(char *buf, size_t count);
void pg_direct_emit(uint16_t flags);
void pg_direct_hints(const char *pairs, size_t len);
void pg_direct_request_end(void);
void pg_direct_last(void);
bool pg_direct_fibers(void);
php_stream *pg_direct_stream(int fd);
bool pg_direct_full(uint32_t id);
size_t pg_direct_drained(const uint32_t **ids);

/* The request's fields as Peregrine\Http\Request has them, in the order of
 * peregrine_request()'s list (sapi.c): the values $_SERVER would have. */
enum {
	PG_F_METHOD, PG_F_URI, PG_F_PATH, PG_F_QUERY, PG_F_PROTOCOL, PG_F_REMOTE_ADDR, PG_F_REMOTE_PORT,
	PG_F_SERVER_ADDR, PG_F_SERVER_PORT, PG_F_SCHEME, PG_F_FORM, PG_F_CONTENT_TYPE, PG_F_CONTENT_LENGTH,
	PG_NFIELDS
};

struct pg_fields {
	const char *s[PG_NFIELDS]; /* into the request's buffers, or constants; not terminated for the path */
	size_t len[PG_NFIELDS];
};

/* sapi.c */
void pg_request_fields(struct pg_fields *out);
void pg_request_headers(zval *arr);
void pg_request_info_fill(void);
void pg_request_info_clear(void);
const char *pg_param(const char *name);
bool pg_fatal_error(void);

/* nativeserver.c */
PHP_FUNCTION(peregrine_request_object);
PHP_FUNCTION(peregrine_answer);
PHP_FUNCTION(peregrine_output_removable);

/* template.c: --template, the process workers are forked from */
void pg_template_reserve_fds(void);
bool pg_template_serve(void);

/* engine.c: PEREGRINE_PHP_ENGINE */
void pg_engine_exec(char **argv);
void pg_engine_keep(void);
bool pg_engine_matches(void);

/* worker.c */
int pg_worker_run(int argc, char **argv);
PHP_FUNCTION(peregrine_handle_request);

#endif
